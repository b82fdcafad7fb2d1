//! Where an image's bytes come from, for every command: a local file (FileSource), or an
//! `http(s)://` / `s3://` address (squashd-remote), and where in it the image starts (its
//! container), opened by squashd-remote's `image_source` (which the Python package shares);
//! here the command line's settings, its hints, access traces and prefetch lists. Above this,
//! nothing knows whether an image is remote.

use squashd_core::container::ContainerError;
use squashd_core::source::FileSource;
use squashd_remote::image_source::{locate_image, open_image, ImageSourceOptions, OpenImageError};
use squashd_remote::{RemoteOptions, RemoteSource};
use std::path::{Path, PathBuf};

/// How remote images are fetched and cached (mount options `disk_cache=`, `disk_cache_size=`,
/// `fetch_unit=`, `open_tail=`, `connections=`; the daemon's config).
#[derive(Debug, Clone)]
pub(crate) struct RemoteSettings {
    /// The disk cache's directory; none keeps fetched units in memory only.
    pub(crate) disk_cache_dir: Option<PathBuf>,
    /// The disk cache's budget in bytes.
    pub(crate) disk_cache_bytes: u64,
    /// Bytes per fetch unit.
    pub(crate) fetch_unit: u64,
    /// Bytes of the object's end fetched at open, without a disk cache (`open_tail=`).
    pub(crate) open_tail: u64,
    /// Connections per image at most.
    pub(crate) connections: usize,
    /// Where to write the byte ranges readers asked for when the mount ends (`trace=`).
    pub(crate) trace: Option<PathBuf>,
    /// A list of paths and byte ranges to fetch in the background once mounted (`prefetch=`).
    pub(crate) prefetch: Option<PathBuf>,
}

impl Default for RemoteSettings {
    fn default() -> Self {
        let defaults = RemoteOptions::default();
        RemoteSettings {
            disk_cache_dir: None,
            disk_cache_bytes: 4 << 30,
            fetch_unit: defaults.unit_size,
            open_tail: defaults.open_tail_bytes,
            connections: defaults.connections,
            trace: None,
            prefetch: None,
        }
    }
}

/// An image's bytes, opened, and where the image starts in them.
pub(crate) use squashd_remote::image_source::OpenedImage as OpenedSource;

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
    partition: Option<u32>,
    settings: &RemoteSettings,
) -> anyhow::Result<OpenedSource> {
    let options = ImageSourceOptions {
        remote: RemoteOptions {
            unit_size: settings.fetch_unit,
            connections: settings.connections,
            record_trace: settings.trace.is_some(),
            open_tail_bytes: settings.open_tail,
            ..RemoteOptions::default()
        },
        disk_cache_dir: settings.disk_cache_dir.clone(),
        disk_cache_bytes: settings.disk_cache_bytes,
    };
    open_image(image, offset, partition, &options).map_err(with_hint)
}

/// An image file opened elsewhere (by a client, with its rights), at `path`.
pub(crate) fn from_file(
    file: std::fs::File,
    path: &Path,
    offset: Option<u64>,
    partition: Option<u32>,
) -> anyhow::Result<OpenedSource> {
    let name = path.display().to_string().into();
    let source = Box::new(FileSource::from_file(file));
    locate_image(source, None, offset, partition, name).map_err(with_hint)
}

/// The error, with how to choose when a container holds several images.
fn with_hint(e: OpenImageError) -> anyhow::Error {
    match e {
        OpenImageError::Container {
            error: ContainerError::NoChoice { .. },
            ..
        } => anyhow::anyhow!("{e}; choose one with --partition ID (mount: -o partition=ID)"),
        e => anyhow::anyhow!(e),
    }
}

/// The disk caches in use, and their figures, for `status`.
pub(crate) fn disk_caches() -> Vec<(PathBuf, squashd_remote::disk_cache::DiskCacheStats)> {
    squashd_remote::image_source::open_disk_caches()
}

/// Writes a remote image's access trace to a file when dropped: when its mount ends.
pub(crate) struct TraceOnDrop {
    remote: RemoteSource,
    path: PathBuf,
}

impl TraceOnDrop {
    /// A guard writing `remote`'s trace to `path` if both are given.
    pub(crate) fn new(remote: Option<&RemoteSource>, path: Option<&Path>) -> Option<TraceOnDrop> {
        Some(TraceOnDrop {
            remote: remote?.clone(),
            path: path?.to_path_buf(),
        })
    }
}

impl Drop for TraceOnDrop {
    fn drop(&mut self) {
        let mut text = format!(
            "# squashd access trace of {} ({}): byte ranges readers asked for, in order.\n\
             # Give it to a later mount as -o prefetch=FILE.\n",
            self.remote.name(),
            self.remote.info().version()
        );
        for (start, len) in self.remote.trace() {
            text.push_str(&format!("@{start}+{len}\n"));
        }
        // Written aside and renamed into place, so a reader (a script waiting for the file, a
        // later mount's prefetch=) never sees a half-written trace.
        let mut partial = self.path.clone().into_os_string();
        partial.push(format!(".partial-{}", std::process::id()));
        let written =
            std::fs::write(&partial, text).and_then(|()| std::fs::rename(&partial, &self.path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&partial);
            tracing::warn!("{}: cannot write the trace: {e}", self.path.display());
        }
    }
}

/// Fetches what the list at `list` names in the background, below readers' priority: lines
/// `/PATH` (a file, or every file under a directory, of the image) and `@START+LEN` (bytes of
/// the object, as a trace gives them); `#` starts a comment. A line that names nothing is
/// logged and skipped.
pub(crate) fn start_prefetch(image: &squashd_core::Image, remote: &RemoteSource, list: &Path) {
    let (image, remote, list) = (image.clone(), remote.clone(), list.to_path_buf());
    let spawned = std::thread::Builder::new()
        .name("prefetch-list".into())
        .spawn(move || {
            let text = match std::fs::read_to_string(&list) {
                Ok(text) => text,
                Err(e) => {
                    return tracing::warn!("prefetch list {}: cannot read it: {e}", list.display())
                }
            };
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                if let Err(why) = prefetch_line(&image, &remote, line) {
                    tracing::warn!("prefetch list {}:{}: {why}", list.display(), n + 1);
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot start the prefetch list's thread: {e}");
    }
}

fn prefetch_line(
    image: &squashd_core::Image,
    remote: &RemoteSource,
    line: &str,
) -> Result<(), String> {
    if let Some(range) = line.strip_prefix('@') {
        let (start, len) = range
            .split_once('+')
            .and_then(|(s, l)| Some((s.parse::<u64>().ok()?, l.parse::<u64>().ok()?)))
            .ok_or_else(|| format!("{line:?} is not @START+LEN"))?;
        remote.fetch_ahead(start, len);
        return Ok(());
    }
    if !line.starts_with('/') {
        return Err(format!("{line:?} is neither /PATH nor @START+LEN"));
    }
    let inode = image
        .resolve_path(line.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut pending = vec![inode];
    // A bound on the work one line can ask for, whatever the image holds.
    let mut budget = 1_000_000usize;
    while let Some(inode) = pending.pop() {
        budget = budget.checked_sub(1).ok_or("too many files under it")?;
        if inode.is_dir() {
            for (_, child) in image.read_dir_plus(&inode).map_err(|e| e.to_string())? {
                pending.push(child);
            }
            continue;
        }
        let Ok(file) = image.open_file(&inode) else {
            continue;
        };
        let block = u64::from(file.block_size());
        let positions = (0..file.chunk_count()).filter_map(|chunk| file.chunk_position(chunk));
        let (first, last) = positions.fold((u64::MAX, 0), |(lo, hi), p| (lo.min(p), hi.max(p)));
        if first <= last {
            image.prefetch(first, last - first + block);
        }
    }
    Ok(())
}
