//! What read-ahead did for one image: blocks it decompressed, and of them those a reader then
//! read (used) and those no reader did (wasted), so that its cost can be weighed against what
//! it saved.

use std::sync::atomic::{AtomicU64, Ordering};

/// Live read-ahead counters of one image.
#[derive(Debug, Default)]
pub(crate) struct ReadAheadCounters {
    loads: AtomicU64,
    used: AtomicU64,
    wasted: AtomicU64,
    streams: AtomicU64,
    busy_cuts: AtomicU64,
}

impl ReadAheadCounters {
    pub(crate) fn loaded(&self) {
        self.loads.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn settled(&self, used: u64, wasted: u64) {
        self.used.fetch_add(used, Ordering::Relaxed);
        self.wasted.fetch_add(wasted, Ordering::Relaxed);
    }

    pub(crate) fn stream_started(&self) {
        self.streams.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn busy_cut(&self) {
        self.busy_cuts.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> ReadAheadStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ReadAheadStats {
            loads: get(&self.loads),
            used: get(&self.used),
            wasted: get(&self.wasted),
            streams: get(&self.streams),
            busy_cuts: get(&self.busy_cuts),
        }
    }
}

/// A snapshot of an image's read-ahead counters. `loads - used - wasted` blocks are pending:
/// decompressed ahead of a reader that has not got there yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadAheadStats {
    /// Blocks decompressed ahead of a reader by the read-ahead threads (a block the data cache
    /// already held is not counted: nothing was decompressed for it).
    pub loads: u64,
    /// Of them, blocks a reader then read from the data cache.
    pub used: u64,
    /// Of them, blocks no reader read: evicted from the data cache before the reader got there,
    /// or left behind when the reader seeked elsewhere or closed the file.
    pub wasted: u64,
    /// Streams that were read ahead of: readers that went on in order past what the kernel's
    /// own read-ahead asks for.
    pub streams: u64,
    /// Reads of a stream whose read-ahead was cut to one block per read-ahead thread because
    /// the CPUs were busy.
    pub busy_cuts: u64,
}

impl ReadAheadStats {
    /// Blocks decompressed ahead and not settled yet (the reader has not reached them).
    pub fn pending(&self) -> u64 {
        self.loads.saturating_sub(self.used + self.wasted)
    }
}
