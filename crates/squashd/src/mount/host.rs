//! What a lone `squashd mount` gives the mount funnel ([`crate::funnel`]): the kernel path only
//! as root, a blob file system of its own per process (the kernel path: the image's metadata
//! translated into an EROFS metadata image, its file data served by this process, see
//! squashd-kernel), the fork to the background before any thread starts, and a probe with a
//! lone mount's patience.

use crate::daemonize::{daemonize, WaitingParent};
use crate::funnel::MountHost;
use crate::readiness::root_answers;
use anyhow::Context;
use squashd_fuse::server::UringMode;
use squashd_fuse::MountOwner;
use squashd_kernel::KernelPath;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Where lone kernel-path mounts keep their blob file systems, one directory per process.
const BLOB_DIRS: &str = "/run/squashd";

/// How long a fresh FUSE mount has to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// A lone mount's side of the funnel; it owns the blob file system of a kernel-path mount,
/// which goes (with its directory) when this is dropped, after the mount ended.
pub(crate) struct LoneHost {
    /// Stay in the foreground (`-f`): no fork.
    foreground: bool,
    /// Whether `before_threads` ran.
    forked: bool,
    /// The caller waiting in the foreground for a background mount to answer.
    parent: Option<WaitingParent>,
    blob_fs: Option<Arc<KernelPath>>,
}

impl LoneHost {
    /// A host for a mount in the foreground, or one that goes to the background.
    pub(crate) fn new(foreground: bool) -> Self {
        LoneHost {
            foreground,
            forked: false,
            parent: None,
            blob_fs: None,
        }
    }

    /// The caller waiting for a background mount, to be told it answers.
    pub(crate) fn take_parent(&mut self) -> Option<WaitingParent> {
        self.parent.take()
    }

    fn drop_blob_fs(&mut self) {
        if self.blob_fs.take().is_some() {
            let _ = std::fs::remove_dir(blob_dir());
        }
    }
}

impl Drop for LoneHost {
    fn drop(&mut self) {
        self.drop_blob_fs();
    }
}

impl MountHost for LoneHost {
    fn who(&self) -> &'static str {
        "squashd"
    }

    fn privileged(&self) -> bool {
        nix::unistd::geteuid().is_root()
    }

    fn before_threads(&mut self) -> anyhow::Result<()> {
        if !self.forked {
            self.forked = true;
            if !self.foreground {
                self.parent = Some(daemonize()?);
            }
        }
        Ok(())
    }

    fn blob_fs(&mut self, uring: UringMode) -> anyhow::Result<Arc<KernelPath>> {
        if let Some(started) = &self.blob_fs {
            return Ok(started.clone());
        }
        clear_dead_lone_mounts();
        let dir = blob_dir();
        let started = KernelPath::start(&dir, squashd_core::cores(), uring)
            .with_context(|| format!("{}: cannot mount the blob file system", dir.display()))?;
        let started = Arc::new(started);
        self.blob_fs = Some(started.clone());
        Ok(started)
    }

    fn kernel_path_abandoned(&mut self) {
        self.drop_blob_fs();
    }

    fn answers(&self, mountpoint: &Path, _owner: Option<MountOwner>) -> bool {
        root_answers(mountpoint, ANSWER_TIMEOUT)
    }
}

/// Where this process keeps its blob file system.
fn blob_dir() -> PathBuf {
    Path::new(BLOB_DIRS).join(format!("mount-{}", std::process::id()))
}

/// Clears what lone kernel-path mounts killed before they could clean up left behind: the
/// EROFS mounts on their blob file systems (which fail every read that misses the page cache)
/// and the dead blob file systems themselves. A blob file system whose process is gone answers
/// ENOTCONN (its pid may linger as a zombie, so the pid is no test).
fn clear_dead_lone_mounts() {
    let Ok(entries) = std::fs::read_dir(BLOB_DIRS) else {
        return;
    };
    for entry in entries.flatten() {
        let is_blob_dir = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with("mount-"));
        let dead =
            nix::sys::statfs::statfs(&entry.path()).err() == Some(nix::errno::Errno::ENOTCONN);
        if is_blob_dir && dead {
            crate::dead_mounts::clear_dead_kernel_mounts(&entry.path());
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}
