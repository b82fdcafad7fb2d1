//! Pushing decompressed blocks into the kernel's page cache (FUSE_NOTIFY_STORE), as the kernel's
//! own squashfs fills every page of a block it decompresses: after one small read of a block,
//! the next reads of that block are page-cache hits and never reach the daemon.
//!
//! The stores run on a thread of their own. A store waits for the locks of the pages it fills,
//! and the kernel holds those locks while a read of them is in flight: if request threads did
//! the stores, all of them could end up waiting for reads that only they can answer. So a read
//! is answered first and its block stored after, never the other way round.
//!
//! One page store serves every FUSE server of squashd: the FUSE path's files, and the kernel
//! path's blob file system (its metadata images).

use crate::server::Notifier;
use fuser::INodeNo;
use squashd_core::workers::Workers;
use squashd_core::Chunk;
use std::sync::{Arc, OnceLock};

/// Stores waiting; beyond this, offers are dropped (storing is an optimisation).
const QUEUE: usize = 64;

/// Bytes to hand to the kernel's page cache. Dropped once stored, or when the store is given
/// up (a full queue, no session): what must happen either way goes in its `Drop`.
pub trait StoreBytes: Send + 'static {
    /// The bytes to store.
    fn bytes(&self) -> &[u8];
}

impl StoreBytes for Chunk {
    fn bytes(&self) -> &[u8] {
        Chunk::bytes(self)
    }
}

struct Job {
    ino: INodeNo,
    offset: u64,
    bytes: Box<dyn StoreBytes>,
}

/// A queue of blocks to hand to the kernel's page cache, and the thread that does it.
///
/// The thread starts on first use (a background mount forks after the file system is built,
/// and a thread started before the fork would not exist in the daemon). Dropping the store
/// stops the thread and waits for it; the session's /dev/fuse descriptor, which the notifier
/// shares, closes after that.
pub struct PageStore {
    worker: Workers<Job>,
    notifier: Arc<OnceLock<Notifier>>,
}

impl std::fmt::Debug for PageStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageStore").finish_non_exhaustive()
    }
}

impl Default for PageStore {
    fn default() -> Self {
        Self::new()
    }
}

impl PageStore {
    /// A page store with no session yet (see [`PageStore::notifier_slot`]).
    pub fn new() -> Self {
        let notifier: Arc<OnceLock<Notifier>> = Arc::new(OnceLock::new());
        let slot = notifier.clone();
        let store = move |job: Job| {
            if let Some(n) = slot.get() {
                store(n, job.ino, job.offset, job.bytes.bytes());
            }
        };
        PageStore {
            worker: Workers::new("page store", |_| "page-store".into(), 1, QUEUE, store),
            notifier,
        }
    }

    /// Where to put the session's notifier once it exists: the session is made after (and
    /// takes ownership of) the file system.
    pub fn notifier_slot(&self) -> Arc<OnceLock<Notifier>> {
        self.notifier.clone()
    }

    /// Offers `bytes`, which start at byte `offset` of node `ino`, for storing once the reads
    /// in flight are answered. Dropped when the queue is full: storing only saves later
    /// requests.
    pub fn offer(&self, ino: INodeNo, offset: u64, bytes: impl StoreBytes) {
        self.worker.offer(Job {
            ino,
            offset,
            bytes: Box::new(bytes),
        });
    }

    /// Stores `bytes` at `offset` of `ino` now, on the calling thread. Only for a node the
    /// kernel can have no read in flight on (one being opened: it has none of its pages yet):
    /// a store waits for the pages' locks.
    pub fn store_now(&self, ino: INodeNo, offset: u64, bytes: &[u8]) {
        if let Some(n) = self.notifier.get() {
            store(n, ino, offset, bytes);
        }
    }
}

fn store(notifier: &Notifier, ino: INodeNo, offset: u64, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    // Best effort: the kernel may have dropped the inode meanwhile, and a failed store costs
    // only the requests it would have saved.
    let _ = notifier.store(ino.0, offset, bytes);
}
