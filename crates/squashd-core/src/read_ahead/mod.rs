//! Read-ahead: a file's next blocks decompressed by background threads ahead of a reader that
//! streams through it, so that one reader is not held to one core's decompression speed. Only
//! where it pays: a block decompressed ahead and never read costs a core's time for nothing,
//! and on a host short of CPU that time is taken from the readers.
//!
//! (Words: *read-ahead* is this, squashd decompressing a file's blocks ahead of its reader;
//! *the kernel's read-ahead* is the page cache asking a file system for pages ahead of a
//! reader; *prefetch* is fetching image bytes from a source before they are asked for, as
//! [`crate::Image::prefetch`] and a remote image's fetch units do.)
//!
//! The policy, per open file ([`ReadState`]) and per pool ([`ReadAheadPool::on_read`]):
//! - **A stream first.** A read that starts within a few blocks of where the last one ended
//!   continues a stream; any other read is a seek and starts a new one. Nothing is read ahead
//!   until the stream has covered [`min_stream`] (512 KiB, at least two blocks): the kernel's
//!   own read-ahead already asks for up to 128 KiB ahead of a reader, so a small file read
//!   whole, the pages around a fault in a mapped library, or a short run of reads is served in
//!   a request or two and gains nothing from threads.
//! - **No further ahead than it has come.** A stream gets as many blocks ahead as it has read
//!   (so a stream that stops leaves unread at most what it read), up to the window, and never
//!   past the end of the file.
//! - **Backing off on waste.** Every block decompressed ahead is settled: *used* when the
//!   reader reads it from the data cache, *wasted* when it was evicted first or the reader left
//!   (a seek, or the file closed) before reaching it. Each [`Balance`] epoch of settled blocks
//!   with more than a quarter wasted halves the pool's window (down to one block); an epoch with
//!   less than an eighth wasted doubles it back.
//! - **Backing off when the CPUs are busy.** While the run queue says every core has other
//!   tasks waiting ([`CpuGauge`]), a stream is read ahead by one block per read-ahead thread at
//!   most (two at least): the threads still decompress beside the reader, which a stream that
//!   has shown itself uses, but no deeper than that, so that a reader that stops leaves little
//!   unread. (Stopping read-ahead altogether there was tried: on this 2-core machine shared
//!   with other builds, the run queue was that long most of the time, and sequential reads on
//!   the kernel path fell to a third; bench/results/2026-11-26-readahead.md.) Nothing is queued
//!   beyond a full queue either.
//!
//! A reader that seeks gets none of this; a file read at random may instead have blocks brought
//! in beside its reader on idle cores, by the caller that serves it ([`RandomSweep`], with its
//! own rules for where that pays).
//!
//! Workers call [`FileReader::chunk`], which leaves the block in the image's data cache, where
//! the reader finds it (or waits for the single load in flight). Memory stays bounded: the queue
//! holds at most `queue` jobs, and the blocks land in the data cache, which has its own byte
//! budget. The counters ([`ReadAheadStats`]) are the image's, in [`crate::ImageStats`].
//!
//! Workers start on first use, so a daemon can fork after mounting without threads. Dropping the
//! pool stops and joins its workers: a queued job holds the image open, so a worker left running
//! would keep reading (and holding the file of) an image whose mount is gone, after `squashd
//! detach` has already answered.

mod run_queue;
mod stats;
mod stream;
mod sweep;

pub use run_queue::CpuGauge;
pub(crate) use stats::ReadAheadCounters;
pub use stats::ReadAheadStats;
pub use stream::ReadState;
pub use sweep::{RandomSweep, SweepState, SweepStats, AFTER_MISSES};

use crate::workers::Workers;
use crate::FileReader;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use stream::{Ledger, Stream};

/// Bytes a stream must have covered before it is read ahead of: past what the kernel's own
/// read-ahead asks for (128 KiB by default) several times over, and at least two blocks.
pub fn min_stream(block_size: u64) -> u64 {
    (512 << 10).max(2 * block_size)
}

/// Settled blocks per epoch of the pool's [`Balance`].
const EPOCH: u64 = 32;

struct Job {
    reader: FileReader,
    index: u64,
    stream: Arc<Mutex<Stream>>,
    generation: u64,
}

/// What a pool's readers have made of its read-ahead lately: the window it allows now, and its
/// threads at work.
#[derive(Debug)]
pub(crate) struct Balance {
    /// The window as configured, in blocks.
    window: u64,
    /// The window allowed now, in blocks: halved after a wasteful epoch, doubled back after a
    /// thrifty one.
    limit: AtomicU64,
    /// Used and wasted blocks settled in this epoch.
    epoch: Mutex<(u64, u64)>,
    /// Read-ahead threads decompressing now (the run queue counts them too).
    running: AtomicU64,
}

impl Balance {
    fn new(window: u64) -> Self {
        Balance {
            window,
            limit: AtomicU64::new(window),
            epoch: Mutex::new((0, 0)),
            running: AtomicU64::new(0),
        }
    }

    pub(crate) fn settled(&self, used: u64, wasted: u64) {
        let mut epoch = self.epoch.lock().unwrap_or_else(PoisonError::into_inner);
        epoch.0 += used;
        epoch.1 += wasted;
        let (used, wasted) = *epoch;
        let total = used + wasted;
        if total < EPOCH {
            return;
        }
        *epoch = (0, 0);
        let limit = self.limit.load(Ordering::Relaxed);
        let limit = if wasted * 4 > total {
            (limit / 2).max(1)
        } else if wasted * 8 < total {
            (limit * 2).min(self.window)
        } else {
            limit
        };
        self.limit.store(limit, Ordering::Relaxed);
    }
}

/// A pool of read-ahead threads shared by every open file of a mount (or every file of a blob),
/// with the policy that decides what they decompress.
pub struct ReadAheadPool {
    threads: usize,
    gauge: CpuGauge,
    balance: Arc<Balance>,
    workers: Workers<Job>,
}

impl std::fmt::Debug for ReadAheadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadAheadPool")
            .field("threads", &self.threads)
            .field("balance", &self.balance)
            .field("gauge", &self.gauge)
            .finish()
    }
}

impl ReadAheadPool {
    /// A pool of `threads` workers (0 disables read-ahead) that keep up to `window` chunks
    /// ahead of each stream, with at most `queue` jobs waiting; held back when the run queue
    /// says the CPUs are busy.
    pub fn new(threads: usize, window: u64, queue: usize) -> Self {
        Self::with_gauge(threads, window, queue, CpuGauge::default())
    }

    /// The same, with `gauge` telling when the CPUs are busy.
    pub fn with_gauge(threads: usize, window: u64, queue: usize, gauge: CpuGauge) -> Self {
        let balance = Arc::new(Balance::new(window));
        let running = balance.clone();
        let load = move |job: Job| {
            running.running.fetch_add(1, Ordering::Relaxed);
            load_ahead(job);
            running.running.fetch_sub(1, Ordering::Relaxed);
        };
        ReadAheadPool {
            threads,
            gauge,
            balance,
            workers: Workers::new(
                "read-ahead",
                |i| format!("read-ahead-{i}"),
                threads,
                queue,
                load,
            ),
        }
    }

    /// The window the pool allows now, in blocks (the configured one, or less after waste).
    pub fn window_now(&self) -> u64 {
        self.balance.limit.load(Ordering::Relaxed)
    }

    /// Notes a read of `len` bytes at `offset` of `reader`'s file, settles the blocks read
    /// ahead that it reads (or, for a seek, leaves behind), and queues the chunks after it if
    /// the policy of this module says so. Returns whether it continued the previous read (a
    /// reader streaming through the file, rather than seeking).
    pub fn on_read(&self, state: &ReadState, reader: &FileReader, offset: u64, len: u64) -> bool {
        let end = offset.saturating_add(len).min(reader.size());
        let bs = u64::from(reader.block_size().max(1));
        let (first, last) = (offset / bs, end.saturating_sub(1) / bs);
        let cached = |index| reader.chunk_cached(index);
        let mut s = state.lock();
        let previous_end = std::mem::replace(&mut s.next_offset, end);
        // Several threads serve one file's reads (the kernel's read-ahead requests among
        // them), so they may arrive a little out of order: within a few blocks is in order.
        if offset.abs_diff(previous_end) > 4 * bs {
            // A seek: what this read takes of the blocks read ahead is used; the rest the
            // reader left behind. Reading this stretch again (or any other) in order is a new
            // stream.
            s.settle_where(|i| (first..=last).contains(&i), cached);
            s.settle_where(|_| true, |_| false);
            s.streamed = end.saturating_sub(offset);
            s.queued_until = 0;
            s.generation += 1;
            return false;
        }
        // In order: the blocks read ahead up to here are read now, or were skipped over.
        s.settle_where(|i| i <= last, cached);
        s.streamed = s.streamed.saturating_add(end.saturating_sub(offset));
        let streamed = s.streamed;
        if self.threads == 0 || self.balance.window == 0 || streamed < min_stream(bs) {
            return true;
        }
        // As far ahead as the stream has come, within what the balance allows, not past the
        // end of the file; on busy CPUs, one block per thread (see the module doc).
        let mut ahead = (streamed / bs).min(self.window_now()).max(1);
        let counters = reader.read_ahead_counters();
        let busy_cap = (self.threads as u64).max(2);
        if ahead > busy_cap
            && self
                .gauge
                .busy(self.balance.running.load(Ordering::Relaxed))
        {
            ahead = busy_cap;
            counters.busy_cut();
        }
        let stop = last.saturating_add(1 + ahead).min(reader.chunk_count());
        let from = s.queued_until.max(last + 1);
        if from >= stop {
            return true;
        }
        if s.queued_until == 0 {
            counters.stream_started();
        }
        s.ledger.get_or_insert_with(|| Ledger {
            counters: counters.clone(),
            balance: self.balance.clone(),
        });
        let mut queued = from;
        for index in from..stop {
            let job = Job {
                reader: reader.clone(),
                index,
                stream: state.shared(),
                generation: s.generation,
            };
            if !self.workers.offer(job) {
                break;
            }
            queued = index + 1;
        }
        s.queued_until = s.queued_until.max(queued);
        true
    }
}

/// A worker's job: decompress the chunk into the data cache, and put it on its stream's books.
fn load_ahead(job: Job) {
    let before = crate::image::loads_on_this_thread();
    // Errors are reported by the reader when it gets there.
    let loaded = job.reader.chunk(job.index).is_ok();
    if !loaded || crate::image::loads_on_this_thread() == before {
        // Already cached (another reader, or an earlier job): nothing was decompressed ahead.
        return;
    }
    job.reader.read_ahead_counters().loaded();
    let bs = u64::from(job.reader.block_size().max(1));
    let mut s = job.stream.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(ledger) = s.ledger.clone() else {
        return;
    };
    if s.generation != job.generation {
        // The reader seeked away while this job waited.
        ledger.settle(0, 1);
    } else if s.next_offset > job.index * bs {
        // The reader got there first and waited for this load: it read it.
        ledger.settle(1, 0);
    } else {
        s.ahead.push(job.index);
    }
}
