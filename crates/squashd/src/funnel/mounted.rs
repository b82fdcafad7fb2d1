//! One mounted image, on either path: a FUSE session of its own, or a kernel EROFS mount on a
//! blob file system. A lone mount and the daemon's registry hold these and do not care which.

use crate::control::report::Probe;
use squashd_fuse::{MountedImage, Serving, Unmounter};
use squashd_kernel::KernelMount;
use std::io;
use std::path::Path;
use std::sync::Arc;

/// A mount the daemon made.
pub(crate) enum Mounted {
    /// Served by FUSE: the session's threads answer every request.
    Fuse {
        unmounter: Unmounter,
        serving: Serving,
    },
    /// Served by the kernel's EROFS; squashd answers its blob reads.
    Kernel(Arc<KernelMount>),
}

impl Mounted {
    /// Starts serving a FUSE mount, and its probe.
    pub(crate) fn start_fuse(mounted: MountedImage) -> io::Result<(Mounted, Probe)> {
        let unmounter = mounted.unmounter();
        let probe = Probe::Fuse(mounted.probe());
        // The session's request threads serve the mount; no thread of ours waits on each image.
        let serving = mounted.start()?;
        Ok((Mounted::Fuse { unmounter, serving }, probe))
    }

    /// Unmounts; `lazy` detaches even while busy. On success the mount is gone from the
    /// namespace; call [`Mounted::finish`] next. Only the mount the daemon made: if its mount
    /// point leads elsewhere now, nothing is unmounted and the error is a
    /// [`squashd_fuse::NotOurMount`].
    pub(crate) fn unmount(&self, lazy: bool) -> io::Result<()> {
        match self {
            Mounted::Fuse { unmounter, .. } => unmounter.unmount(lazy),
            Mounted::Kernel(k) => k.unmount(lazy),
        }
    }

    /// Whether the mount is gone and nothing uses it any more, however it went (the idle
    /// timeout, or `umount` by someone else): [`Mounted::finish`] then has nothing to wait for.
    pub(crate) fn is_over(&self) -> bool {
        match self {
            Mounted::Fuse { serving, .. } => serving.is_over(),
            Mounted::Kernel(k) => !k.in_use(),
        }
    }

    /// Releases what served the mount once it is unmounted: a FUSE session ends (at once, or
    /// once its last user has gone for a lazy unmount); the kernel path's files went with
    /// [`Mounted::unmount`].
    pub(crate) fn finish(self, lazy: bool, name: &Path) {
        match self {
            Mounted::Fuse { serving, .. } => {
                let name = name.display().to_string();
                if lazy {
                    let _ = serving.wait_in_background(name);
                } else if let Err(e) = serving.wait() {
                    log_line!("squashd serve: {name}: {e}");
                }
            }
            // Unmounted by someone else, its files are still to be removed (at once: the
            // kernel has let go of them).
            Mounted::Kernel(k) if !k.in_use() => k.wait_unmounted(),
            Mounted::Kernel(_) => {}
        }
    }

    /// A handle that unmounts it from another thread (a signal watcher's).
    pub(crate) fn unmount_handle(&self) -> UnmountHandle {
        match self {
            Mounted::Fuse { unmounter, .. } => UnmountHandle::Fuse(unmounter.clone()),
            Mounted::Kernel(k) => UnmountHandle::Kernel(k.clone()),
        }
    }

    /// Waits until the mount is gone (unmounted, and its last user gone) and what served it
    /// has ended: a lone mount's life.
    pub(crate) fn wait(self) -> io::Result<()> {
        match self {
            Mounted::Fuse { serving, .. } => serving.wait(),
            Mounted::Kernel(k) => {
                k.wait_unmounted();
                Ok(())
            }
        }
    }

    /// Takes down a mount that will not be kept (it did not answer, or lost a race).
    pub(crate) fn abandon(self, name: &Path) {
        let _ = self.unmount(true);
        self.finish(true, name);
    }
}

/// Unmounts a [`Mounted`] from another thread.
pub(crate) enum UnmountHandle {
    Fuse(Unmounter),
    Kernel(Arc<KernelMount>),
}

impl UnmountHandle {
    /// Unmounts; `lazy` detaches even while busy.
    pub(crate) fn unmount(&self, lazy: bool) -> io::Result<()> {
        match self {
            UnmountHandle::Fuse(u) => u.unmount(lazy),
            UnmountHandle::Kernel(k) => k.unmount(lazy),
        }
    }
}
