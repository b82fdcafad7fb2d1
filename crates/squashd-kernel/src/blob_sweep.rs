//! The random reader's sweep on the kernel path: blocks of a file read at random, decompressed
//! on idle cores by workers of their own, then handed to EROFS's page cache at the reader's next
//! miss. Where and when is the core's policy ([`RandomSweep`]); this module does it.
//!
//! The sweep used to ask EROFS for its blocks at once (`posix_fadvise(WILLNEED)` beside the
//! reader's own fill), so EROFS's reads of a swept block reached the blob file system as
//! requests whose answer needed the block decompressed: they held the request threads (two on
//! two cores) for a whole decompression, and the reader's next miss queued behind them. At the
//! start of a pass of fio's random map, where nearly every read misses, a miss then cost
//! 666 us against 430 us with no sweep at all (bench/results/2026-11-27-readpath-s9.md).
//!
//! So a sweep worker decompresses the block into the data cache first, off the request threads;
//! the block is then "ready". The reader's next miss (inside a read of the mount, as every fill
//! is: see [`crate::block_fill`]) asks EROFS for the ready blocks, whose reads are then answered
//! from the data cache at once ([`crate::Blob::fill_read`]). A reader that comes to a swept
//! block before that finds it in the data cache (or waits for the worker's load of it): a round
//! trip, not a decompression, so the sweep is not counted as wasted.

use squashd_core::workers::Workers;
use squashd_core::FileReader;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Sweep jobs waiting at most (beyond, a miss sweeps nothing more).
const QUEUE: usize = 8;

/// Swept blocks remembered (being decompressed, or ready to hand to EROFS) at most; the oldest
/// are forgotten beyond (a reader that stopped missing leaves them in the data cache only).
const REMEMBERED: usize = 32;

/// A block of a file of the blob: the file's index in the layout, and the block's in the file.
pub type FileBlock = (usize, u64);

/// One block to decompress.
struct Job {
    reader: FileReader,
    block: FileBlock,
}

/// A swept block, and whether its decompression is done.
#[derive(Debug, Clone, Copy)]
struct Swept {
    block: FileBlock,
    ready: bool,
}

/// What the sweep's workers did, for `status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlobSweepStats {
    /// Blocks the workers decompressed.
    pub decompressed: u64,
    /// Swept blocks a reader came to before EROFS was given them: the reader's miss found
    /// the block decompressed (or being decompressed), a round trip rather than a wait for
    /// a decompression of its own.
    pub reached: u64,
}

/// The sweep workers of one blob and the blocks they were given.
pub(crate) struct BlobSweep {
    workers: Workers<Job>,
    swept: Arc<Mutex<VecDeque<Swept>>>,
    decompressed: Arc<AtomicU64>,
    reached: AtomicU64,
}

impl std::fmt::Debug for BlobSweep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobSweep")
            .field("swept", &self.swept)
            .finish_non_exhaustive()
    }
}

impl BlobSweep {
    /// `threads` workers (started on the first sweep; none: nothing is swept).
    pub(crate) fn new(threads: usize) -> Self {
        let swept: Arc<Mutex<VecDeque<Swept>>> = Arc::default();
        let done = swept.clone();
        let decompressed = Arc::new(AtomicU64::new(0));
        let count = decompressed.clone();
        let decompress = move |job: Job| {
            // Into the data cache: a reader that comes meanwhile waits for this load rather
            // than doing its own. A block that cannot be read is left for the reader to fail on.
            if job.reader.chunk(job.block.1).is_ok() {
                let mut swept = done.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(s) = swept.iter_mut().find(|s| s.block == job.block) {
                    s.ready = true;
                }
                // Counted once ready: whoever sees the count sees the block ready.
                count.fetch_add(1, Ordering::Relaxed);
            }
        };
        BlobSweep {
            workers: Workers::new(
                "blob sweep",
                |i| format!("blob-sweep-{i}"),
                threads,
                QUEUE,
                decompress,
            ),
            swept,
            decompressed,
            reached: AtomicU64::new(0),
        }
    }

    /// What the workers did so far.
    pub(crate) fn stats(&self) -> BlobSweepStats {
        BlobSweepStats {
            decompressed: self.decompressed.load(Ordering::Relaxed),
            reached: self.reached.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Swept>> {
        self.swept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `block` was swept and not yet handed to EROFS: a reader that misses it now finds
    /// it decompressed (or being decompressed). It is forgotten either way.
    pub(crate) fn reached(&self, block: FileBlock) -> bool {
        let mut swept = self.lock();
        match swept.iter().position(|s| s.block == block) {
            Some(at) => {
                swept.remove(at);
                self.reached.fetch_add(1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// Whether `block` is swept already (being decompressed, or ready).
    pub(crate) fn has(&self, block: FileBlock) -> bool {
        self.lock().iter().any(|s| s.block == block)
    }

    /// Gives `block` of `reader`'s file to the workers; false when their queue is full.
    pub(crate) fn offer(&self, reader: &FileReader, block: FileBlock) -> bool {
        let mut swept = self.lock();
        let job = Job {
            reader: reader.clone(),
            block,
        };
        if !self.workers.offer(job) {
            return false;
        }
        if swept.len() >= REMEMBERED {
            swept.pop_front();
        }
        swept.push_back(Swept {
            block,
            ready: false,
        });
        true
    }

    /// The blocks decompressed since the last call, forgotten here: the caller hands them to
    /// EROFS.
    pub(crate) fn take_ready(&self) -> Vec<FileBlock> {
        let mut swept = self.lock();
        let ready = swept.iter().filter(|s| s.ready).map(|s| s.block).collect();
        swept.retain(|s| !s.ready);
        ready
    }
}
