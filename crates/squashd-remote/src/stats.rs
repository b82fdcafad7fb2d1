//! What a remote image has cost: counters any reader bumps without a lock, read as a snapshot.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one remote image, updated from every reader thread.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub requests: AtomicU64,
    pub retries: AtomicU64,
    pub failures: AtomicU64,
    pub bytes_fetched: AtomicU64,
    pub units_fetched: AtomicU64,
    pub units_prefetched: AtomicU64,
    pub memory_hits: AtomicU64,
    pub disk_hits: AtomicU64,
    pub wait_ns: AtomicU64,
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> RemoteStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RemoteStats {
            requests: get(&self.requests),
            retries: get(&self.retries),
            failures: get(&self.failures),
            bytes_fetched: get(&self.bytes_fetched),
            units_fetched: get(&self.units_fetched),
            units_prefetched: get(&self.units_prefetched),
            memory_hits: get(&self.memory_hits),
            disk_hits: get(&self.disk_hits),
            wait_ns: get(&self.wait_ns),
        }
    }
}

/// A snapshot of a remote image's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteStats {
    /// HTTP requests sent (retries included).
    pub requests: u64,
    /// Requests sent again after a transient failure.
    pub retries: u64,
    /// Fetches that failed for good (the reader got an I/O error).
    pub failures: u64,
    /// Body bytes received.
    pub bytes_fetched: u64,
    /// Units fetched over the network, on demand or ahead.
    pub units_fetched: u64,
    /// Of those, units fetched ahead of any reader.
    pub units_prefetched: u64,
    /// Unit reads answered from memory.
    pub memory_hits: u64,
    /// Unit reads answered from the disk cache.
    pub disk_hits: u64,
    /// Nanoseconds readers spent waiting on the network, summed over readers.
    pub wait_ns: u64,
}
