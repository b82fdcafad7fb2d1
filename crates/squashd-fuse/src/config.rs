//! How to mount an image: the options shared by the file system (subdir, owner, read-ahead) and
//! the session (threads, kernel mount flags, idle timeout).

use std::path::PathBuf;
use std::time::Duration;

/// How to mount an image.
#[derive(Debug, Clone)]
pub struct MountConfig {
    /// Serve this directory of the image as the root (a path inside the image).
    pub subdir: Option<PathBuf>,
    /// Show every file as owned by this user.
    pub uid: Option<u32>,
    /// Show every file as owned by this group.
    pub gid: Option<u32>,
    /// Let users other than the one who mounted access the file system.
    pub allow_other: bool,
    /// Let root access the file system too, besides the user who mounted (ignored with
    /// `allow_other`, which lets everyone in).
    pub allow_root: bool,
    /// Threads serving FUSE requests (each with its own cloned /dev/fuse descriptor).
    pub threads: usize,
    /// Threads decompressing ahead of sequential readers (0: no read-ahead).
    pub read_ahead_threads: usize,
    /// How far ahead of a sequential reader to decompress, in bytes.
    pub read_ahead_bytes: u64,
    /// The source shown in /proc/mounts (usually the image's path).
    pub fsname: String,
    /// Unmount after this long without a request (a busy mount stays).
    pub idle_timeout: Option<Duration>,
    /// Generic mount flags to pass on: `dev`, `suid`, `noexec`, `noatime`... The mount is
    /// always read-only, `nodev` and `nosuid` unless asked otherwise.
    pub flags: Vec<String>,
    /// The user a privileged process mounts for (a daemon serving users): the mount then
    /// belongs to that user as if fusermount3 had made it for them, and the kernel lets in
    /// that user alone (others only with `allow_other`, root also with `allow_root`). None:
    /// the mount belongs to the process that makes it.
    pub owner: Option<MountOwner>,
    /// FUSE over io_uring: `Auto` uses it when the kernel offers it (`fuse.enable_uring=1`);
    /// `On` refuses to mount without it.
    pub uring: crate::server::UringMode,
    /// What tells read-ahead and the random sweep that the CPUs are busy (tests turn it off,
    /// so that their counts do not depend on what else the machine runs).
    pub cpu_gauge: squashd_core::read_ahead::CpuGauge,
    /// Which entries of a listing reach the kernel with their attributes.
    pub listing_attrs: ListingAttrs,
}

/// Which entries of a listing (READDIRPLUS) reach the kernel with their attributes, making
/// its dentries and inodes (see the `listing_attrs` module).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ListingAttrs {
    /// Directories always; other entries while the mount's walks stat what they list.
    #[default]
    Auto,
    /// Every entry: for workloads known to stat everything they list.
    All,
}

impl ListingAttrs {
    /// Parses `auto` or `all`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "auto" => Some(ListingAttrs::Auto),
            "all" => Some(ListingAttrs::All),
            _ => None,
        }
    }
}

/// Whom a mount belongs to: the kernel's FUSE `user_id` and `group_id`. Without `allow_other`
/// it admits only processes whose real, effective and saved ids are these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MountOwner {
    /// The user's id.
    pub uid: u32,
    /// The user's primary group id.
    pub gid: u32,
}

impl Default for MountConfig {
    fn default() -> Self {
        let cores = squashd_core::cores();
        MountConfig {
            subdir: None,
            uid: None,
            gid: None,
            allow_other: false,
            allow_root: false,
            // One thread per core: more threads measured slower for many parallel `find`s
            // (and no faster for one), as every request then wakes a cold thread (measured:
            // bench/results/notes-from-code-comments.md, "request threads"). Read-ahead has
            // threads of its own, so readers rarely block a worker on decompression.
            threads: cores.max(2),
            read_ahead_threads: cores,
            read_ahead_bytes: 2 << 20,
            fsname: "squashd".into(),
            idle_timeout: None,
            flags: Vec::new(),
            owner: None,
            uring: crate::server::UringMode::Auto,
            cpu_gauge: squashd_core::read_ahead::CpuGauge::default(),
            listing_attrs: ListingAttrs::Auto,
        }
    }
}
