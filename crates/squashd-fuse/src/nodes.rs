//! Node ids: the numbers the kernel uses to name inodes.
//!
//! `fuser` sends one number as both the node id and `st_ino`, and FUSE wants the root to be
//! node 1. So a node is the squashfs inode number, with the root's number and 1 swapped, and a
//! map from number to [`InodeId`] remembers every inode handed to the kernel (the kernel only
//! ever names nodes it got from a lookup or a readdirplus). The map is sharded so that parallel
//! walkers rarely touch the same lock, and it never shrinks: at most one entry per inode of the
//! image, 16 bytes each.

use squashd_core::InodeId;
use std::collections::HashMap;
use std::sync::RwLock;

const SHARDS: usize = 64;

pub(crate) struct NodeMap {
    root_number: u32,
    root_id: InodeId,
    shards: Box<[RwLock<HashMap<u32, InodeId>>]>,
}

impl NodeMap {
    pub(crate) fn new(root_number: u32, root_id: InodeId) -> Self {
        NodeMap {
            root_number,
            root_id,
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
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

    fn shard(&self, number: u32) -> &RwLock<HashMap<u32, InodeId>> {
        &self.shards[number as usize % SHARDS]
    }

    /// Records that inode `number` is `id`, and returns its node.
    pub(crate) fn remember(&self, number: u32, id: InodeId) -> u64 {
        let shard = self.shard(number);
        let known = shard
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&number);
        if !known {
            shard
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(number, id);
        }
        self.node(number)
    }

    /// The inode of `node`, if the kernel was told about it.
    pub(crate) fn id(&self, node: u64) -> Option<InodeId> {
        if node == 1 {
            return Some(self.root_id);
        }
        let number = u32::try_from(self.swap(node)).ok()?;
        self.shard(number)
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&number)
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_node_one_and_numbers_round_trip() {
        let map = NodeMap::new(7, InodeId::from_u64(700));
        assert_eq!(map.node(7), 1);
        assert_eq!(map.id(1), Some(InodeId::from_u64(700)));
        assert_eq!(map.remember(1, InodeId::from_u64(100)), 7);
        assert_eq!(map.id(7), Some(InodeId::from_u64(100)));
        assert_eq!(map.remember(3, InodeId::from_u64(300)), 3);
        assert_eq!(map.id(3), Some(InodeId::from_u64(300)));
        assert_eq!(map.id(4), None);
        assert_eq!(map.id(u64::MAX), None);
    }
}
