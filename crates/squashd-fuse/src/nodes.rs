//! Node ids: the numbers the kernel uses to name inodes.
//!
//! `fuser` sends one number as both the node id and `st_ino`, and FUSE wants the root to be
//! node 1. So a node is the squashfs inode number, with the root's number and 1 swapped, and a
//! map from number to [`InodeId`] remembers every inode handed to the kernel (the kernel only
//! ever names nodes it got from a lookup or a readdirplus). It never shrinks.
//!
//! Every answer that gives attributes goes through the map, so it is an array indexed by
//! inode number (inode numbers are dense, 1 to the superblock's count), in chunks of
//! [`CHUNK`] slots made on first use: no lock, no hash, 8 bytes per inode of the chunks a walk
//! touched. (A sharded `HashMap` took 15% of the daemon's CPU in a `du`:
//! bench/results/2026-11-27-s11.md.) The superblock's count is untrusted: the array covers at
//! most [`DENSE_MAX`] numbers, and numbers past the count or that cap go to a small map.

use squashd_core::InodeId;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, RwLock};

/// Slots per chunk of the array (8 KiB).
const CHUNK: usize = 1024;
/// Inode numbers the array covers at most (its chunk table: 16,384 entries).
const DENSE_MAX: u32 = 1 << 24;

/// A chunk of slots: an inode's id plus one, 0 while it was not handed to the kernel.
type Chunk = Box<[AtomicU64]>;

pub(crate) struct NodeMap {
    root_number: u32,
    root_id: InodeId,
    /// Chunk `c` holds inode numbers `c * CHUNK` to `(c + 1) * CHUNK - 1`.
    chunks: Box<[OnceLock<Chunk>]>,
    /// Numbers past the array: only a corrupt image's entries name them.
    others: RwLock<HashMap<u32, InodeId>>,
}

impl NodeMap {
    /// A map for an image of `inode_count` inodes (its superblock's word) whose root is
    /// inode `root_number`, stored at `root_id`.
    pub(crate) fn new(root_number: u32, root_id: InodeId, inode_count: u32) -> Self {
        let covered = inode_count.min(DENSE_MAX) as usize + 1;
        NodeMap {
            root_number,
            root_id,
            chunks: (0..covered.div_ceil(CHUNK))
                .map(|_| OnceLock::new())
                .collect(),
            others: RwLock::new(HashMap::new()),
        }
    }

    /// The node (and `st_ino`) of inode number `number`.
    pub(crate) fn node(&self, number: u32) -> u64 {
        self.swap(number as u64)
    }

    /// The swap is its own inverse: node <-> number.
    fn swap(&self, n: u64) -> u64 {
        if n == self.root_number as u64 {
            1
        } else if n == 1 {
            self.root_number as u64
        } else {
            n
        }
    }

    /// The chunk holding `number` and its slot there, if the array covers it.
    fn slot(&self, number: u32) -> Option<(&OnceLock<Chunk>, usize)> {
        let number = number as usize;
        let chunk = self.chunks.get(number / CHUNK)?;
        Some((chunk, number % CHUNK))
    }

    /// Records that inode `number` is `id`, and returns its node.
    pub(crate) fn remember(&self, number: u32, id: InodeId) -> u64 {
        match self.slot(number) {
            Some((chunk, at)) => {
                let slots = chunk.get_or_init(|| (0..CHUNK).map(|_| AtomicU64::new(0)).collect());
                // Ids are at most 48 bits, so the + 1 cannot wrap. Racing stores of one
                // number store the same id; a slot already set is only read, so that walkers
                // on other CPUs keep their copy of its cache line.
                let stored = id.as_u64() + 1;
                if slots[at].load(Ordering::Relaxed) != stored {
                    slots[at].store(stored, Ordering::Relaxed);
                }
            }
            None => {
                let known = self
                    .others
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains_key(&number);
                if !known {
                    self.others
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(number, id);
                }
            }
        }
        self.node(number)
    }

    /// The inode of `node`, if the kernel was told about it.
    pub(crate) fn id(&self, node: u64) -> Option<InodeId> {
        if node == 1 {
            return Some(self.root_id);
        }
        let number = u32::try_from(self.swap(node)).ok()?;
        match self.slot(number) {
            Some((chunk, at)) => match chunk.get()?[at].load(Ordering::Relaxed) {
                0 => None,
                stored => Some(InodeId::from_u64(stored - 1)),
            },
            None => self
                .others
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .get(&number)
                .copied(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_node_one_and_numbers_round_trip() {
        let map = NodeMap::new(7, InodeId::from_u64(700), 10);
        assert_eq!(map.node(7), 1);
        assert_eq!(map.id(1), Some(InodeId::from_u64(700)));
        assert_eq!(map.remember(1, InodeId::from_u64(100)), 7);
        assert_eq!(map.id(7), Some(InodeId::from_u64(100)));
        assert_eq!(map.remember(3, InodeId::from_u64(300)), 3);
        assert_eq!(map.id(3), Some(InodeId::from_u64(300)));
        assert_eq!(map.id(4), None);
        assert_eq!(map.id(u64::MAX), None);
    }

    #[test]
    fn numbers_past_the_count_or_the_cap_are_kept_too() {
        let map = NodeMap::new(2, InodeId::from_u64(0), 5);
        // Inode id 0 is a real position (the first inode of the table): it must not read as
        // "unknown".
        assert_eq!(map.remember(3, InodeId::from_u64(0)), 3);
        assert_eq!(map.id(3), Some(InodeId::from_u64(0)));
        for number in [6, 5000, DENSE_MAX, u32::MAX] {
            assert_eq!(map.id(number as u64), None);
            map.remember(number, InodeId::from_u64(number as u64 * 2));
            assert_eq!(
                map.id(number as u64),
                Some(InodeId::from_u64(number as u64 * 2))
            );
        }
        // A count past the cap makes no larger table.
        assert_eq!(
            NodeMap::new(1, InodeId::from_u64(0), u32::MAX).chunks.len(),
            (DENSE_MAX as usize + 1).div_ceil(CHUNK)
        );
    }
}
