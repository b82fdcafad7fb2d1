//! Pushing decompressed blocks into the kernel's page cache (FUSE_NOTIFY_STORE), as the kernel's
//! own squashfs fills every page of a block it decompresses: after one small read of a block,
//! the next reads of that block are page-cache hits and never reach the daemon.
//!
//! The stores run on a thread of their own. A store waits for the locks of the pages it fills,
//! and the kernel holds those locks while a read of them is in flight: if request threads did
//! the stores, all of them could end up waiting for reads that only they can answer.

use fuser::{INodeNo, Notifier};
use squashd_core::workers::Workers;
use squashd_core::Chunk;
use std::sync::{Arc, OnceLock};

/// Blocks waiting to be stored; beyond this, offers are dropped (storing is an optimisation).
const QUEUE: usize = 64;

struct Job {
    ino: INodeNo,
    offset: u64,
    chunk: Chunk,
}

/// A queue of blocks to hand to the kernel's page cache, and the thread that does it.
///
/// The thread starts on first use (a background mount forks after the file system is built,
/// and a thread started before the fork would not exist in the daemon). Dropping the store
/// stops the thread and waits for it: the session's /dev/fuse descriptor is closed once the
/// session is over, and no store may be sent through that number afterwards.
pub(crate) struct PageStore {
    worker: Workers<Job>,
    notifier: Arc<OnceLock<Notifier>>,
}

impl PageStore {
    pub(crate) fn new() -> Self {
        let notifier: Arc<OnceLock<Notifier>> = Arc::new(OnceLock::new());
        let slot = notifier.clone();
        let store = move |job: Job| {
            if let Some(n) = slot.get() {
                // Best effort: the kernel may have dropped the inode meanwhile.
                let _ = n.store(job.ino, job.offset, job.chunk.bytes());
            }
        };
        PageStore {
            worker: Workers::new("page store", |_| "page-store".into(), 1, QUEUE, store),
            notifier,
        }
    }

    /// Where to put the session's notifier once it exists: the session is made after (and
    /// takes ownership of) the file system.
    pub(crate) fn notifier_slot(&self) -> Arc<OnceLock<Notifier>> {
        self.notifier.clone()
    }

    /// Offers block `chunk`, which starts at byte `offset` of node `ino`, for storing. Dropped
    /// when the queue is full: storing only saves later requests.
    pub(crate) fn offer(&self, ino: INodeNo, offset: u64, chunk: Chunk) {
        if chunk.is_hole() {
            return;
        }
        self.worker.offer(Job { ino, offset, chunk });
    }
}
