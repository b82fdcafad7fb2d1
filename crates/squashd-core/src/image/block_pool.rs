//! Buffers of data blocks that whole-file readers are done with, reused for the next blocks
//! loaded into the data cache.
//!
//! A walk that reads every file of an image (`read_bytes` of each, from Python) has the next
//! files' blocks read ahead into the data cache, and each one is copied out once and dropped
//! (`ImageInner::data_block_to_slice`). A block loaded into a new allocation costs fresh memory
//! (page faults, the pages zeroed by the kernel) and a copy from the thread's scratch buffer; one
//! loaded into a block a reader has just handed back costs neither: it is decompressed into it
//! in place. Only blocks nobody else holds are kept (an `Arc` with one owner gives `&mut`
//! access safely), and only a few, so the pool holds little memory outside the cache's budget.

use std::sync::{Arc, Mutex, PoisonError};

/// Bytes of idle blocks kept at most (at least [`MIN_BLOCKS`] blocks).
const POOL_BYTES: usize = 4 << 20;
/// Idle blocks kept at least, whatever the block size.
const MIN_BLOCKS: usize = 4;

/// Idle data-block buffers of one block size.
pub(crate) struct BlockPool {
    idle: Mutex<Vec<Arc<[u8]>>>,
    block_len: usize,
    keep: usize,
}

impl BlockPool {
    /// A pool of buffers of `block_len` bytes (the image's block size).
    pub(crate) fn new(block_len: usize) -> Self {
        BlockPool {
            idle: Mutex::new(Vec::new()),
            block_len,
            keep: (POOL_BYTES / block_len.max(1)).max(MIN_BLOCKS),
        }
    }

    /// The length of the pool's buffers.
    pub(crate) fn block_len(&self) -> usize {
        self.block_len
    }

    /// Takes back `block` if it is a whole block that no one else holds and the pool has room;
    /// otherwise it is dropped.
    pub(crate) fn give(&self, mut block: Arc<[u8]>) {
        if block.len() != self.block_len || Arc::get_mut(&mut block).is_none() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < self.keep {
            idle.push(block);
        }
    }

    /// An idle buffer of [`BlockPool::block_len`] bytes that no one else holds (its bytes are
    /// what it held before), if there is one.
    pub(crate) fn take(&self) -> Option<Arc<[u8]>> {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
    }

    /// Idle buffers held now.
    #[cfg(test)]
    pub(crate) fn idle(&self) -> usize {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_whole_blocks_no_one_else_holds_and_only_a_few() {
        let pool = BlockPool::new(1 << 20);
        let shared: Arc<[u8]> = vec![1u8; 1 << 20].into();
        let other_owner = Arc::clone(&shared);
        pool.give(shared);
        assert_eq!(pool.idle(), 0, "a block someone else holds is not reused");
        drop(other_owner);
        pool.give(vec![2u8; 1000].into());
        assert_eq!(pool.idle(), 0, "a short block is not reused");
        for _ in 0..10 {
            pool.give(vec![3u8; 1 << 20].into());
        }
        assert_eq!(pool.idle(), MIN_BLOCKS, "4 MiB of 1 MiB blocks");
        let mut block = pool.take().expect("an idle block");
        assert!(Arc::get_mut(&mut block).is_some());
        assert_eq!(block.len(), 1 << 20);
    }
}
