//! Where an image's bytes come from, as `squashd`'s commands take them: a local file, an
//! `http(s)://` or `s3://` address (squashd-remote, with its metadata fetched at open), or a
//! Python file object (for fsspec's other file systems); and where in it the image starts: at
//! the offset given, else where its container (AppImage, SIF) says.
//!
//! This mirrors the binary's `remote.rs`, over the same library calls: the binary crate is not
//! a library, and the few lines are not worth a crate of their own.

use crate::pysource::PySource;
use squashd_core::container::{locate, ContainerError, Located};
use squashd_core::source::{FileSource, Source};
use squashd_remote::disk_cache::DiskCache;
use squashd_remote::{Location, RemoteOptions, RemoteSource};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// Where the image is.
pub enum Target {
    /// A local file.
    Path(PathBuf),
    /// An `http(s)://` or `s3://` address.
    Remote(String),
    /// A Python object with `seek` and `read` (and `readinto`, if it has one).
    PyFile(PySource),
}

/// How a remote image is cached on disk.
#[derive(Debug, Clone, Default)]
pub struct DiskCacheSettings {
    /// The directory; none keeps fetched units in memory only.
    pub dir: Option<PathBuf>,
    /// Its budget in bytes.
    pub budget: u64,
}

/// An image's bytes, opened, and where the image starts in them.
pub struct Opened {
    /// What the image is read from.
    pub source: Box<dyn Source>,
    /// The same source, when remote, for its counters.
    pub remote: Option<RemoteSource>,
    /// Where the image starts.
    pub offset: u64,
    /// What its container said (None when an offset was given).
    pub located: Option<Located>,
    /// The image's name in messages: a path, or an address without its secrets.
    pub name: String,
}

/// Opens `target` and finds where the image starts in it. Errors are one line naming it.
pub fn open(
    target: Target,
    offset: Option<u64>,
    partition: Option<u32>,
    disk_cache: &DiskCacheSettings,
) -> Result<Opened, (i32, String)> {
    match target {
        Target::Path(path) => {
            let name = path.display().to_string();
            let source = FileSource::open(&path).map_err(|e| {
                let errno = e.raw_os_error().unwrap_or(libc::EIO);
                (errno, format!("{name}: cannot open: {e}"))
            })?;
            located(Box::new(source), None, offset, partition, name)
        }
        Target::PyFile(source) => {
            let name = source.name().to_string();
            located(Box::new(source), None, offset, partition, name)
        }
        Target::Remote(address) => {
            let location = Location::parse(&address).map_err(|e| (libc::EINVAL, e))?;
            let cache = disk_cache
                .dir
                .as_deref()
                .map(|dir| shared_disk_cache(dir, disk_cache.budget))
                .transpose()?;
            let options = RemoteOptions {
                disk_cache: cache,
                ..RemoteOptions::default()
            };
            let remote = RemoteSource::open(&location, &options).map_err(|e| (libc::EIO, e))?;
            let name = remote.name().to_string();
            let opened = located(
                Box::new(remote.clone()),
                Some(remote.clone()),
                offset,
                partition,
                name,
            )?;
            remote.pin_metadata(opened.offset).map_err(|e| {
                (
                    libc::EIO,
                    format!("{}: cannot fetch its metadata: {e}", opened.name),
                )
            })?;
            Ok(opened)
        }
    }
}

/// Where the image starts in `source`: at `offset` when given, else where its container says.
fn located(
    source: Box<dyn Source>,
    remote: Option<RemoteSource>,
    offset: Option<u64>,
    partition: Option<u32>,
    name: String,
) -> Result<Opened, (i32, String)> {
    let (offset, located) = match offset {
        Some(offset) => (offset, None),
        None => {
            let found = locate(source.as_ref(), partition).map_err(|e| {
                let (errno, hint) = match e {
                    ContainerError::NoChoice { .. } => {
                        (libc::EINVAL, "; choose one with partition=ID")
                    }
                    ContainerError::NotSif(_) => (libc::EINVAL, ""),
                    ContainerError::Io(ref io) => (io.raw_os_error().unwrap_or(libc::EIO), ""),
                    _ => (libc::EIO, ""),
                };
                (errno, format!("{name}: {e}{hint}"))
            })?;
            (found.offset, Some(found))
        }
    };
    Ok(Opened {
        source,
        remote,
        offset,
        located,
        name,
    })
}

/// The disk caches this process has open, by directory.
static OPEN_DISK_CACHES: Mutex<Option<HashMap<PathBuf, Weak<DiskCache>>>> = Mutex::new(None);

/// The process's disk cache in `dir`: every image naming the same directory shares one cache
/// (and the first budget given), as one process may hold the directory's lock only once.
fn shared_disk_cache(dir: &Path, budget: u64) -> Result<Arc<DiskCache>, (i32, String)> {
    let mut open = OPEN_DISK_CACHES
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let open = open.get_or_insert_with(HashMap::new);
    if let Some(cache) = open.get(dir).and_then(Weak::upgrade) {
        return Ok(cache);
    }
    std::fs::create_dir_all(dir).map_err(|e| {
        let errno = e.raw_os_error().unwrap_or(libc::EIO);
        (
            errno,
            format!("disk cache {}: cannot create it: {e}", dir.display()),
        )
    })?;
    let cache = DiskCache::open(dir, budget)
        .map_err(|e| (libc::EIO, format!("disk cache {}: {e}", dir.display())))?;
    open.insert(dir.to_path_buf(), Arc::downgrade(&cache));
    Ok(cache)
}
