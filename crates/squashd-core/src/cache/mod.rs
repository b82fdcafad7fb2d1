//! Byte-budgeted concurrent block caches with single-flight loads and counters.
//!
//! Built on quick_cache: a hit takes one shard's read lock and clones an `Arc`, so hits never
//! serialize readers of different shards and never wait on I/O. A miss installs a placeholder
//! for its key, loads with no lock held, and wakes only the readers waiting for that key. A load
//! that fails drops its placeholder: the next reader tries again, so nothing is poisoned.
//!
//! The cache knows nothing of SquashFS: keys are positions in an image, values are bytes.

mod stats;

use stats::Stripe;
pub use stats::{CacheCounters, CacheStats};

use quick_cache::sync::{Cache, DefaultLifecycle, GuardResult};
use quick_cache::{DefaultHashBuilder, OptionsBuilder, Weighter};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Identifies a block: which image, and the block's position in it. Images share caches (the
/// daemon gives all its images one budget), so the image is part of the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockKey {
    /// The image's cache identity (see [`next_image_id`]).
    pub image: u32,
    /// Position of the block in the image.
    pub pos: u64,
}

/// A fresh identity for an image's blocks in shared caches.
pub fn next_image_id() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A value a [`BlockCache`] can hold: cheap to clone, and with a size in bytes.
pub trait CacheValue: Clone + Send + Sync + 'static {
    /// Bytes this value occupies, counted against the cache's budget.
    fn weight(&self) -> u64;
}

impl CacheValue for Arc<[u8]> {
    fn weight(&self) -> u64 {
        self.len().max(1) as u64
    }
}

/// What [`BlockCache::get_or_load_elsewhere`] found.
#[derive(Debug)]
pub enum Cached<V, T> {
    /// The cache's value.
    Held(V),
    /// What the caller's load returned; nothing was cached.
    Elsewhere(T),
}

#[derive(Clone)]
struct ByteWeighter;

impl<V: CacheValue> Weighter<BlockKey, V> for ByteWeighter {
    fn weight(&self, _key: &BlockKey, val: &V) -> u64 {
        val.weight()
    }
}

type Inner<V> = Cache<BlockKey, V, ByteWeighter, DefaultHashBuilder, DefaultLifecycle<BlockKey, V>>;

/// A concurrent cache of blocks bounded in bytes. A budget of zero disables caching: every
/// access loads (and is counted as a miss).
pub struct BlockCache<V: CacheValue> {
    cache: Option<Inner<V>>,
    counters: CacheCounters,
    /// Values dropped by `clear` or `forget_image`, so they are not mistaken for evictions.
    cleared: AtomicU64,
    capacity: u64,
    /// Bytes of the budget held outside the cache by its users (see [`BlockCache::reserve`]).
    reserved: Mutex<u64>,
}

impl<V: CacheValue> BlockCache<V> {
    /// A cache of at most `capacity` bytes whose values weigh at most `max_value` bytes.
    ///
    /// quick_cache splits the budget evenly between shards and cannot hold a value heavier than
    /// one shard, so the shard count is chosen to leave each shard room for several of the
    /// largest values.
    pub fn new(capacity: u64, max_value: u64) -> Self {
        Self::with_waiting_room(capacity, max_value, 0)
    }

    /// [`BlockCache::new`], keeping `waiting` bytes of `capacity` for values loaded and not yet
    /// used again. quick_cache evicts by CLOCK-Pro: a new value waits in a "cold" ring, and only
    /// a value used while there moves to the "hot" part; a full cache evicts from the cold ring
    /// first. By default the ring is 3% of the capacity (split between shards), room enough for
    /// values loaded by the reader that uses them at once, but not for values loaded ahead of
    /// their reader: a window of read-ahead larger than the ring has its values evicted before
    /// their reader comes, and loaded again. 0: quick_cache's default.
    pub fn with_waiting_room(capacity: u64, max_value: u64, waiting: u64) -> Self {
        let counters = CacheCounters::default();
        let cache = (capacity > 0).then(|| {
            let cores = crate::cores();
            let by_room = (capacity / (max_value.max(1) * 4)).max(1) as usize;
            let shards = by_room.min(cores * 4).max(1);
            let shards = 1usize << shards.ilog2();
            let average = (max_value / 2).max(1);
            let mut options = OptionsBuilder::new();
            if waiting > 0 {
                // The hot part is what the ring leaves; the share applies to every shard.
                options.hot_allocation(1.0 - (waiting.min(capacity) as f64 / capacity as f64));
            }
            let options = options
                .shards(shards)
                .estimated_items_capacity((capacity / average).clamp(16, 1 << 20) as usize)
                .weight_capacity(capacity)
                .build()
                .expect("cache options are complete");
            Cache::with_options(
                options,
                ByteWeighter,
                DefaultHashBuilder::default(),
                DefaultLifecycle::default(),
            )
        });
        BlockCache {
            cache,
            counters,
            cleared: AtomicU64::new(0),
            capacity,
            reserved: Mutex::new(0),
        }
    }

    /// Takes `bytes` of the budget for memory held outside the cache (a verified image's
    /// bitmap of checked blocks): the cache then holds that much less, evicting now if it must,
    /// so that both together stay within the budget. Given back by [`BlockCache::release`].
    pub fn reserve(&self, bytes: u64) {
        self.resize(|reserved| reserved.saturating_add(bytes));
    }

    /// Gives back `bytes` taken by [`BlockCache::reserve`].
    pub fn release(&self, bytes: u64) {
        self.resize(|reserved| reserved.saturating_sub(bytes));
    }

    /// Changes the reservation and the cache's capacity under one lock, so that concurrent
    /// changes cannot leave a stale capacity.
    fn resize(&self, change: impl FnOnce(u64) -> u64) {
        let mut reserved = self.reserved.lock().unwrap_or_else(PoisonError::into_inner);
        *reserved = change(*reserved);
        if let Some(cache) = &self.cache {
            cache.set_capacity(self.capacity.saturating_sub(*reserved));
        }
    }

    /// Bytes held now by the values of image `image` (a walk of the whole cache, for reports).
    pub fn resident_bytes_of(&self, image: u32) -> u64 {
        self.cache.as_ref().map_or(0, |c| {
            c.iter()
                .filter(|(key, _)| key.image == image)
                .map(|(_, value)| value.weight())
                .sum()
        })
    }

    /// The value for `key`, loading it with `load` on a miss. Concurrent misses on one key run
    /// `load` once; the others wait for that key alone and share its result. If `load` fails,
    /// its error is returned and nothing is cached. Every event is counted in the cache's
    /// counters and in `also` (an image's own counters when images share the cache).
    pub fn get_or_load<E>(
        &self,
        key: BlockKey,
        also: Option<&CacheCounters>,
        load: impl FnOnce() -> Result<V, E>,
    ) -> Result<V, E> {
        let count = |event: fn(&Stripe) -> &AtomicU64, n: u64| {
            event(self.counters.mine()).fetch_add(n, Ordering::Relaxed);
            if let Some(also) = also {
                event(also.mine()).fetch_add(n, Ordering::Relaxed);
            }
        };
        let Some(cache) = &self.cache else {
            count(|c| &c.misses, 1);
            return Self::counted_load(load, count);
        };
        if let Some(v) = cache.get(&key) {
            count(|c| &c.hits, 1);
            return Ok(v);
        }
        let started = Instant::now();
        match cache.get_value_or_guard(&key, None) {
            GuardResult::Value(v) => {
                // Another reader loaded it while this one waited for that key.
                count(|c| &c.hits, 1);
                count(|c| &c.waits, 1);
                count(|c| &c.wait_nanos, started.elapsed().as_nanos() as u64);
                Ok(v)
            }
            GuardResult::Guard(guard) => {
                count(|c| &c.misses, 1);
                let v = Self::counted_load(load, count)?;
                let _ = guard.insert(v.clone());
                Ok(v)
            }
            GuardResult::Timeout => unreachable!("no timeout was given"),
        }
    }

    /// Whether a reader is loading `key` into the cache now. Counts nothing. For a reader that
    /// has other work to do rather than wait for that load.
    pub fn is_loading(&self, key: &BlockKey) -> bool {
        let Some(cache) = &self.cache else {
            return false;
        };
        if cache.peek(key).is_some() {
            return false;
        }
        // A free slot is taken and given back at once (this reader loads nothing).
        matches!(
            cache.get_value_or_guard(key, Some(Duration::ZERO)),
            GuardResult::Timeout
        )
    }

    /// The value for `key` if it is cached; `None` if another reader is loading it now (not
    /// waited for); otherwise it is loaded with `load` and cached. For read-ahead workers: a
    /// block someone is loading already needs no worker, and a worker waiting for it would sit
    /// idle where it could load the next one. A disabled cache (no budget) loads nothing:
    /// nothing loaded ahead could be kept. Counted as [`BlockCache::get_or_load`] counts; a
    /// block left to its loader counts nothing.
    pub fn get_or_load_unless_loading<E>(
        &self,
        key: BlockKey,
        also: Option<&CacheCounters>,
        load: impl FnOnce() -> Result<V, E>,
    ) -> Result<Option<V>, E> {
        let count = |event: fn(&Stripe) -> &AtomicU64, n: u64| {
            event(self.counters.mine()).fetch_add(n, Ordering::Relaxed);
            if let Some(also) = also {
                event(also.mine()).fetch_add(n, Ordering::Relaxed);
            }
        };
        let Some(cache) = &self.cache else {
            return Ok(None);
        };
        match cache.get_value_or_guard(&key, Some(Duration::ZERO)) {
            GuardResult::Value(v) => {
                count(|c| &c.hits, 1);
                Ok(Some(v))
            }
            GuardResult::Guard(guard) => {
                count(|c| &c.misses, 1);
                let v = Self::counted_load(load, count)?;
                let _ = guard.insert(v.clone());
                Ok(Some(v))
            }
            GuardResult::Timeout => Ok(None),
        }
    }

    /// The value for `key` if it is cached, or being loaded into the cache by another reader
    /// (then waited for); otherwise `load_elsewhere` runs and its result is returned, nothing
    /// cached: for a reader that puts the bytes where it wants them (a buffer of its own) and
    /// will not come back. Nobody waits for a load elsewhere (it would give them nothing to
    /// share): two such readers of one block load it side by side. Counted as
    /// [`BlockCache::get_or_load`] counts, the load as [`BlockCache::count_uncached_load`].
    pub fn get_or_load_elsewhere<T, E>(
        &self,
        key: BlockKey,
        also: Option<&CacheCounters>,
        load_elsewhere: impl FnOnce() -> Result<(T, u64), E>,
    ) -> Result<Cached<V, T>, E> {
        let count = |event: fn(&Stripe) -> &AtomicU64, n: u64| {
            event(self.counters.mine()).fetch_add(n, Ordering::Relaxed);
            if let Some(also) = also {
                event(also.mine()).fetch_add(n, Ordering::Relaxed);
            }
        };
        if let Some(cache) = &self.cache {
            if let Some(v) = cache.get(&key) {
                count(|c| &c.hits, 1);
                return Ok(Cached::Held(v));
            }
            // A zero timeout: the value, or the key's load slot if no one holds it (given back
            // at once: this load is not for the cache), or `Timeout` while a load for the
            // cache is under way.
            let value = match cache.get_value_or_guard(&key, Some(Duration::ZERO)) {
                GuardResult::Value(v) => Some(v),
                GuardResult::Guard(_slot) => None,
                GuardResult::Timeout => {
                    // Its value is worth waiting for. (A failed load hands its slot on.)
                    let started = Instant::now();
                    let waited = match cache.get_value_or_guard(&key, None) {
                        GuardResult::Value(v) => Some(v),
                        _ => None,
                    };
                    count(|c| &c.waits, 1);
                    count(|c| &c.wait_nanos, started.elapsed().as_nanos() as u64);
                    waited
                }
            };
            if let Some(v) = value {
                count(|c| &c.hits, 1);
                return Ok(Cached::Held(v));
            }
        }
        count(|c| &c.misses, 1);
        match load_elsewhere() {
            Ok((t, bytes)) => {
                count(|c| &c.loads, 1);
                count(|c| &c.loaded_bytes, bytes);
                Ok(Cached::Elsewhere(t))
            }
            Err(e) => {
                count(|c| &c.load_failures, 1);
                Err(e)
            }
        }
    }

    fn counted_load<E>(
        load: impl FnOnce() -> Result<V, E>,
        count: impl Fn(fn(&Stripe) -> &AtomicU64, u64),
    ) -> Result<V, E> {
        let result = load();
        match &result {
            Ok(v) => {
                count(|c| &c.loads, 1);
                count(|c| &c.loaded_bytes, v.weight());
            }
            Err(_) => count(|c| &c.load_failures, 1),
        }
        result
    }

    /// Counts a load made outside the cache (a block read once and not kept): a miss and a load,
    /// which [`BlockCache::stats`] then shows as a value loaded and not held.
    pub fn count_uncached_load(&self, also: Option<&CacheCounters>, bytes: u64) {
        for c in std::iter::once(&self.counters).chain(also) {
            let s = c.mine();
            s.misses.fetch_add(1, Ordering::Relaxed);
            s.loads.fetch_add(1, Ordering::Relaxed);
            s.loaded_bytes.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// Whether the cache has a budget (a zero budget disables it).
    pub fn is_enabled(&self) -> bool {
        self.cache.is_some()
    }

    /// The value for `key` if it is cached; counts nothing.
    pub fn peek(&self, key: &BlockKey) -> Option<V> {
        self.cache.as_ref().and_then(|c| c.peek(key))
    }

    /// The value for `key` if it is cached, counted as a hit (also in `also`) but, unlike
    /// [`BlockCache::get_or_load`]'s, without making it any hotter in the eviction order: for
    /// reads that repeat a use just made (see [`crate::FileReader::chunk_again`]).
    pub fn peek_counted(&self, key: &BlockKey, also: Option<&CacheCounters>) -> Option<V> {
        let v = self.peek(key)?;
        for c in std::iter::once(&self.counters).chain(also) {
            c.mine().hits.fetch_add(1, Ordering::Relaxed);
        }
        Some(v)
    }

    /// A snapshot of the counters and the bytes held (those reserved included).
    ///
    /// Evictions are derived rather than counted: a key is loaded at most once while it is held
    /// (concurrent misses share one load), so every loaded value not held now, nor dropped by
    /// [`BlockCache::clear`], was evicted or refused. quick_cache does not report every drop to
    /// its lifecycle hooks, so counting them there undercounts.
    pub fn stats(&self) -> CacheStats {
        let (resident_bytes, entries) = self
            .cache
            .as_ref()
            .map_or((0, 0), |c| (c.weight(), c.len() as u64));
        let reserved = *self.reserved.lock().unwrap_or_else(PoisonError::into_inner);
        let mut stats = self
            .counters
            .snapshot(self.capacity, resident_bytes + reserved, entries);
        let cleared = self.cleared.load(Ordering::Relaxed);
        stats.evictions = stats.loads.saturating_sub(entries + cleared);
        stats
    }

    /// Drops `key`'s value if the cache holds it, for a reader that has taken its bytes and for
    /// which it was loaded (a block read ahead for a whole-file read): it would otherwise hold
    /// the room of blocks others come back to (fragment blocks, shared by many files) until it
    /// is evicted, and new blocks would take fresh memory rather than its. Counted as
    /// [`BlockCache::clear`]'s drops are, not as an eviction.
    pub fn remove(&self, key: &BlockKey) {
        if let Some(c) = &self.cache {
            if c.remove(key).is_some() {
                self.cleared.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Drops every value of image `image` (when it is closed: its blocks would only take room).
    pub fn forget_image(&self, image: u32) {
        if let Some(c) = &self.cache {
            let before = c.len();
            c.retain(|key, _| key.image != image);
            let gone = before.saturating_sub(c.len()) as u64;
            self.cleared.fetch_add(gone, Ordering::Relaxed);
        }
    }

    /// Drops every cached value (counters are kept).
    pub fn clear(&self) {
        if let Some(c) = &self.cache {
            self.cleared.fetch_add(c.len() as u64, Ordering::Relaxed);
            c.clear();
        }
    }
}

#[cfg(test)]
mod tests;
