//! Pushing decompressed blocks into the kernel's page cache (FUSE_NOTIFY_STORE), as the kernel's
//! own squashfs fills every page of a block it decompresses: after one small read of a block,
//! the next reads of that block are page-cache hits and never reach the daemon.
//!
//! The stores run on a thread of their own. A store waits for the locks of the pages it fills,
//! and the kernel holds those locks while a read of them is in flight: if request threads did
//! the stores, all of them could end up waiting for reads that only they can answer.

use crossbeam_channel::{Sender, TrySendError};
use fuser::{INodeNo, Notifier};
use squashd_core::Chunk;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

/// Blocks waiting to be stored; beyond this, offers are dropped (storing is an optimisation).
const QUEUE: usize = 64;

struct Job {
    ino: INodeNo,
    offset: u64,
    chunk: Chunk,
}

/// A queue of blocks to hand to the kernel's page cache, and the thread that does it.
pub(crate) struct PageStore {
    /// Made on first use: a background mount forks after the file system is built, and a
    /// thread started before the fork would not exist in the daemon.
    worker: OnceLock<Option<(Sender<Job>, JoinHandle<()>)>>,
    notifier: Arc<OnceLock<Notifier>>,
    /// Set when the file system goes away: queued stores are dropped, not sent.
    closing: Arc<AtomicBool>,
}

impl Drop for PageStore {
    /// Stops the store thread and waits for it: the session's /dev/fuse descriptor is closed
    /// once the session is over, and no store may be sent through that number afterwards.
    fn drop(&mut self) {
        if let Some(Some((tx, thread))) = self.worker.take() {
            self.closing.store(true, Ordering::Relaxed);
            drop(tx);
            let _ = thread.join();
        }
    }
}

impl PageStore {
    pub(crate) fn new() -> Self {
        PageStore {
            worker: OnceLock::new(),
            notifier: Arc::new(OnceLock::new()),
            closing: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The queue, starting the store thread the first time. The thread ends when the
    /// `PageStore` is dropped.
    fn queue(&self) -> Option<&Sender<Job>> {
        self.worker
            .get_or_init(|| {
                let (tx, rx) = crossbeam_channel::bounded::<Job>(QUEUE);
                let slot = self.notifier.clone();
                let closing = self.closing.clone();
                std::thread::Builder::new()
                    .name("page-store".into())
                    .spawn(move || {
                        for job in rx {
                            if closing.load(Ordering::Relaxed) {
                                break;
                            }
                            if let Some(n) = slot.get() {
                                // Best effort: the kernel may have dropped the inode meanwhile.
                                let _ = n.store(job.ino, job.offset, job.chunk.bytes());
                            }
                        }
                    })
                    .ok()
                    .map(|thread| (tx, thread))
            })
            .as_ref()
            .map(|(tx, _)| tx)
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
        if let Some(tx) = self.queue() {
            match tx.try_send(Job { ino, offset, chunk }) {
                Ok(()) | Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {}
            }
        }
    }
}
