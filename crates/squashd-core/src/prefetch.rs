//! Read-ahead decompression: sequential readers of a file get its next blocks decompressed by
//! background threads, so one reader is not held to one core's decompression speed.
//!
//! Each open file tracks where its last read ended. A read that starts near there is
//! sequential; it then queues the next `window` chunks that were not queued yet. Workers call
//! [`FileReader::chunk`], which leaves the block in the image's data cache, where the reader
//! finds it (or waits for the single load in flight). Memory stays bounded: the queue holds at
//! most `queue` jobs (a full queue drops new ones: the reader decompresses those itself), and
//! the blocks land in the data cache, which has its own byte budget. Workers start on first
//! use, so a daemon can fork after mounting without threads.
//!
//! Dropping the pool stops and joins its workers: a queued job holds the image open, so a
//! worker left running would keep reading (and holding the file of) an image whose mount is
//! gone, after `squashd detach` has already answered.

use crate::workers::Workers;
use crate::FileReader;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where a file's reading stands, for detecting sequential access.
#[derive(Debug, Default)]
pub struct ReadState {
    /// Byte offset where the last read ended.
    next_offset: AtomicU64,
    /// Chunks below this index were already queued.
    queued_until: AtomicU64,
}

impl ReadState {
    /// The chunks below this index were queued for read-ahead (and may be loading now), if
    /// asked before [`Prefetcher::on_read`] notes the read at hand: a reader then goes through
    /// the data cache for them, where a load in flight is waited for rather than done again
    /// (see [`crate::read_policy`]).
    pub(crate) fn queued_until(&self) -> u64 {
        self.queued_until.load(Ordering::Relaxed)
    }
}

struct Job {
    reader: FileReader,
    index: u64,
}

/// A pool of read-ahead threads shared by every open file of a mount.
pub struct Prefetcher {
    threads: usize,
    window: u64,
    workers: Workers<Job>,
}

impl std::fmt::Debug for Prefetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prefetcher")
            .field("threads", &self.threads)
            .field("window", &self.window)
            .finish()
    }
}

impl Prefetcher {
    /// A pool of `threads` workers (0 disables read-ahead) that keep up to `window` chunks
    /// ahead of each sequential reader, with at most `queue` jobs waiting.
    pub fn new(threads: usize, window: u64, queue: usize) -> Self {
        // Errors are reported by the reader when it gets there.
        let load = |job: Job| drop(job.reader.chunk(job.index));
        Prefetcher {
            threads,
            window,
            workers: Workers::new(
                "read-ahead",
                |i| format!("prefetch-{i}"),
                threads,
                queue,
                load,
            ),
        }
    }

    /// Notes a read of `len` bytes at `offset` of `reader`'s file and, if it continues the
    /// previous one, queues the chunks after it. Returns whether it continued the previous one
    /// (a reader streaming through the file, rather than seeking).
    pub fn on_read(&self, state: &ReadState, reader: &FileReader, offset: u64, len: u64) -> bool {
        let end = offset.saturating_add(len).min(reader.size());
        let previous_end = state.next_offset.swap(end, Ordering::Relaxed);
        let bs = reader.block_size() as u64;
        // Several worker threads serve one file's read-ahead requests, so they may arrive a
        // little out of order: anything within a few blocks of the last end is sequential.
        let sequential = offset.abs_diff(previous_end) <= 4 * bs;
        if !sequential {
            // A seek: forget what was queued, so that reading this stretch again (or any
            // other) in order gets read-ahead anew.
            state.queued_until.store(0, Ordering::Relaxed);
            return false;
        }
        if self.threads == 0 || self.window == 0 || end == 0 {
            return true;
        }
        let last = (end - 1) / bs;
        let stop = (last + 1 + self.window).min(reader.chunk_count());
        let from = state
            .queued_until
            .fetch_max(stop, Ordering::Relaxed)
            .max(last + 1);
        if from >= stop {
            return true;
        }
        for index in from..stop {
            let job = Job {
                reader: reader.clone(),
                index,
            };
            if !self.workers.offer(job) {
                break;
            }
        }
        true
    }
}
