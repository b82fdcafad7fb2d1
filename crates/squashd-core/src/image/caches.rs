//! The three cache tiers an image reads through, and their budgets.

use super::{ImageStats, MetadataBlock};
use crate::cache::BlockCache;
use crate::format::{MAX_BLOCK_SIZE, METADATA_BLOCK_SIZE};
use std::sync::Arc;

/// Byte budgets of the cache tiers. More tiers may come: build budgets with
/// [`CacheBudgets::new`] or from `CacheBudgets::default()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheBudgets {
    /// Decompressed metadata blocks (inodes, directories, tables).
    pub metadata_bytes: u64,
    /// Decompressed data blocks and fragment blocks.
    pub data_bytes: u64,
    /// Compressed data blocks as read from the image: a second tier that saves the I/O (not the
    /// decompression) of blocks evicted from the data tier. 0 disables it.
    pub compressed_bytes: u64,
    /// Bytes of `data_bytes` kept for blocks loaded and not yet used again, where blocks read
    /// ahead wait for their reader (see [`crate::cache::BlockCache::with_waiting_room`]). 0:
    /// the cache's default, 3% of `data_bytes`, enough for read-ahead windows of a few blocks
    /// per reader; a reader with a larger window sets it to hold that window.
    pub data_waiting_bytes: u64,
}

impl CacheBudgets {
    /// Budgets of `metadata_bytes` for metadata and `data_bytes` for data, without a compressed
    /// tier.
    pub const fn new(metadata_bytes: u64, data_bytes: u64) -> Self {
        CacheBudgets {
            metadata_bytes,
            data_bytes,
            compressed_bytes: 0,
            data_waiting_bytes: 0,
        }
    }

    /// These budgets with a compressed tier of `bytes` (0 turns it off).
    pub const fn with_compressed(mut self, bytes: u64) -> Self {
        self.compressed_bytes = bytes;
        self
    }

    /// These budgets with `bytes` of the data tier kept for blocks read ahead and not yet read
    /// ([`CacheBudgets::data_waiting_bytes`]; 0: the cache's default).
    pub const fn with_data_waiting(mut self, bytes: u64) -> Self {
        self.data_waiting_bytes = bytes;
        self
    }
}

impl Default for CacheBudgets {
    /// 64 MiB of metadata holds the inodes and directories of a ~500k-entry tree: dozens of
    /// parallel walkers of a /usr-sized image never evict each other. 128 MiB of data keeps
    /// 128 fragment-or-data blocks of 1 MiB (or 1024 of 128 KiB) for as many random readers.
    fn default() -> Self {
        CacheBudgets::new(64 << 20, 128 << 20)
    }
}

/// The cache tiers. One `Caches` may serve many images: keys carry the image's identity.
pub struct Caches {
    pub(crate) metadata: BlockCache<MetadataBlock>,
    pub(crate) data: BlockCache<Arc<[u8]>>,
    pub(crate) compressed: BlockCache<Arc<[u8]>>,
    budgets: CacheBudgets,
}

impl Caches {
    /// Caches with the given budgets.
    pub fn new(budgets: &CacheBudgets) -> Self {
        Caches {
            metadata: BlockCache::new(budgets.metadata_bytes, METADATA_BLOCK_SIZE as u64 + 64),
            data: BlockCache::with_waiting_room(
                budgets.data_bytes,
                MAX_BLOCK_SIZE as u64,
                budgets.data_waiting_bytes,
            ),
            compressed: BlockCache::new(budgets.compressed_bytes, MAX_BLOCK_SIZE as u64),
            budgets: *budgets,
        }
    }

    /// The budgets these caches were made with.
    pub fn budgets(&self) -> CacheBudgets {
        self.budgets
    }

    /// Counters of every tier, summed over all the images these caches serve.
    pub fn stats(&self) -> ImageStats {
        ImageStats {
            metadata: self.metadata.stats(),
            data: self.data.stats(),
            compressed: self.compressed.stats(),
            bytes_read: 0,
            reads: 0,
            read_ahead: Default::default(),
        }
    }

    /// Bytes held now in all tiers.
    pub fn resident_bytes(&self) -> u64 {
        let s = self.stats();
        s.metadata.resident_bytes + s.data.resident_bytes + s.compressed.resident_bytes
    }

    /// Drops the blocks of one image from every tier.
    pub(crate) fn forget_image(&self, image: u32) {
        self.metadata.forget_image(image);
        self.data.forget_image(image);
        self.compressed.forget_image(image);
    }

    /// Drops every cached block of every tier (counters are kept).
    pub fn clear(&self) {
        self.metadata.clear();
        self.data.clear();
        self.compressed.clear();
    }
}

impl std::fmt::Debug for Caches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caches")
            .field("budgets", &self.budgets)
            .finish()
    }
}
