//! Where an image's bytes come from, for every command: a local file (FileSource), or an
//! `http(s)://` / `s3://` address (squashd-remote), and where in it the image starts (its
//! container). Above this, nothing knows whether an image is remote.

use anyhow::Context;
use squashd_core::source::{FileSource, Source};
use squashd_remote::disk_cache::DiskCache;
use squashd_remote::{Location, RemoteOptions, RemoteSource};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// How remote images are fetched and cached (mount options `disk_cache=`, `disk_cache_size=`,
/// `fetch_unit=`, `connections=`; the daemon's config).
#[derive(Debug, Clone)]
pub(crate) struct RemoteSettings {
    /// The disk cache's directory; none keeps fetched units in memory only.
    pub(crate) disk_cache_dir: Option<PathBuf>,
    /// The disk cache's budget in bytes.
    pub(crate) disk_cache_bytes: u64,
    /// Bytes per fetch unit.
    pub(crate) fetch_unit: u64,
    /// Connections per image at most.
    pub(crate) connections: usize,
}

impl Default for RemoteSettings {
    fn default() -> Self {
        let defaults = RemoteOptions::default();
        RemoteSettings {
            disk_cache_dir: None,
            disk_cache_bytes: 4 << 30,
            fetch_unit: defaults.unit_size,
            connections: defaults.connections,
        }
    }
}

/// An image's bytes, opened.
pub(crate) struct OpenedSource {
    /// What the image is read from.
    pub(crate) source: Box<dyn Source>,
    /// The same source, when remote, for its counters.
    pub(crate) remote: Option<RemoteSource>,
    /// Where the image starts in it.
    pub(crate) offset: u64,
    /// What holds the image, for `squashd info`: a container's name, or "at the offset given".
    pub(crate) container: String,
    /// The image's name in messages: a path, or an address without its secrets.
    pub(crate) name: Arc<str>,
}

/// Whether `image` names a remote image.
pub(crate) fn is_remote(image: &Path) -> bool {
    image.to_str().is_some_and(squashd_remote::is_remote)
}

/// Opens `image` (a path or a remote address) and finds where the image starts in it: at
/// `offset` when given, else where its container says. A remote image's metadata is fetched
/// whole, in one request, before this returns.
pub(crate) fn open(
    image: &Path,
    offset: Option<u64>,
    settings: &RemoteSettings,
) -> anyhow::Result<OpenedSource> {
    if !is_remote(image) {
        let source =
            FileSource::open(image).with_context(|| format!("{}: cannot open", image.display()))?;
        return located(Box::new(source), None, offset, image.display().to_string());
    }
    let address = image.to_str().unwrap_or_default();
    let location = Location::parse(address).map_err(|e| anyhow::anyhow!(e))?;
    let options = RemoteOptions {
        unit_size: settings.fetch_unit,
        connections: settings.connections,
        disk_cache: settings
            .disk_cache_dir
            .as_deref()
            .map(|dir| shared_disk_cache(dir, settings.disk_cache_bytes))
            .transpose()?,
        ..RemoteOptions::default()
    };
    let remote = RemoteSource::open(&location, &options).map_err(|e| anyhow::anyhow!(e))?;
    let name = remote.name().to_string();
    let opened = located(Box::new(remote.clone()), Some(remote.clone()), offset, name)?;
    remote
        .pin_metadata(opened.offset)
        .with_context(|| format!("{}: cannot fetch its metadata", opened.name))?;
    Ok(opened)
}

/// An image file opened elsewhere (by a client, with its rights), at `path`.
pub(crate) fn from_file(
    file: std::fs::File,
    path: &Path,
    offset: Option<u64>,
) -> anyhow::Result<OpenedSource> {
    located(
        Box::new(FileSource::from_file(file)),
        None,
        offset,
        path.display().to_string(),
    )
}

fn located(
    source: Box<dyn Source>,
    remote: Option<RemoteSource>,
    offset: Option<u64>,
    name: String,
) -> anyhow::Result<OpenedSource> {
    let (container, offset) = match offset {
        Some(offset) => ("at the offset given".to_string(), offset),
        None => {
            let (container, offset) = squashd_core::container::locate(source.as_ref())
                .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
            (container.name().to_string(), offset)
        }
    };
    Ok(OpenedSource {
        source,
        remote,
        offset,
        container,
        name: name.into(),
    })
}

/// The process's disk cache in `dir`: every image naming the same directory shares one cache
/// (and one budget, the first given), as one process may hold the directory's lock only once.
fn shared_disk_cache(dir: &Path, budget: u64) -> anyhow::Result<Arc<DiskCache>> {
    static OPEN: Mutex<Option<HashMap<PathBuf, Weak<DiskCache>>>> = Mutex::new(None);
    let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
    let open = open.get_or_insert_with(HashMap::new);
    if let Some(cache) = open.get(dir).and_then(Weak::upgrade) {
        return Ok(cache);
    }
    std::fs::create_dir_all(dir)
        .with_context(|| format!("disk cache {}: cannot create it", dir.display()))?;
    let cache = DiskCache::open(dir, budget)
        .map_err(|e| anyhow::anyhow!("disk cache {}: {e}", dir.display()))?;
    open.insert(dir.to_path_buf(), Arc::downgrade(&cache));
    Ok(cache)
}
