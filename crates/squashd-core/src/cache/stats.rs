//! Counters of a cache: updated with relaxed atomics on the hot path, read as a snapshot.

use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters of one cache.
#[derive(Debug, Default)]
pub struct CacheCounters {
    pub(crate) hits: AtomicU64,
    pub(crate) misses: AtomicU64,
    pub(crate) loads: AtomicU64,
    pub(crate) load_failures: AtomicU64,
    pub(crate) loaded_bytes: AtomicU64,
    pub(crate) evictions: AtomicU64,
    pub(crate) waits: AtomicU64,
    pub(crate) wait_nanos: AtomicU64,
}

impl CacheCounters {
    /// A snapshot of these counters, with the occupancy figures given.
    pub fn snapshot(&self, capacity: u64, resident_bytes: u64, entries: u64) -> CacheStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CacheStats {
            capacity_bytes: capacity,
            resident_bytes,
            entries,
            hits: get(&self.hits),
            misses: get(&self.misses),
            loads: get(&self.loads),
            load_failures: get(&self.load_failures),
            loaded_bytes: get(&self.loaded_bytes),
            evictions: get(&self.evictions),
            waits: get(&self.waits),
            wait_nanos: get(&self.wait_nanos),
        }
    }
}

/// A snapshot of one cache's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// The budget in bytes (0: caching disabled).
    pub capacity_bytes: u64,
    /// Bytes held now.
    pub resident_bytes: u64,
    /// Values held now.
    pub entries: u64,
    /// Accesses served from the cache (including those that waited for another reader's load).
    pub hits: u64,
    /// Accesses that had to load.
    pub misses: u64,
    /// Successful loads: for the decompressed tiers, decompressions (or copies of blocks stored
    /// uncompressed); for the compressed tier, reads from the image.
    pub loads: u64,
    /// Loads that failed (I/O errors, corrupt blocks); their keys were not cached.
    pub load_failures: u64,
    /// Bytes produced by successful loads.
    pub loaded_bytes: u64,
    /// Values evicted to stay within budget, or refused as too large to cache.
    pub evictions: u64,
    /// Accesses that waited for another reader's load of the same block.
    pub waits: u64,
    /// Total time spent in such waits, in nanoseconds.
    pub wait_nanos: u64,
}

impl CacheStats {
    /// Fraction of accesses served without loading, 0.0 when there were none.
    pub fn hit_ratio(&self) -> f64 {
        let total = self.hits + self.misses;
        if total == 0 {
            0.0
        } else {
            self.hits as f64 / total as f64
        }
    }
}
