//! The random reader's sweep on the FUSE path: blocks of a file read at random decompressed on
//! idle cores and handed to the kernel's page cache (FUSE_NOTIFY_STORE) before the reader comes
//! to them. Where and when is the core's policy ([`RandomSweep`]); this module does it.
//!
//! The policy takes only blocks the reader's cache lacks. The kernel path asks the kernel
//! (cachestat(2) on EROFS's file); a FUSE server cannot look at its own files' page cache, so
//! each open file remembers which of its blocks were handed to it ([`StoredBlocks`]): by a
//! reader's small read (its block is stored once replied) or by the sweep. A read of a
//! remembered block means the kernel dropped it since: it is forgotten, and when several reads
//! in a row find that, the whole page cache of the file was dropped (`posix_fadvise(DONTNEED)`,
//! drop_caches), and everything is forgotten.

use crate::server::Notifier;
use fuser::INodeNo;
use squashd_core::read_ahead::{CpuGauge, RandomSweep, SweepState};
use squashd_core::workers::Workers;
use squashd_core::FileReader;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// Sweep jobs waiting at most (beyond, a miss sweeps nothing).
const QUEUE: usize = 8;

/// Files of more blocks than this are not remembered, nor swept (a bitmap of 2 MiB).
const MAX_BLOCKS: u64 = 1 << 24;

/// Reads in a row of remembered blocks that make a file's whole page cache count as dropped.
const DROPPED_AFTER: u32 = 8;

/// One block to decompress and store.
struct Job {
    reader: FileReader,
    node: INodeNo,
    index: u64,
}

/// The sweep of one mount's open files: its policy and its workers.
pub(crate) struct FuseSweep {
    policy: Arc<RandomSweep>,
    workers: Workers<Job>,
}

impl std::fmt::Debug for FuseSweep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FuseSweep")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// What one open file was read and given: its sweep, and the blocks handed to the page cache.
#[derive(Debug, Default)]
pub(crate) struct FileSweep {
    state: SweepState,
    stored: Mutex<StoredBlocks>,
}

/// Blocks of a file handed to the kernel's page cache since it last seemed to drop them.
#[derive(Debug, Default)]
struct StoredBlocks {
    /// One bit per block, made at the first random miss of a file the policy sweeps.
    bits: Vec<u64>,
    /// Reads in a row that found their block remembered.
    dropped_in_a_row: u32,
}

impl StoredBlocks {
    fn get(&self, index: u64) -> bool {
        let (word, bit) = ((index / 64) as usize, index % 64);
        self.bits.get(word).is_some_and(|w| w & (1 << bit) != 0)
    }

    fn set(&mut self, index: u64, on: bool) {
        let (word, bit) = ((index / 64) as usize, index % 64);
        if let Some(w) = self.bits.get_mut(word) {
            if on {
                *w |= 1 << bit;
            } else {
                *w &= !(1 << bit);
            }
        }
    }
}

impl FuseSweep {
    /// A sweep that stores through `notifier` once the session exists, held back when `gauge`
    /// says the CPUs are busy; `enabled` false (no read-ahead) sweeps nothing.
    pub(crate) fn new(enabled: bool, gauge: CpuGauge, notifier: Arc<OnceLock<Notifier>>) -> Self {
        let policy = Arc::new(RandomSweep::with_gauge(enabled, gauge));
        let threads = policy.per_miss() as usize;
        let store = move |job: Job| {
            // Decompressed into the data cache (a reader that comes meanwhile waits for this
            // load rather than doing its own), then handed to the page cache. A worker may wait
            // for page locks here: reads in flight are answered by the request threads.
            if let (Ok(chunk), Some(n)) = (job.reader.chunk(job.index), notifier.get()) {
                let offset = job.index * u64::from(job.reader.block_size());
                let bytes = chunk.bytes();
                if !bytes.is_empty() {
                    let _ = n.store(job.node.0, offset, bytes);
                }
            }
        };
        FuseSweep {
            policy,
            workers: Workers::new("sweep", |i| format!("sweep-{i}"), threads, QUEUE, store),
        }
    }

    /// Its policy, whose counters `status` shows.
    pub(crate) fn policy(&self) -> Arc<RandomSweep> {
        self.policy.clone()
    }

    /// Notes a read of one block, `index`, of `reader`'s file (node `node`, sweep `file`), that
    /// missed the page cache and will be stored whole once replied; a seek (`random`) also
    /// sweeps the blocks the policy names that the page cache was not given.
    pub(crate) fn on_small_read(
        &self,
        file: &FileSweep,
        reader: &FileReader,
        node: INodeNo,
        index: u64,
        random: bool,
    ) {
        let chunks = reader.chunk_count();
        if self.policy.per_miss() == 0 || chunks > MAX_BLOCKS {
            return;
        }
        let mut stored = file.stored.lock().unwrap_or_else(PoisonError::into_inner);
        if stored.get(index) {
            // Given to the page cache, and asked for again: the kernel dropped it.
            stored.dropped_in_a_row += 1;
            if stored.dropped_in_a_row >= DROPPED_AFTER {
                stored.bits.iter_mut().for_each(|w| *w = 0);
                stored.dropped_in_a_row = 0;
            }
        } else {
            stored.dropped_in_a_row = 0;
        }
        if !random {
            stored.set(index, true);
            return;
        }
        let candidates = self.policy.candidates(&file.state, index, chunks);
        if candidates.is_empty() {
            stored.set(index, true);
            return;
        }
        if stored.bits.is_empty() {
            stored.bits = vec![0; chunks.div_ceil(64) as usize];
        }
        stored.set(index, true);
        let mut taken = 0;
        for c in candidates {
            if taken >= self.policy.per_miss() {
                break;
            }
            if stored.get(c) {
                continue;
            }
            let job = Job {
                reader: reader.clone(),
                node,
                index: c,
            };
            if !self.workers.offer(job) {
                break;
            }
            stored.set(c, true);
            self.policy.swept(&file.state, c);
            taken += 1;
        }
    }
}
