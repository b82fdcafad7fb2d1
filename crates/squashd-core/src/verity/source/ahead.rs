//! Hash blocks asked for ahead of the checks that need them, so that their reads overlap the
//! data's instead of following them one at a time. A check needs its data block's hash block
//! (and the path above it, kept once checked); on a cold cache that is one more read from the
//! hash source after the data's, on the critical path of every first read of a region: an
//! image's tables at open, a directory's blocks in a cold walk. The hints cost a `fadvise`
//! (or a remote source's queued range) each; nothing is read or trusted before its check.

use super::VerityState;
use crate::cache::BlockKey;
use std::sync::atomic::Ordering;

impl VerityState {
    /// Hints the hash source that the hash blocks that check data blocks `first..=last` (every
    /// level's, up to the root) will be read soon. Levels whose blocks are already kept
    /// ([`super::Pinned`]) are skipped.
    pub(super) fn hash_blocks_ahead(&self, first: u64, last: u64) {
        let size = u64::from(self.params.hash_block_size);
        for (level, &(start, count)) in self.geometry.levels.iter().enumerate() {
            let Some((from, to)) = self.covering(level, first, last, count) else {
                continue;
            };
            let all_kept = (from..=to).all(|index| {
                self.pinned
                    .slot(level, start + index)
                    .is_some_and(|slot| slot.get().is_some())
            });
            if !all_kept {
                self.hash
                    .will_need((start + from) * size, (to - from + 1) * size);
            }
        }
    }

    /// Hints the hash source that the bottom hash blocks that check data blocks
    /// `first..=last` will be read soon, unless they are held (kept, or in the metadata
    /// cache): for a read about to check them, so that the hash block's read and the data's
    /// run side by side. Not when the block before the first missing one is held: the read
    /// then continues checked data (a sequential stream), whose hash blocks are read one after
    /// the other, and the kernel's read-ahead of the hash file brings those in large reads on
    /// its own. A hint there read each 4 KiB block by itself, and, finding it in the page
    /// cache, that read-ahead never started: a sequential read of 1 GiB made 439 one-block
    /// reads of the tree and waited for each (2026-11-27-verity-s8.md).
    pub(super) fn bottom_hash_blocks_ahead(&self, first: u64, last: u64) {
        let Some(&(start, count)) = self.geometry.levels.first() else {
            return;
        };
        let Some((from, to)) = self.covering(0, first, last, count) else {
            return;
        };
        let held = |absolute: u64| match self.pinned.slot(0, absolute) {
            Some(slot) => slot.get().is_some(),
            None => self
                .caches
                .metadata
                .peek(&BlockKey {
                    image: self.cache_id,
                    pos: absolute,
                })
                .is_some(),
        };
        let Some(missing) = (from..=to).find(|&index| !held(start + index)) else {
            return;
        };
        let continues_stream = missing > 0 && held(start + missing - 1);
        if !continues_stream {
            let size = u64::from(self.params.hash_block_size);
            self.hash_hints.fetch_add(1, Ordering::Relaxed);
            self.hash
                .will_need((start + missing) * size, (to - missing + 1) * size);
        }
    }

    /// The indexes, within `level` (of `count` blocks), of the hash blocks that hold the
    /// digests checking data blocks `first..=last`.
    fn covering(&self, level: usize, first: u64, last: u64, count: u64) -> Option<(u64, u64)> {
        let shift = self.geometry.per_block_bits * (level as u32 + 1);
        let from = first.checked_shr(shift).unwrap_or(0);
        let to = last
            .checked_shr(shift)
            .unwrap_or(0)
            .min(count.checked_sub(1)?);
        (from <= to).then_some((from, to))
    }

    /// Whether data blocks `first..=last` are all checked already.
    pub(super) fn all_verified(&self, first: u64, last: u64) -> bool {
        (first..=last).all(|block| self.is_verified(block))
    }
}
