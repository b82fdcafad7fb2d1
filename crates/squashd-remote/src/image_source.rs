//! An image's bytes opened as every front end takes them (the `squashd` binary, the Python
//! package): a local file or an `http(s)://` / `s3://` address, and where in it the image
//! starts — at the offset given, else where its container (AppImage, SIF, GPT) says. A remote
//! image's metadata is fetched whole before [`open_image`] returns, and remote images naming
//! one disk-cache directory share one [`DiskCache`] per process.
//!
//! ```no_run
//! use squashd_remote::image_source::{open_image, ImageSourceOptions};
//! let opened = open_image(
//!     std::path::Path::new("https://example.org/env.sqfs"),
//!     None,
//!     None,
//!     &ImageSourceOptions::default(),
//! )?;
//! println!("{} starts at byte {}", opened.name, opened.offset);
//! # Ok::<(), squashd_remote::image_source::OpenImageError>(())
//! ```

use crate::disk_cache::{DiskCache, DiskCacheError, DiskCacheStats};
use crate::{is_remote, Location, RemoteOptions, RemoteSource};
use rustix::io::Errno;
use squashd_core::container::{locate, ContainerError, Located};
use squashd_core::source::{FileSource, Source};
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// How [`open_image`] opens a remote image (a local one ignores them).
#[derive(Debug, Clone)]
pub struct ImageSourceOptions {
    /// Fetching and memory settings; its `disk_cache` is replaced by the one below.
    pub remote: RemoteOptions,
    /// The disk cache's directory; none keeps fetched units in memory only.
    pub disk_cache_dir: Option<PathBuf>,
    /// The disk cache's budget in bytes (the first given for a directory holds).
    pub disk_cache_bytes: u64,
}

impl Default for ImageSourceOptions {
    fn default() -> Self {
        ImageSourceOptions {
            remote: RemoteOptions::default(),
            disk_cache_dir: None,
            disk_cache_bytes: 4 << 30,
        }
    }
}

/// An image's bytes, opened, and where the image starts in them.
pub struct OpenedImage {
    /// What the image is read from.
    pub source: Box<dyn Source>,
    /// The same source, when remote, for its counters.
    pub remote: Option<RemoteSource>,
    /// Where the image starts in it.
    pub offset: u64,
    /// Where its container says the image is (None when an offset was given).
    pub located: Option<Located>,
    /// The image's name in messages: a path, or an address without its secrets.
    pub name: Arc<str>,
}

/// Why an image could not be opened; each message is one line naming the image.
#[derive(Debug, thiserror::Error)]
pub enum OpenImageError {
    /// A local file could not be opened.
    #[error("{name}: cannot open: {error}")]
    Open {
        /// The path.
        name: String,
        /// Why.
        error: io::Error,
    },
    /// A remote address that does not parse (the message names it).
    #[error("{0}")]
    Address(String),
    /// A remote object that could not be opened (the message names it).
    #[error("{0}")]
    Remote(String),
    /// No image found in the container, or a choice to make (`partition`).
    #[error("{name}: {error}")]
    Container {
        /// The image's name.
        name: Arc<str>,
        /// What the container said.
        error: ContainerError,
    },
    /// A remote image's metadata could not be fetched.
    #[error("{name}: cannot fetch its metadata: {error}")]
    Metadata {
        /// The image's name.
        name: Arc<str>,
        /// Why.
        error: io::Error,
    },
    /// The disk cache's directory could not be created.
    #[error("disk cache {}: cannot create it: {error}", dir.display())]
    CreateDiskCache {
        /// The directory.
        dir: PathBuf,
        /// Why.
        error: io::Error,
    },
    /// The disk cache could not be opened (in use by another process, unreadable...).
    #[error("disk cache {}: {error}", dir.display())]
    DiskCache {
        /// The directory.
        dir: PathBuf,
        /// Why.
        error: DiskCacheError,
    },
}

impl OpenImageError {
    /// The errno that best says what went wrong, for front ends that report one (Python's
    /// `OSError`): the system's where there is one, `EINVAL` for what the caller must change,
    /// else `EIO`.
    pub fn errno(&self) -> i32 {
        let os = |e: &io::Error| e.raw_os_error().unwrap_or(Errno::IO.raw_os_error());
        match self {
            OpenImageError::Open { error, .. } | OpenImageError::CreateDiskCache { error, .. } => {
                os(error)
            }
            OpenImageError::Address(_) => Errno::INVAL.raw_os_error(),
            OpenImageError::Container { error, .. } => match error {
                ContainerError::NoChoice { .. } | ContainerError::NotSif(_) => {
                    Errno::INVAL.raw_os_error()
                }
                ContainerError::Io(io) => os(io),
                _ => Errno::IO.raw_os_error(),
            },
            OpenImageError::Remote(_)
            | OpenImageError::Metadata { .. }
            | OpenImageError::DiskCache { .. } => Errno::IO.raw_os_error(),
        }
    }
}

/// Opens `image` (a path, or an address [`is_remote`] accepts) and finds where the image
/// starts in it: at `offset` when given, else where its container says (`partition` picks a
/// SIF file's partition). A remote image's metadata is fetched whole, in one request.
pub fn open_image(
    image: &Path,
    offset: Option<u64>,
    partition: Option<u32>,
    options: &ImageSourceOptions,
) -> Result<OpenedImage, OpenImageError> {
    let address = image.to_str().filter(|text| is_remote(text));
    let Some(address) = address else {
        let name = image.display().to_string();
        let source = FileSource::open(image).map_err(|error| OpenImageError::Open {
            name: name.clone(),
            error,
        })?;
        return locate_image(Box::new(source), None, offset, partition, name.into());
    };
    let location = Location::parse(address).map_err(OpenImageError::Address)?;
    let remote_options = RemoteOptions {
        disk_cache: options
            .disk_cache_dir
            .as_deref()
            .map(|dir| shared_disk_cache(dir, options.disk_cache_bytes))
            .transpose()?,
        ..options.remote.clone()
    };
    let remote = RemoteSource::open(&location, &remote_options).map_err(OpenImageError::Remote)?;
    let name: Arc<str> = remote.name().into();
    let opened = locate_image(
        Box::new(remote.clone()),
        Some(remote.clone()),
        offset,
        partition,
        name,
    )?;
    remote
        .pin_metadata(opened.offset)
        .map_err(|error| OpenImageError::Metadata {
            name: opened.name.clone(),
            error,
        })?;
    Ok(opened)
}

/// Where the image starts in `source` (already open: a client's file, a Python file object):
/// at `offset` when given, else where its container says (an AppImage's ELF part skipped, a
/// SIF file's `partition` or primary system partition).
pub fn locate_image(
    source: Box<dyn Source>,
    remote: Option<RemoteSource>,
    offset: Option<u64>,
    partition: Option<u32>,
    name: Arc<str>,
) -> Result<OpenedImage, OpenImageError> {
    let (offset, located) = match offset {
        Some(offset) => (offset, None),
        None => {
            let found =
                locate(source.as_ref(), partition).map_err(|error| OpenImageError::Container {
                    name: name.clone(),
                    error,
                })?;
            (found.offset, Some(found))
        }
    };
    Ok(OpenedImage {
        source,
        remote,
        offset,
        located,
        name,
    })
}

/// The disk caches this process has open, by directory.
static OPEN_DISK_CACHES: Mutex<Option<HashMap<PathBuf, Weak<DiskCache>>>> = Mutex::new(None);

/// The disk caches this process has in use, and their figures, sorted by directory.
pub fn open_disk_caches() -> Vec<(PathBuf, DiskCacheStats)> {
    let open = OPEN_DISK_CACHES
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let mut caches: Vec<_> = open
        .iter()
        .flatten()
        .filter_map(|(dir, cache)| Some((dir.clone(), cache.upgrade()?.stats())))
        .collect();
    caches.sort_by(|a, b| a.0.cmp(&b.0));
    caches
}

/// The process's disk cache in `dir`, created if need be: every image naming the same
/// directory shares one cache (and one budget, the first given), as one process may hold the
/// directory's lock only once.
pub fn shared_disk_cache(dir: &Path, budget: u64) -> Result<Arc<DiskCache>, OpenImageError> {
    let mut open = OPEN_DISK_CACHES
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let open = open.get_or_insert_with(HashMap::new);
    if let Some(cache) = open.get(dir).and_then(Weak::upgrade) {
        return Ok(cache);
    }
    std::fs::create_dir_all(dir).map_err(|error| OpenImageError::CreateDiskCache {
        dir: dir.to_path_buf(),
        error,
    })?;
    let cache = DiskCache::open(dir, budget).map_err(|error| OpenImageError::DiskCache {
        dir: dir.to_path_buf(),
        error,
    })?;
    open.insert(dir.to_path_buf(), Arc::downgrade(&cache));
    Ok(cache)
}
