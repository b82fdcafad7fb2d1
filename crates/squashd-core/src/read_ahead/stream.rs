//! Where one file's reading stands: the stream it is on, what was queued ahead of it, and the
//! blocks decompressed ahead that it has not read yet, to be settled as used or wasted.

use super::stats::ReadAheadCounters;
use super::Balance;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Where a file's reading stands, for telling a stream from seeks and reading ahead of it.
/// One per open file (or per file of a blob); cheap to create.
#[derive(Debug, Default)]
pub struct ReadState {
    stream: Arc<Mutex<Stream>>,
}

/// Shared by the file's [`ReadState`] and the read-ahead jobs queued for it: the last of them
/// to go settles what was never read.
#[derive(Debug, Default)]
pub(crate) struct Stream {
    /// Byte offset where the last read ended.
    pub(crate) next_offset: u64,
    /// Bytes read in the current stream (since the last seek): what it has shown, counted in
    /// bytes read rather than from where it began, so that reads hopping forward a few blocks
    /// at a time (at random) do not add up to a stream.
    pub(crate) streamed: u64,
    /// Chunks below this index were queued for read-ahead in this stream.
    pub(crate) queued_until: u64,
    /// Bumped at every seek: a job of an older stream finds its reader gone.
    pub(crate) generation: u64,
    /// Chunks decompressed ahead in this stream and not yet read, in the order loaded.
    pub(crate) ahead: Vec<u64>,
    /// Where settled blocks are counted, once a job was queued.
    pub(crate) ledger: Option<Ledger>,
}

/// Where a stream's settled blocks are counted: the image's counters and the pool's balance.
#[derive(Debug, Clone)]
pub(crate) struct Ledger {
    pub(crate) counters: Arc<ReadAheadCounters>,
    pub(crate) balance: Arc<Balance>,
}

impl Ledger {
    pub(crate) fn settle(&self, used: u64, wasted: u64) {
        if used + wasted > 0 {
            self.counters.settled(used, wasted);
            self.balance.settled(used, wasted);
        }
    }
}

impl ReadState {
    /// The chunks below this index were queued for read-ahead (and may be loading now), if
    /// asked before [`super::ReadAheadPool::on_read`] notes the read at hand: a reader then goes
    /// through the data cache for them, where a load in flight is waited for rather than done
    /// again (see [`crate::read_policy`]).
    pub(crate) fn queued_until(&self) -> u64 {
        self.lock().queued_until
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Stream> {
        self.stream.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn shared(&self) -> Arc<Mutex<Stream>> {
        self.stream.clone()
    }
}

impl Stream {
    /// Settles the blocks decompressed ahead that `done` says are done with: each is used if
    /// `cached` says the data cache still holds it (the reader reads it from there), else wasted
    /// (evicted before the reader came: it decompresses the block again).
    pub(crate) fn settle_where(
        &mut self,
        done: impl Fn(u64) -> bool,
        cached: impl Fn(u64) -> bool,
    ) -> (u64, u64) {
        let (mut used, mut wasted) = (0, 0);
        self.ahead.retain(|&index| {
            if !done(index) {
                return true;
            }
            if cached(index) {
                used += 1;
            } else {
                wasted += 1;
            }
            false
        });
        if let Some(ledger) = &self.ledger {
            ledger.settle(used, wasted);
        }
        (used, wasted)
    }
}

impl Drop for Stream {
    /// The file is closed and every job for it has run: what it never read was wasted.
    fn drop(&mut self) {
        if let Some(ledger) = &self.ledger {
            ledger.settle(0, self.ahead.len() as u64);
        }
    }
}
