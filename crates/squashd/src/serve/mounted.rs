//! One attached image's mount, on either path: a FUSE session of its own, or a kernel EROFS
//! mount on the daemon's blob file system. The registry holds these and does not care which.

use crate::control::report::Probe;
use squashd_fuse::{MountedImage, Serving, Unmounter};
use squashd_kernel::KernelMount;
use std::io;
use std::path::Path;
use std::sync::Arc;

/// A mount the daemon made.
pub(super) enum Mounted {
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
    pub(super) fn start_fuse(mounted: MountedImage) -> io::Result<(Mounted, Probe)> {
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
    pub(super) fn unmount(&self, lazy: bool) -> io::Result<()> {
        match self {
            Mounted::Fuse { unmounter, .. } => unmounter.unmount(lazy),
            Mounted::Kernel(k) => k.unmount(lazy),
        }
    }

    /// Whether the mount is gone and nothing uses it any more, however it went (the idle
    /// timeout, or `umount` by someone else): [`Mounted::finish`] then has nothing to wait for.
    pub(super) fn is_over(&self) -> bool {
        match self {
            Mounted::Fuse { serving, .. } => serving.is_over(),
            Mounted::Kernel(k) => !k.in_use(),
        }
    }

    /// Releases what served the mount once it is unmounted: a FUSE session ends (at once, or
    /// once its last user has gone for a lazy unmount); the kernel path's files went with
    /// [`Mounted::unmount`].
    pub(super) fn finish(self, lazy: bool, name: &Path) {
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

    /// Takes down a mount that will not be kept (it did not answer, or lost a race).
    pub(super) fn abandon(self, name: &Path) {
        let _ = self.unmount(true);
        self.finish(true, name);
    }
}
