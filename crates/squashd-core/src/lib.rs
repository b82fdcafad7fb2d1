//! squashd-core: a SquashFS 4.0 reader built for many threads reading many images at once.
//!
//! Layers, bottom up: [`source`] (positioned reads, no seek lock), [`format`](mod@format) (pure
//! parsing of on-disk structures), [`compress`] (the six codecs, contexts pooled across threads),
//! [`cache`] (byte-budgeted single-flight caches with counters), and [`Image`], the API the
//! tools, the FUSE adapter and the daemon use. Beside them, [`read_ahead`] decompresses ahead of
//! streaming readers on a pool of [`workers`] where that pays, for whatever serves reads (the
//! FUSE mount, the kernel path's blob), and [`read_policy`] decides, for a reader whose page
//! cache keeps what it reads, which blocks go through the data cache.
//!
//! ```no_run
//! use squashd_core::{Image, OpenOptions};
//! let image = Image::open("usr.sqfs", &OpenOptions::default())?;
//! let root = image.root()?;
//! for entry in image.read_dir(&root)? {
//!     println!("{}", String::from_utf8_lossy(&entry.name));
//! }
//! let file = image.resolve_path(b"bin/ls")?;
//! let mut buf = vec![0; 4096];
//! let n = image.open_file(&file)?.read_at(0, &mut buf)?;
//! # Ok::<(), squashd_core::Error>(())
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod cache;
pub mod compress;
pub mod container;
mod error;
pub mod format;
mod image;
pub mod read_ahead;
pub mod read_policy;
pub mod source;
pub mod verity;
pub mod workers;

pub use cache::CacheStats;

/// The number of cores this process may use, asked once: `available_parallelism` reads cgroup
/// files on every call, and a daemon attaching dozens of images would ask dozens of times.
pub fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
}
pub use error::{Error, ErrorKind, Result};
pub use format::compressor_options::CompressorOptions;
pub use format::inode::FileKind;
pub use format::superblock::{Compressor, Flags, Superblock};
pub use image::{
    CacheBudgets, Caches, Chunk, ChunkRead, DirEntry, FileReader, Image, ImageStats, Inode,
    InodeId, OpenOptions, Xattr,
};
pub use read_ahead::ReadAheadStats;
