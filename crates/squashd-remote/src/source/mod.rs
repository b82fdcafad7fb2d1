//! [`RemoteSource`]: a remote object read in aligned units. A unit is looked for in the pinned
//! metadata, then in memory, then in the disk cache, then fetched, one fetch per unit however
//! many readers miss it at once (quick_cache's placeholders), and kept at every level.

mod units;

use crate::disk_cache::{DiskCache, UnitKey};
use crate::fetch::Fetcher;
use crate::gate::Gate;
use crate::http::{Client, Endpoint, ObjectInfo};
use crate::inflight::InFlight;
use crate::location::Location;
use crate::prefetch::{Queue, Streams};
use crate::stats::{Counters, RemoteStats};
use quick_cache::sync::{Cache, DefaultLifecycle};
use quick_cache::{DefaultHashBuilder, OptionsBuilder, Weighter};
use std::collections::HashMap;
use std::io;
use std::sync::{mpsc, Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};

/// How a remote image is fetched and cached.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// Bytes per fetch unit (aligned; the last unit is shorter). Default 1 MiB.
    pub unit_size: u64,
    /// Budget of fetched units kept in memory. Default 64 MiB (twice the largest prefetch
    /// window, so that what is fetched ahead is still there when the reader comes).
    pub memory_bytes: u64,
    /// Connections to the server at most. Default 8.
    pub connections: usize,
    /// Retries of a transiently failed request. Default 4.
    pub retries: u32,
    /// Threads prefetching units ahead of readers. Default 2; 0 turns prefetch off. (Named
    /// before "read-ahead" came to mean decompressing ahead only; kept for its callers.)
    pub read_ahead_threads: usize,
    /// Largest prefetch window of a sequential reader, in bytes (whole units, two at least).
    /// Default 32 MiB: at 20 ms of round trip, enough in flight for more than 1 GB/s.
    pub max_window_bytes: u64,
    /// The disk cache shared by the process's remote images, if any.
    pub disk_cache: Option<Arc<DiskCache>>,
    /// Whether to record which units readers ask for, in order (see [`RemoteSource::trace`]).
    pub record_trace: bool,
    /// Bytes of the object's end asked for when opening it, beside its first unit, where there
    /// is no disk cache (0: none). Default 8 MiB, the metadata of a 2 GB /usr image.
    pub open_tail_bytes: u64,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            unit_size: 1 << 20,
            memory_bytes: 64 << 20,
            connections: 8,
            retries: 4,
            read_ahead_threads: 2,
            max_window_bytes: 32 << 20,
            disk_cache: None,
            record_trace: false,
            open_tail_bytes: 8 << 20,
        }
    }
}

/// An object's end as fetched: where it starts, what the server said of the object, the bytes.
type Tail = (u64, ObjectInfo, Vec<u8>);

/// The last `len` bytes of the object at `endpoint`, asked for on a connection of their own by
/// a thread of their own: the answer comes on the channel (or never, if it is not needed by then).
fn ask_for_tail(
    endpoint: Endpoint,
    len: u64,
    counters: &Arc<Counters>,
) -> mpsc::Receiver<Result<Tail, crate::http::FetchError>> {
    let (answer, answered) = mpsc::sync_channel(1);
    let fetcher = Fetcher::new(Client::new(1), endpoint, 0, counters.clone());
    let spawned = std::thread::Builder::new()
        .name("squashd-open-tail".into())
        .spawn(move || {
            let _ = answer.send(fetcher.tail(len));
        });
    if let Err(e) = spawned {
        tracing::debug!("cannot start the thread asking for the tail: {e}");
    }
    answered
}

/// How many `unit_size` units make `bytes` (one at least).
fn units_in(bytes: u64, unit_size: u64) -> usize {
    usize::try_from(bytes / unit_size.max(1))
        .unwrap_or(usize::MAX)
        .max(1)
}

/// The metadata region is pinned in memory only up to this size; past it, it is read like data.
const MAX_PINNED: u64 = 512 << 20;

/// The memory tier of fetched units. Units mostly stream through it (fetched ahead, read
/// once), so it favours recency: quick_cache's default keeps 97% of its room for entries hit
/// twice, and a window of units fetched ahead was evicted from the remaining 3% before the
/// reader came to it and fetched again (E5: 849 MB fetched for a 323 MB image). Few shards,
/// so that each holds many units.
fn unit_cache(bytes: u64, unit: u64) -> Cache<u64, Arc<[u8]>, UnitWeighter> {
    let units = (bytes / unit).max(2) as usize;
    let shards = (units / 16).clamp(1, 8).next_power_of_two();
    match OptionsBuilder::new()
        .shards(shards)
        .estimated_items_capacity(units)
        .weight_capacity(bytes)
        .hot_allocation(0.5)
        .build()
    {
        Ok(options) => Cache::with_options(
            options,
            UnitWeighter,
            DefaultHashBuilder::default(),
            DefaultLifecycle::default(),
        ),
        Err(_) => Cache::with_weighter(units, bytes, UnitWeighter),
    }
}

#[derive(Clone)]
struct UnitWeighter;

impl Weighter<u64, Arc<[u8]>> for UnitWeighter {
    fn weight(&self, _unit: &u64, bytes: &Arc<[u8]>) -> u64 {
        bytes.len().max(1) as u64
    }
}

/// A remote image's bytes, read from any number of threads. Clones share everything.
#[derive(Clone)]
pub struct RemoteSource {
    shared: Arc<Shared>,
}

struct Shared {
    name: String,
    info: ObjectInfo,
    identity: Arc<str>,
    fetcher: Fetcher,
    unit_size: u64,
    memory: Cache<u64, Arc<[u8]>, UnitWeighter>,
    pinned: RwLock<HashMap<u64, Arc<[u8]>>>,
    disk: Option<Arc<DiskCache>>,
    counters: Arc<Counters>,
    broken: Mutex<Option<String>>,
    gate: Gate,
    streams: Streams,
    queue: Arc<Queue>,
    inflight: InFlight,
    workers: Workers,
    trace: Option<Mutex<Trace>>,
}

/// Units readers asked for, each once, in the order first asked.
#[derive(Default)]
struct Trace {
    seen: std::collections::HashSet<u64>,
    order: Vec<u64>,
}

/// A trace keeps at most this many units (a 1 TiB image at 1 MiB units).
const MAX_TRACED: usize = 1 << 20;

/// The prefetch threads, started at the first unit queued by the process that queues it: a
/// mount opens its image before it forks into the background, and fork keeps no thread.
struct Workers {
    me: Weak<Shared>,
    count: usize,
    /// Units one request of theirs fetches at most.
    run_units: usize,
    started_in: Mutex<Option<u32>>,
}

impl Workers {
    fn ensure_started(&self, queue: &Arc<Queue>) {
        let pid = std::process::id();
        let mut started_in = self
            .started_in
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if *started_in == Some(pid) {
            return;
        }
        *started_in = Some(pid);
        for _ in 0..self.count {
            let (me, queue, run_units) = (self.me.clone(), queue.clone(), self.run_units);
            let spawned = std::thread::Builder::new()
                .name("squashd-prefetch".into())
                .spawn(move || units::prefetch_worker(&me, &queue, run_units));
            if let Err(e) = spawned {
                tracing::warn!("cannot start a prefetch thread: {e}");
            }
        }
    }
}

impl RemoteSource {
    /// Opens the object at `location`: one ranged GET of its first unit, which also gives its
    /// size and its validator (pinned for the life of the source).
    pub fn open(location: &Location, options: &RemoteOptions) -> Result<RemoteSource, String> {
        let name = location.to_string();
        let endpoint = Endpoint::for_location(location).map_err(|e| format!("{name}: {e}"))?;
        // Taken before the endpoint goes to the fetcher; never shown (it may hold a secret).
        let address = endpoint.full_address();
        let counters = Arc::new(Counters::default());
        // Asked for first, so that it is on its way while the first unit is.
        let tail = (options.disk_cache.is_none() && options.open_tail_bytes > 0)
            .then(|| ask_for_tail(endpoint.clone(), options.open_tail_bytes, &counters));
        let fetcher = Fetcher::new(
            Client::new(options.connections),
            endpoint,
            options.retries,
            counters.clone(),
        );
        let unit_size = options.unit_size.clamp(4096, 64 << 20);
        // The first unit comes with the size and validator: it holds the superblock (or a
        // container's header), the next thing any opener reads.
        //
        // Without a disk cache, the object's tail is asked for at the same time, on a second
        // connection: SquashFS keeps its metadata at the end, so the pin that follows usually
        // finds it there, a round trip sooner. With one, the metadata of an image seen before
        // comes from disk, and the tail would be fetched for nothing.
        let asked = Instant::now();
        let (info, first_unit) = fetcher
            .open(unit_size)
            .map_err(|e| format!("{name}: {e}"))?;
        // The tail is larger than the first unit and comes a little later; a server that
        // stalls it does not hold the open up for long (the pin fetches the metadata then).
        let patience = (asked.elapsed() * 4).max(Duration::from_secs(1));
        let tail = tail.and_then(|answer| answer.recv_timeout(patience).ok());
        let memory_bytes = options.memory_bytes.max(2 * unit_size);
        // The full address (two that differ only in their query may be two objects), hashed,
        // and the version: a new version never reads old units.
        let identity = UnitKey::object_identity(&address, &info.version());
        let shared = Arc::new_cyclic(|me| Shared {
            name,
            info,
            identity,
            fetcher,
            unit_size,
            memory: unit_cache(memory_bytes, unit_size),
            pinned: RwLock::default(),
            disk: options.disk_cache.clone(),
            counters,
            broken: Mutex::new(None),
            gate: Gate::new(options.connections),
            streams: Streams::new((options.max_window_bytes / unit_size).max(2)),
            queue: Arc::new(Queue::new()),
            inflight: InFlight::default(),
            workers: Workers {
                me: me.clone(),
                count: options.read_ahead_threads,
                run_units: units_in(units::MAX_RUN_BYTES, unit_size),
                started_in: Mutex::new(None),
            },
            trace: options.record_trace.then(Mutex::default),
        });
        shared.keep_fetched(0, &first_unit);
        match tail {
            Some(Ok((start, tail_info, bytes))) if tail_info == shared.info => {
                shared.keep_tail(start, &bytes)
            }
            Some(Ok(_)) => tracing::debug!("{}: the object changed between two GETs", shared.name),
            Some(Err(e)) => tracing::debug!("{}: the tail was not fetched: {e}", shared.name),
            None => {}
        }
        Ok(RemoteSource { shared })
    }

    /// The image's name in messages: its address without secrets.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The object's size and the version pinned at open.
    pub fn info(&self) -> &ObjectInfo {
        &self.shared.info
    }

    /// What the image has cost so far.
    pub fn stats(&self) -> RemoteStats {
        self.shared.counters.snapshot()
    }

    /// Why every read now fails, once the object changed under the mount.
    pub fn broken(&self) -> Option<String> {
        self.shared.broken()
    }

    /// Reads the SquashFS superblock at `offset` and pins the image's metadata (its inode,
    /// directory, fragment, id and xattr tables, stored together at its end) in memory, fetching
    /// whatever the disk cache does not hold in one request. An image whose superblock cannot be
    /// read is left alone: opening it will say why.
    pub fn pin_metadata(&self, offset: u64) -> io::Result<()> {
        let mut raw = [0u8; squashd_core::format::superblock::SUPERBLOCK_SIZE];
        let Some(image_len) = self.shared.info.size.checked_sub(offset) else {
            return Ok(());
        };
        if self.read_at(&mut raw, offset).is_err() {
            return Ok(());
        }
        let Ok(superblock) = squashd_core::Superblock::parse(&raw, image_len) else {
            return Ok(());
        };
        let (Some(start), Some(end)) = (
            offset.checked_add(superblock.inode_table_start),
            offset.checked_add(superblock.bytes_used),
        ) else {
            return Ok(());
        };
        if start >= end || end > self.shared.info.size || end - start > MAX_PINNED {
            return Ok(());
        }
        self.shared.pin(start, end)
    }

    /// The byte ranges of the object readers asked for, unit by unit in the order first asked
    /// (adjacent units merged), when recorded ([`RemoteOptions::record_trace`]): a prefetch
    /// list for the next mount of the same image.
    pub fn trace(&self) -> Vec<(u64, u64)> {
        let Some(trace) = &self.shared.trace else {
            return Vec::new();
        };
        let trace = trace.lock().unwrap_or_else(PoisonError::into_inner);
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for &unit in &trace.order {
            let (start, len) = (unit * self.shared.unit_size, self.shared.unit_len(unit));
            match ranges.last_mut() {
                Some((s, l)) if *s + *l == start => *l += len,
                _ => ranges.push((start, len)),
            }
        }
        ranges
    }

    /// Queues bytes `pos..pos + len` to be fetched in the background (a prefetch list).
    pub fn fetch_ahead(&self, pos: u64, len: u64) {
        self.shared.queue_range(pos, len);
    }

    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<()> {
        let shared = &self.shared;
        if let Some(why) = shared.broken() {
            return Err(io::Error::other(format!("{}: {why}", shared.name)));
        }
        let end = pos
            .checked_add(buf.len() as u64)
            .filter(|&end| end <= shared.info.size)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "{}: {} bytes at {pos} run past the end of the {}-byte object",
                        shared.name,
                        buf.len(),
                        shared.info.size
                    ),
                )
            })?;
        if buf.is_empty() {
            return Ok(());
        }
        let first = pos / shared.unit_size;
        let last = (end - 1) / shared.unit_size;
        let mut filled = 0usize;
        for index in first..=last {
            shared.note_traced(index);
            let unit = shared.unit(index)?;
            let unit_start = index * shared.unit_size;
            let from = (pos + filled as u64 - unit_start) as usize;
            let take = (buf.len() - filled).min(unit.len().saturating_sub(from));
            let bytes = unit.get(from..from + take).ok_or_else(|| {
                io::Error::other(format!("{}: unit {index} is short", shared.name))
            })?;
            buf[filled..filled + take].copy_from_slice(bytes);
            filled += take;
        }
        let ahead = shared.streams.on_read(first, last);
        if !ahead.is_empty() {
            shared.queue_units(ahead);
        }
        Ok(())
    }
}

impl squashd_core::source::Source for RemoteSource {
    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> io::Result<()> {
        self.read_at(buf, pos)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.shared.info.size)
    }

    /// A read of a block not cached on disk waits for an HTTP request.
    fn may_stall(&self) -> bool {
        true
    }

    fn will_need(&self, pos: u64, len: u64) {
        self.shared.queue_range(pos, len);
    }
}
