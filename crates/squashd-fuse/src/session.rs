//! Mounting: the kernel mount options, the session and its threads, serving until the file
//! system is unmounted.

use crate::config::MountConfig;
use crate::fs::SquashFs;
use crate::fuse::FuseAdapter;
use crate::idle::{self, Activity};
use crate::mount_point::MountPoint;
use crate::probe::MountProbe;
use crate::server::{FuseMount, Running, Session};
use crate::unmount::Unmounter;
use squashd_core::Image;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Why a mount failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MountError {
    /// The image (or the `subdir` in it) could not be read.
    #[error(transparent)]
    Image(squashd_core::Error),
    /// The kernel refused the mount (the reason is the source).
    #[error("cannot mount on {}", .0.display())]
    Mount(PathBuf, #[source] io::Error),
    /// `uring=on`, and this kernel does not offer FUSE over io_uring (how to enable it).
    #[error("{0}")]
    Uring(String),
}

/// A mounted image whose requests are not served yet: call [`MountedImage::run`] or
/// [`MountedImage::start`].
///
/// Mounting starts no thread, so a daemon may fork between [`MountedImage::mount`] and
/// [`MountedImage::run`]; requests wait in the kernel until then.
pub struct MountedImage {
    session: Session<FuseAdapter>,
    threads: usize,
    mountpoint: PathBuf,
    /// The mount made, to unmount it and nothing else.
    mount: Arc<MountPoint>,
    activity: Option<Arc<Activity>>,
    idle_timeout: Option<Duration>,
    probe: MountProbe,
}

impl std::fmt::Debug for MountedImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MountedImage")
            .field("mountpoint", &self.mountpoint)
            .finish_non_exhaustive()
    }
}

impl MountedImage {
    /// Mounts `image` on `mountpoint` (read-only), checking first that its root can be read.
    pub fn mount(
        image: Image,
        mountpoint: &Path,
        config: &MountConfig,
    ) -> Result<MountedImage, MountError> {
        let mountpoint = mountpoint
            .canonicalize()
            .map_err(|e| MountError::Mount(mountpoint.to_path_buf(), e))?;
        Self::mount_through(image, &mountpoint, &mountpoint, config)
    }

    /// Mounts `image` on the directory `target` leads to, known as `mountpoint` (canonical)
    /// for unmounting and reports. A daemon that checked a directory through an open
    /// descriptor passes `/proc/self/fd/N` as `target`, so that the mount lands on the very
    /// directory it checked even if the path was changed meanwhile.
    pub fn mount_through(
        image: Image,
        target: &Path,
        mountpoint: &Path,
        config: &MountConfig,
    ) -> Result<MountedImage, MountError> {
        config.uring.check().map_err(MountError::Uring)?;
        let fs = SquashFs::new(image, config).map_err(MountError::Image)?;
        let activity = fs.activity();
        let probe = fs.probe();
        let notifier_slot = fs.notifier_slot();
        let mountpoint = mountpoint.to_path_buf();
        let mut options = vec![
            "ro".to_string(),
            // Permissions are checked by the kernel from the mode bits, as for its squashfs.
            "default_permissions".to_string(),
        ];
        options.extend(config.flags.iter().cloned());
        let mount = FuseMount {
            fsname: config.fsname.clone(),
            // /proc/mounts then shows the type "fuse.squashd", as `mount -t fuse.squashd`
            // names it.
            subtype: "squashd".into(),
            options,
            // allow_root has no kernel form: the adapter keeps the users other than the owner
            // and root out.
            allow_other: config.allow_other || config.allow_root,
            owner: config.owner,
        };
        let device = mount
            .mount(target)
            .map_err(|e| MountError::Mount(mountpoint.clone(), e))?;
        // At once, before anyone could unmount it: every later unmount is of this mount.
        let recorded = MountPoint::record(target, &mountpoint)
            .map_err(|e| MountError::Mount(mountpoint.clone(), e))?;
        let owner_uid = config
            .owner
            .map_or_else(|| rustix::process::geteuid().as_raw(), |o| o.uid);
        let admitted = (config.allow_root && !config.allow_other).then_some(owner_uid);
        // Should the handshake fail, dropping the session ends the connection: what is left
        // on the target answers ENOTCONN and is cleared as a dead squashd mount by the next
        // attach there.
        let session = Session::new(FuseAdapter::new(fs, admitted), device).with_uring(config.uring);
        let _ = notifier_slot.set(session.notifier());
        Ok(MountedImage {
            probe,
            session,
            threads: config.threads.max(1),
            mountpoint,
            mount: Arc::new(recorded),
            activity,
            idle_timeout: config.idle_timeout,
        })
    }

    /// The (canonical) mount point.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Live figures of the mount (open handles, failed requests), valid after `run` starts.
    pub fn probe(&self) -> MountProbe {
        self.probe.clone()
    }

    /// A handle that unmounts this file system from any thread (e.g. a signal handler's).
    pub fn unmounter(&self) -> Unmounter {
        Unmounter {
            mount: self.mount.clone(),
        }
    }

    /// Serves requests until the file system is unmounted (by `umount`, an [`Unmounter`] or
    /// the idle timeout).
    pub fn run(self) -> io::Result<()> {
        self.start()?.wait()
    }

    /// Starts serving requests on the session's request threads and returns at once: the
    /// caller needs no thread of its own to wait on the mount (a daemon serving dozens of
    /// images saves one per image). [`Serving::wait`] (or [`Serving::wait_in_background`])
    /// joins the threads once the mount is gone.
    pub fn start(self) -> io::Result<Serving> {
        let done = Arc::new(AtomicBool::new(false));
        if let (Some(activity), Some(timeout)) = (self.activity.clone(), self.idle_timeout) {
            idle::start_timer(activity, timeout, self.unmounter(), done.clone())?;
        }
        // Nothing here unmounts when the session ends: our own unmount paths (umount(8),
        // signals, the idle timer, a detach) do, each of the very mount made.
        let running = self.session.start(self.threads, "squashd-fuse")?;
        self.probe.set_transport(running.transport_probe());
        Ok(Serving { running, done })
    }
}

/// A mount being served by its session's request threads (see [`MountedImage::start`]).
#[derive(Debug)]
pub struct Serving {
    running: Running,
    done: Arc<AtomicBool>,
}

impl Serving {
    /// Whether the session is over (the file system was unmounted, by squashd or anyone
    /// else, and its last user has gone): [`Serving::wait`] then returns at once.
    pub fn is_over(&self) -> bool {
        self.running.is_over()
    }

    /// Waits until the file system is unmounted and its request threads have ended. The
    /// connection's /dev/fuse descriptors close with the last thread (and the page store's
    /// notifier, which the file system drops with it).
    pub fn wait(self) -> io::Result<()> {
        let result = self.running.wait();
        self.done.store(true, Ordering::Relaxed);
        result
    }

    /// Waits on a thread of its own (for a lazy unmount, whose session ends only once the
    /// mount's last user is gone), logging an error under `name`.
    pub fn wait_in_background(self, name: String) -> io::Result<()> {
        std::thread::Builder::new()
            .name("serving-reaper".into())
            .spawn(move || {
                if let Err(e) = self.wait() {
                    // Not eprintln!: it panics when stderr is gone.
                    use std::io::Write as _;
                    let _ = writeln!(std::io::stderr(), "squashd: {name}: {e}");
                }
            })
            .map(drop)
    }
}
