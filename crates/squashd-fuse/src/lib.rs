//! squashd-fuse: serves a [`squashd_core::Image`] to the kernel through FUSE, read-only, from
//! several threads at once.
//!
//! It knows nothing of the on-disk format: it maps FUSE requests to `Image` calls
//! (`lookup`, `inode`, `read_dir`, `read_link`, `xattrs`, `open_file`) and shapes the replies so
//! that the kernel caches as much as it can. An image never changes, so entries and attributes
//! are given (practically) infinite timeouts, failed lookups are cached as negative entries,
//! the page cache is kept across opens (`FOPEN_KEEP_CACHE`), directory listings are cached
//! (`FOPEN_CACHE_DIR`), and `readdirplus` hands the kernel each entry's attributes with the
//! listing. Repeated walks and reads then never reach the daemon.
//!
//! Readers streaming through a file get the following blocks decompressed ahead of them by a
//! small pool of background threads, where the core's read-ahead policy says it pays (see
//! [`squashd_core::read_ahead`]), bounded in flight and by the data cache's byte budget.
//!
//! ```no_run
//! use squashd_core::{Image, OpenOptions};
//! use squashd_fuse::{MountConfig, MountedImage};
//! let image = Image::open("usr.sqfs", &OpenOptions::default())?;
//! let mounted = MountedImage::mount(image, "/mnt/usr".as_ref(), &MountConfig::default())?;
//! let unmounter = mounted.unmounter();
//! // ... from a signal handler thread: unmounter.unmount(true)
//! mounted.run()?; // serves requests until the file system is unmounted
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Layers
//!
//! - [`fs`]: the file system, [`SquashFs`]. Each operation (lookup, getattr, open, read,
//!   readdir...) returns a `Result` whose error carries the errno ([`FsError`]); no FUSE reply
//!   object is involved, so the answers are tested in-process (`tests/answers.rs`), without
//!   root or /dev/fuse. It stands on the served tree (node ids to inodes and attributes), the
//!   open files (with read-ahead and the page store, whose background threads share one
//!   pool shape) and the directories (listings, with their locks and the no-opendir cache).
//! - `fuse`: the adapter, which only turns requests into those calls and results into
//!   answers, and says what to ask of the kernel at INIT.
//! - [`server`]: squashd's own FUSE session (the protocol, the dispatcher, the /dev/fuse
//!   transport, mounting), which the kernel path's blob file system stands on too.
//! - [`MountedImage`]: the session (kernel mount options, threads, the idle timeout) and
//!   [`Unmounter`], which unmounts the very mount made ([`MountPoint`]: not whatever the mount
//!   point's path leads to later).
//!
//! What a mount gives, in POSIX terms, is written down in `doc/SEMANTICS.md` of this crate.
//!
//! Inode numbers: FUSE (and `fuser`) use one number both as the kernel's node id and as
//! `st_ino`, and the root must be node 1. squashd shows each inode's squashfs inode number, as
//! the kernel's squashfs does, except that the root directory's number and number 1 are
//! swapped (the root shows `st_ino` 1 and the inode numbered 1 shows the root's number).

#![deny(missing_docs)]

mod answers;
mod attr;
mod config;
mod dirs;
mod error;
mod files;
pub mod fs;
mod fuse;
pub mod handles;
mod idle;
mod listing_attrs;
mod listings;
mod mount_point;
mod nodes;
pub mod page_store;
mod probe;
pub mod server;
mod session;
mod sweep;
mod tree;
mod unmount;

pub use config::{ListingAttrs, MountConfig, MountOwner};
pub use error::{FsError, FsResult};
pub use fs::SquashFs;
pub use fuse::FuseAdapter;
pub use handles::HandleTable;
pub use mount_point::{MountPoint, NotOurMount};
pub use probe::MountProbe;
pub use session::{MountError, MountedImage, Serving};
pub use unmount::Unmounter;
