//! The blob's own page cache, bounded: what squashd handed it (read replies and stores) is
//! remembered in order, and once it holds more than the budget the oldest ranges are dropped
//! (FUSE_NOTIFY_INVAL_INODE). EROFS copies what it reads into its own page cache, so the blob's
//! copy only serves the next misses of the same blocks.

use fuser::INodeNo;
use squashd_fuse::page_store::PageStore;
use std::collections::VecDeque;
use std::sync::Mutex;

/// Ranges handed to the blob's page cache, oldest first, and their total.
#[derive(Debug)]
pub(crate) struct StoredRanges {
    budget: u64,
    ranges: Mutex<(VecDeque<(INodeNo, u64, u64)>, u64)>,
}

impl StoredRanges {
    /// At most `budget` bytes kept.
    pub(crate) fn new(budget: u64) -> Self {
        StoredRanges {
            budget,
            ranges: Mutex::new((VecDeque::new(), 0)),
        }
    }

    /// Notes `len` bytes at `offset` of `ino` handed to the page cache, and queues the oldest
    /// ranges' invalidation through `store` while the total is over budget. A range whose
    /// invalidation cannot be queued (a full queue) stays first in line for the next call.
    pub(crate) fn replied(&self, store: &PageStore, ino: INodeNo, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        let mut guard = self.ranges.lock().unwrap_or_else(|e| e.into_inner());
        let (ranges, total) = &mut *guard;
        ranges.push_back((ino, offset, len));
        *total += len;
        while *total > self.budget {
            let Some(&(ino, offset, len)) = ranges.front() else {
                break;
            };
            if !store.offer_invalidation(ino, offset, len) {
                break;
            }
            ranges.pop_front();
            *total -= len;
        }
    }
}
