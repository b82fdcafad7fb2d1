//! Mounting: the kernel mount options, the session and its threads, serving until the file
//! system is unmounted.

use crate::config::MountConfig;
use crate::fs::SquashFs;
use crate::fuse::FuseAdapter;
use crate::idle::{self, Activity};
use crate::mount_point::MountPoint;
use crate::probe::MountProbe;
use crate::unmount::Unmounter;
use fuser::{Config, MountOption, SessionACL};
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
}

/// A mounted image whose requests are not served yet: call [`MountedImage::run`] or
/// [`MountedImage::start`].
///
/// Mounting starts no thread, so a daemon may fork between [`MountedImage::mount`] and
/// [`MountedImage::run`]; requests wait in the kernel until then.
pub struct MountedImage {
    session: fuser::Session<FuseAdapter>,
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
        let fs = SquashFs::new(image, config).map_err(MountError::Image)?;
        let activity = fs.activity();
        let probe = fs.probe();
        let notifier_slot = fs.notifier_slot();
        let mountpoint = mountpoint.to_path_buf();
        let mut options = vec![
            MountOption::RO,
            MountOption::FSName(config.fsname.clone()),
            // A kernel option (fuser's Subtype goes to fusermount only): /proc/mounts then
            // shows the type "fuse.squashd", as `mount -t fuse.squashd` names it.
            MountOption::CUSTOM("subtype=squashd".into()),
            // Permissions are checked by the kernel from the mode bits, as for its squashfs.
            MountOption::DefaultPermissions,
        ];
        for flag in &config.flags {
            options.push(match flag.as_str() {
                "dev" => MountOption::Dev,
                "nodev" => MountOption::NoDev,
                "suid" => MountOption::Suid,
                "nosuid" => MountOption::NoSuid,
                "exec" => MountOption::Exec,
                "noexec" => MountOption::NoExec,
                "atime" => MountOption::Atime,
                "noatime" => MountOption::NoAtime,
                other => MountOption::CUSTOM(other.to_string()),
            });
        }
        let mut fuse_config = Config::default();
        fuse_config.mount_options = options;
        fuse_config.acl = if config.allow_other {
            SessionACL::All
        } else if config.allow_root {
            SessionACL::RootAndOwner
        } else {
            SessionACL::Owner
        };
        fuse_config.n_threads = Some(config.threads.max(1));
        // One /dev/fuse descriptor per thread: requests still come from one queue per mount,
        // but each descriptor has its own list of requests being processed, so replies from
        // different threads do not contend on one lock.
        fuse_config.clone_fd = true;
        let session = match config.owner {
            None => fuser::Session::new(FuseAdapter::new(fs, None), target, &fuse_config),
            Some(owner) => {
                // allow_root has no kernel form (see owned_mount.rs): the adapter keeps the
                // users other than the owner and root out.
                let admitted = (config.allow_root && !config.allow_other).then_some(owner.uid);
                crate::owned_mount::session_for(
                    FuseAdapter::new(fs, admitted),
                    target,
                    owner,
                    &fuse_config.mount_options,
                    config.allow_other || config.allow_root,
                    &fuse_config,
                )
            }
        }
        .map_err(|e| MountError::Mount(mountpoint.clone(), e))?;
        // At once, before anyone could unmount it: every later unmount is of this mount.
        let mount = MountPoint::record(target, &mountpoint)
            .map_err(|e| MountError::Mount(mountpoint.clone(), e))?;
        let _ = notifier_slot.set(session.notifier());
        Ok(MountedImage {
            probe,
            session,
            mountpoint,
            mount: Arc::new(mount),
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

    /// Starts serving requests on fuser's session threads and returns at once: the caller
    /// needs no thread of its own to wait on the mount (a daemon serving dozens of images
    /// saves one per image). [`Serving::wait`] (or [`Serving::wait_in_background`]) must be
    /// called to release the session's /dev/fuse descriptor once the mount is gone.
    pub fn start(self) -> io::Result<Serving> {
        let done = Arc::new(AtomicBool::new(false));
        if let (Some(activity), Some(timeout)) = (self.activity.clone(), self.idle_timeout) {
            idle::start_timer(activity, timeout, self.unmounter(), done.clone())?;
        }
        // fuser unmounts the mount point when its session ends, after checking that the mount
        // is still there; fuser 0.18's check is inverted (it reads the POLLERR of a dead
        // connection as "mounted"), so a session ending after `umount` would unmount whatever
        // was mounted on the same path since (the next mount of a mount/umount loop). The
        // spawned session holds the mount in its handle, which is never dropped: our own
        // unmount paths (umount(8), signals, the idle timer) do the unmounting. This leaks the
        // handle's /dev/fuse descriptor, which `wait` closes once the session is over.
        let device = {
            use std::os::fd::{AsFd, AsRawFd};
            self.session.as_fd().as_raw_fd()
        };
        let background = std::mem::ManuallyDrop::new(self.session.spawn()?);
        // SAFETY: moves the join handle out of a value that is never dropped nor used again,
        // so the handle has exactly one owner.
        let thread = unsafe { std::ptr::read(&background.guard) };
        Ok(Serving {
            thread,
            device,
            done,
        })
    }
}

/// A mount being served by fuser's session threads (see [`MountedImage::start`]).
#[derive(Debug)]
pub struct Serving {
    thread: std::thread::JoinHandle<io::Result<()>>,
    device: std::os::fd::RawFd,
    done: Arc<AtomicBool>,
}

impl Serving {
    /// Whether the session is over (the file system was unmounted, by squashd or anyone
    /// else, and its last user has gone): [`Serving::wait`] then returns at once.
    pub fn is_over(&self) -> bool {
        self.thread.is_finished()
    }

    /// Waits until the file system is unmounted and its session threads have ended, then
    /// releases its /dev/fuse descriptor.
    pub fn wait(self) -> io::Result<()> {
        let result = self
            .thread
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the FUSE session thread panicked")));
        if result.is_ok() {
            // A daemon attaching and detaching images would otherwise leak one descriptor per
            // mount.
            // SAFETY: the session ended without error, so fuser joined every request
            // thread and dropped the session's own channel: the only owners of `device` left are
            // the never-dropped, never-used handle of `start` (its notifier sender and its mount
            // record). Nothing can use or close the descriptor after this close. (On an error,
            // a panicked request thread may have left others running: keep the leak.)
            unsafe { libc::close(self.device) };
        }
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
