//! The status report: what each served image costs and how it is doing. Shared by the daemon
//! (every attached image) and by a lone `squashd mount -o control=PATH` (its one image).

use super::protocol::{
    DiskCacheStatus, ImageStatus, ReadAheadStatus, RemoteStatus, Status, Tier, TierSet,
    TranslationStatus, VerityStatus,
};
use squashd_core::read_ahead::SweepStats;
use squashd_core::{CacheStats, Image, ImageStats, ReadAheadStats};
use squashd_fuse::MountProbe;
use squashd_kernel::KernelMount;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the report needs to know of one served image.
pub(crate) struct ServedImage {
    /// The image file (absolute).
    pub(crate) image_path: PathBuf,
    /// The options it was mounted with.
    pub(crate) options: Vec<String>,
    /// The open image.
    pub(crate) image: Image,
    /// Its source, when the image is remote: what fetching it costs.
    pub(crate) remote: Option<squashd_remote::RemoteSource>,
    /// How it is checked against its dm-verity tree, when it is.
    pub(crate) verified: Option<crate::verity::Verified>,
    /// The device and inode of the file opened, to tell when the path names another file.
    pub(crate) file_id: Option<FileId>,
    /// Its mount's live figures.
    pub(crate) probe: Probe,
    /// When it was mounted.
    pub(crate) since: Instant,
    /// Whether it has cache budgets of its own rather than a share of the daemon's.
    pub(crate) private_cache: bool,
}

/// Where a mount's live figures come from: the FUSE session, or the kernel path's blob.
#[derive(Debug, Clone)]
pub(crate) enum Probe {
    /// Every request comes through FUSE.
    Fuse(MountProbe),
    /// The kernel answers all but the blob reads that miss its page cache.
    Kernel(Arc<KernelMount>),
}

impl Probe {
    fn engine(&self) -> &'static str {
        match self {
            Probe::Fuse(_) => "fuse",
            Probe::Kernel(_) => "kernel",
        }
    }

    fn sweep_stats(&self) -> SweepStats {
        match self {
            Probe::Fuse(p) => p.sweep_stats(),
            Probe::Kernel(k) => k.sweep_stats(),
        }
    }

    fn open_handles(&self) -> u64 {
        match self {
            Probe::Fuse(p) => p.open_handles(),
            Probe::Kernel(_) => 0,
        }
    }

    fn failed_requests(&self) -> u64 {
        match self {
            Probe::Fuse(p) => p.failed_requests(),
            Probe::Kernel(k) => k.failed_reads(),
        }
    }

    fn last_error(&self) -> Option<String> {
        match self {
            Probe::Fuse(p) => p.last_error(),
            Probe::Kernel(k) => k.last_error(),
        }
    }

    fn requests(&self) -> u64 {
        match self {
            Probe::Fuse(p) => p.requests(),
            Probe::Kernel(k) => k.reads(),
        }
    }

    /// What the listing requests got (FUSE path only; zeros on the kernel path).
    fn listings(&self) -> ListingCounts {
        match self {
            Probe::Fuse(p) => ListingCounts {
                requests: p.listings(),
                short: p.short_listings(),
                unlinked: p.unlinked_listings(),
                waited: p.waited_listings(),
                bare_entries: p.bare_entries(),
                late_lookups: p.late_lookups(),
            },
            Probe::Kernel(_) => ListingCounts::default(),
        }
    }

    fn transport(&self) -> squashd_fuse::server::TransportInfo {
        match self {
            Probe::Fuse(p) => p.transport(),
            Probe::Kernel(k) => k.transport(),
        }
    }

    fn translation(&self) -> Option<TranslationStatus> {
        match self {
            Probe::Fuse(_) => None,
            Probe::Kernel(k) => {
                let (t, r) = (k.stats(), k.read_stats());
                Some(TranslationStatus {
                    inodes: t.nodes as u64,
                    metadata_bytes: t.metadata_bytes,
                    blob_bytes: t.blob_bytes,
                    seconds: t.elapsed.as_secs_f64(),
                    blob_reads: r.blob_reads,
                    fill_reads: r.fill_reads,
                    fills: r.fills,
                    filled_bytes: r.filled_bytes,
                    fill_failures: r.fill_failures,
                    sweep_decompressions: r.sweep_decompressions,
                    swept_reached: r.swept_reached,
                    // Looked at after the registry's lock is released (a FUSE request).
                    blob_cached_bytes: None,
                })
            }
        }
    }
}

/// Which file a path or an open descriptor is: its device and inode numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    /// The identity of an open file (None if it cannot be inspected).
    pub(crate) fn of(file: &std::fs::File) -> Option<FileId> {
        file.metadata().ok().map(|m| FileId::from(&m))
    }
}

impl From<&std::fs::Metadata> for FileId {
    fn from(m: &std::fs::Metadata) -> FileId {
        use std::os::unix::fs::MetadataExt;
        FileId {
            dev: m.dev(),
            ino: m.ino(),
        }
    }
}

/// The report of `images` (mount point, image), with `shared` as the figures of the cache
/// budget they share (for a lone mount: its own caches).
pub(crate) fn status<'a>(
    shared: &ImageStats,
    images: impl Iterator<Item = (&'a Path, &'a ServedImage)>,
) -> Status {
    snapshot(shared, images).finish()
}

/// A status report taken from memory alone, whose images' files are still to be looked at
/// ([`Snapshot::finish`]): a daemon takes it under its registry's lock and finishes it after
/// releasing the lock, since an image's path may lie on a file system that does not answer.
pub(crate) struct Snapshot {
    status: Status,
    /// (index in `status.images`, what to look at), for the local images and the kernel path's.
    files: Vec<(usize, Look)>,
}

/// What the health of a local image's file at its path is checked against.
#[derive(Clone)]
struct FileCheck {
    path: PathBuf,
    file_id: Option<FileId>,
    /// Bytes the image needs (its offset in the file, and its length).
    needed: u64,
}

/// A file `status` looks at after releasing the registry's lock, for a bounded time.
#[derive(Clone)]
enum Look {
    /// A local image's file at its path.
    Image(FileCheck),
    /// A kernel-path mount's blob: how much of it the page cache holds (a FUSE request).
    BlobCache(Arc<KernelMount>),
}

impl Look {
    /// The file looked at, to ask it once at a time.
    fn path(&self) -> PathBuf {
        match self {
            Look::Image(f) => f.path.clone(),
            Look::BlobCache(k) => k.blob_path().to_path_buf(),
        }
    }
}

/// What looking at a file found.
enum Seen {
    /// The image file's problem (None: ok).
    Image(Option<String>),
    /// The blob's bytes in the page cache (None: it could not be asked).
    BlobCache(Option<u64>),
}

/// The report of `images` (see [`status`]) with no file-system call: each local image's health
/// waits for [`Snapshot::finish`].
pub(crate) fn snapshot<'a>(
    shared: &ImageStats,
    images: impl Iterator<Item = (&'a Path, &'a ServedImage)>,
) -> Snapshot {
    let mut files = Vec::new();
    let images = images
        .enumerate()
        .map(|(index, (m, s))| {
            let (image, file) = image_status(m, s);
            if let Some(file) = file {
                files.push((index, Look::Image(file)));
            }
            if let Probe::Kernel(k) = &s.probe {
                files.push((index, Look::BlobCache(k.clone())));
            }
            image
        })
        .collect::<Vec<ImageStatus>>();
    Snapshot {
        status: Status {
            pid: std::process::id(),
            rss_bytes: rss_bytes(),
            ring_memory_bytes: ring_memory_bytes(&images),
            shared_cache: tiers(shared),
            images,
            disk_caches: Vec::new(),
        },
        files,
    }
}

impl Snapshot {
    /// Looks at each local image's file at its path (for at most [`FILE_CHECK_TIME`] in all)
    /// and completes the report.
    pub(crate) fn finish(mut self) -> Status {
        let looks: Vec<&Look> = self.files.iter().map(|(_, f)| f).collect();
        let seen = look_at_files(&looks);
        for ((index, look), seen) in self.files.iter().zip(seen) {
            let Some(image) = self.status.images.get_mut(*index) else {
                continue;
            };
            match (look, seen) {
                // A problem of the file comes before failed reads, as the remote's does.
                (_, Some(Seen::Image(Some(problem)))) => image.health = problem,
                (Look::Image(_), None) => {
                    image.health = format!(
                        "unknown: the image file's path did not answer a stat within {} s (on \
                         a file system that hangs?)",
                        FILE_CHECK_TIME.as_secs()
                    )
                }
                (_, Some(Seen::BlobCache(bytes))) => {
                    if let Some(t) = image.translation.as_mut() {
                        t.blob_cached_bytes = bytes;
                    }
                }
                _ => {}
            }
        }
        self.status.disk_caches = crate::remote::disk_caches()
            .into_iter()
            .map(|(dir, s)| DiskCacheStatus {
                dir,
                budget_bytes: s.budget,
                used_bytes: s.bytes_used,
                entries: s.entries,
                hits: s.hits,
                misses: s.misses,
                corrupt: s.corrupt,
                evictions: s.evictions,
                write_errors: s.write_errors,
            })
            .collect();
        self.status
    }
}

/// How long `status` waits for the images' files to answer a stat, in all.
const FILE_CHECK_TIME: Duration = Duration::from_secs(1);

/// Image paths whose stat has not returned yet (a hung NFS or FUSE mount): not asked again
/// until it does, so that repeated status requests do not pile up threads stuck there.
static UNANSWERED: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

/// What each file showed, in order (None: it did not answer). The looks run on a thread of
/// their own, and a file that has not answered within [`FILE_CHECK_TIME`] is left unknown: a
/// path on a file system that hangs must not hang `status`.
fn look_at_files(looks: &[&Look]) -> Vec<Option<Seen>> {
    let mut seen: Vec<Option<Seen>> = looks.iter().map(|_| None).collect();
    let jobs: Vec<(usize, PathBuf, Look)> = looks
        .iter()
        .enumerate()
        .map(|(i, look)| (i, look.path(), (*look).clone()))
        .collect();
    if jobs.is_empty() {
        return seen;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("status-stat".into())
        .spawn(move || {
            for (i, path, look) in jobs {
                {
                    let mut unanswered = UNANSWERED.lock().unwrap_or_else(|e| e.into_inner());
                    // Still stuck from an earlier request: leave it unknown.
                    if !unanswered.insert(path.clone()) {
                        continue;
                    }
                }
                let found = match &look {
                    Look::Image(f) => Seen::Image(file_problem(&f.path, f.file_id, f.needed)),
                    Look::BlobCache(k) => Seen::BlobCache(k.blob_cached_bytes().ok()),
                };
                UNANSWERED
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&path);
                if tx.send((i, found)).is_err() {
                    return;
                }
            }
        });
    if spawned.is_err() {
        return seen;
    }
    let deadline = Instant::now() + FILE_CHECK_TIME;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok((i, found)) => {
                if let Some(slot) = seen.get_mut(i) {
                    *slot = Some(found);
                }
            }
            // Every file answered (the thread is done), or time is up.
            Err(_) => break,
        }
    }
    seen
}

fn tier(s: &CacheStats) -> Tier {
    Tier {
        capacity_bytes: s.capacity_bytes,
        resident_bytes: s.resident_bytes,
        hits: s.hits,
        misses: s.misses,
        loads: s.loads,
        failures: s.load_failures,
        hit_ratio: s.hit_ratio(),
    }
}

fn read_ahead(s: &ReadAheadStats, sweep: SweepStats) -> ReadAheadStatus {
    ReadAheadStatus {
        swept: sweep.sweeps,
        sweeps_wasted: sweep.wasted,
        sweep_busy_skips: sweep.busy_skips,
        loads: s.loads,
        used: s.used,
        wasted: s.wasted,
        pending: s.pending(),
        streams: s.streams,
        busy_cuts: s.busy_cuts,
    }
}

fn tiers(s: &ImageStats) -> TierSet {
    TierSet {
        metadata: tier(&s.metadata),
        data: tier(&s.data),
        compressed: tier(&s.compressed),
    }
}

/// The status of one image, from memory; for a local image, also what its file at its path is
/// to be checked against (the health then says only what the reads say).
fn image_status(mountpoint: &Path, served: &ServedImage) -> (ImageStatus, Option<FileCheck>) {
    let stats = served.image.stats();
    let sb = served.image.superblock();
    let needed = served.image.offset() + sb.bytes_used;
    let failed_loads =
        stats.metadata.load_failures + stats.data.load_failures + stats.compressed.load_failures;
    let errors = served.probe.failed_requests();
    let verity = served.verified.as_ref().map(verity_status);
    let verity_failures = verity.as_ref().map_or(0, |(_, failures)| *failures);
    let failed = (errors > 0 || failed_loads > 0)
        .then(|| format!("{errors} requests failed with EIO, {failed_loads} block reads failed"));
    // A block that failed its hash says more than the EIO it gave.
    let failed = match verity_failures {
        0 => failed,
        n => Some(format!(
            "verity failures: {n} reads of blocks that failed their hash (the image file \
             changed or is corrupt; {errors} requests failed with EIO)"
        )),
    };
    let (health, file) = match &served.remote {
        Some(remote) => (remote.broken().or(failed), None),
        None => (
            failed,
            Some(FileCheck {
                path: served.image_path.clone(),
                file_id: served.file_id,
                needed,
            }),
        ),
    };
    let transport = served.probe.transport();
    let listings = served.probe.listings();
    let status = ImageStatus {
        image: served.image_path.clone(),
        mountpoint: mountpoint.to_path_buf(),
        options: served.options.clone(),
        health: health.unwrap_or_else(|| "ok".into()),
        engine: served.probe.engine().to_string(),
        transport: transport.name().to_string(),
        ring_memory_bytes: transport.ring_memory as u64,
        ring_entries: transport.ring_entries as u64,
        ring_requests: transport.ring_requests,
        ring_local_requests: transport.ring_local_requests,
        ring_idle_thread_requests: transport.ring_idle_thread_requests,
        last_error: served.probe.last_error(),
        translation: served.probe.translation(),
        remote: served.remote.as_ref().map(remote_status),
        verity: verity.map(|(status, _)| status),
        verity_failures,
        size_bytes: sb.bytes_used,
        inodes: sb.inode_count,
        open_handles: served.probe.open_handles(),
        errors,
        requests: served.probe.requests(),
        listing_requests: listings.requests,
        short_listings: listings.short,
        unlinked_listings: listings.unlinked,
        waited_listings: listings.waited,
        bare_entries: listings.bare_entries,
        late_lookups: listings.late_lookups,
        bytes_read: stats.bytes_read,
        private_cache: served.private_cache,
        cache: tiers(&stats),
        read_ahead: read_ahead(&stats.read_ahead, served.probe.sweep_stats()),
        attached_secs: served.since.elapsed().as_secs(),
    };
    (status, file)
}

/// What is wrong with a local image's file at its path, if anything.
fn file_problem(path: &Path, file_id: Option<FileId>, needed: u64) -> Option<String> {
    match std::fs::metadata(path) {
        Err(_) => Some("image file deleted (still served from the open file)".to_string()),
        Ok(m) if file_id.is_some_and(|id| id != FileId::from(&m)) => {
            Some("image file replaced at its path: still serving the file opened at attach (detach and attach again to serve the new one)".to_string())
        }
        Ok(m) if m.len() < needed => Some(format!(
            "image file truncated to {} of {needed} bytes",
            m.len()
        )),
        Ok(_) => None,
    }
}

/// How a verified image is checked, and its failures.
fn verity_status(verified: &crate::verity::Verified) -> (VerityStatus, u64) {
    let stats = verified.handle.stats();
    let status = VerityStatus {
        root_hash: verified.root_hash.clone(),
        root_hash_from: verified.root_hash_from.to_string(),
        signed_by: verified.signed_by.clone(),
        data_blocks: stats.data_blocks,
        verified_blocks: stats.verified_blocks,
        hash_block_loads: stats.hash_block_loads,
        data_block_hashes: stats.data_block_hashes,
        hash_hints: stats.hash_hints,
        hash_cache_bytes: stats.hash_cache_bytes,
        bitmap_bytes: stats.bitmap_bytes,
    };
    (status, stats.failures)
}

/// What fetching a remote image has cost.
fn remote_status(remote: &squashd_remote::RemoteSource) -> RemoteStatus {
    let stats = remote.stats();
    RemoteStatus {
        version: remote.info().version(),
        requests: stats.requests,
        retries: stats.retries,
        failures: stats.failures,
        bytes_fetched: stats.bytes_fetched,
        units_fetched: stats.units_fetched,
        units_prefetched: stats.units_prefetched,
        memory_hits: stats.memory_hits,
        disk_cache_hits: stats.disk_hits,
        wait_seconds: stats.wait_ns as f64 / 1e9,
    }
}

/// The process's resident set size, from /proc/self/statm.
/// The rings of `images`: every FUSE mount's, and the blob file system's once (each kernel-path
/// image reports the one blob file system's rings).
fn ring_memory_bytes(images: &[ImageStatus]) -> u64 {
    let (kernel, fuse): (Vec<&ImageStatus>, Vec<&ImageStatus>) =
        images.iter().partition(|i| i.engine == "kernel");
    let blob = kernel
        .iter()
        .map(|i| i.ring_memory_bytes)
        .max()
        .unwrap_or(0);
    fuse.iter().map(|i| i.ring_memory_bytes).sum::<u64>() + blob
}

fn rss_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .unwrap_or(0);
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .unwrap_or(4096);
    pages * page.max(0) as u64
}

/// A FUSE mount's listing counters, as [`ImageStatus`] shows them.
#[derive(Debug, Default)]
struct ListingCounts {
    requests: u64,
    short: u64,
    unlinked: u64,
    waited: u64,
    bare_entries: u64,
    late_lookups: u64,
}
