//! What a disk cache counts.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// What a disk cache has done since it was opened, and what it holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskCacheStats {
    /// Gets that returned a unit.
    pub hits: u64,
    /// Gets that returned nothing (corrupt entries included).
    pub misses: u64,
    /// Entries found torn, damaged, unreadable or holding another unit, and removed.
    pub corrupt: u64,
    /// Entries removed to make room.
    pub evictions: u64,
    /// Puts that failed to write their entry (the unit was not cached).
    pub write_errors: u64,
    /// Bytes of the entry files in the cache, headers included.
    pub bytes_used: u64,
    /// Entries in the cache.
    pub entries: u64,
    /// The budget in bytes.
    pub budget: u64,
}

/// The counters of [`DiskCacheStats`], updated without the index's lock.
#[derive(Default)]
pub(super) struct Counters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub corrupt: AtomicU64,
    pub evictions: AtomicU64,
    pub write_errors: AtomicU64,
}

impl Counters {
    /// The counters with what the index holds.
    pub(super) fn snapshot(&self, bytes_used: u64, entries: u64, budget: u64) -> DiskCacheStats {
        DiskCacheStats {
            hits: self.hits.load(Relaxed),
            misses: self.misses.load(Relaxed),
            corrupt: self.corrupt.load(Relaxed),
            evictions: self.evictions.load(Relaxed),
            write_errors: self.write_errors.load(Relaxed),
            bytes_used,
            entries,
            budget,
        }
    }
}
