//! Where things go in the metadata image: the walk order and the block allocator.
//!
//! Order: two regions, both in the depth-first pre-order of directories (entries in name order).
//! First every directory: its inode with the inline tail of its entries, then its full dirent
//! blocks, then its first subdirectory's, and so on down. Then every other inode (files, symlinks,
//! devices), grouped by parent directory, the groups in the same order.
//!
//! Why: a walk such as `find` (fts) reads a directory's entries, then opens its subdirectories
//! one after the other, each fully before the next: in this order exactly. With `d_type` in the
//! dirents it never looks up a file, so a file's inode is never read: keeping those out of the
//! directory region means a cold `find` reads only directory metadata, front to back (on /usr,
//! 181k entries, that is about a third of the image). A walk that stats everything (`ls -lR`,
//! `du`) reads the second region as a second sequential stream, a directory's children together.
//!
//! Inodes are packed in 32-byte slots inside a "current" block. A directory's full dirent blocks
//! (and a long symlink's data block) are taken from the frontier, past the current block, while
//! later inodes keep filling the current block: no block is left half empty because a large
//! directory needed whole blocks. The invariant: every block strictly between the current block
//! and the frontier is a reserved data block.

use crate::plan::Plan;
use crate::tree::{Body, NodeId, Tree};

/// Where a node's record went.
pub(crate) struct Placed {
    /// Byte offset of the inode.
    pub offset: u64,
    /// First block of the data outside the inode (directories, long symlinks).
    pub data_block: u64,
}

/// Places every node's record and data blocks in walk order (see the module documentation).
pub(crate) fn place_all(tree: &Tree, plan: &Plan, alloc: &mut Allocator) -> Vec<Placed> {
    const UNPLACED: u64 = u64::MAX;
    let mut placed: Vec<Placed> = (0..tree.nodes.len())
        .map(|_| Placed {
            offset: UNPLACED,
            data_block: 0,
        })
        .collect();
    let is_dir = |id: NodeId| matches!(tree.nodes[id.index()].body, Body::Directory { .. });
    let mut order = Vec::new();
    let mut stack = vec![NodeId(0)];
    while let Some(d) = stack.pop() {
        let p = &plan.nodes[d.index()];
        placed[d.index()].offset = alloc.place(p.record);
        if p.blocks > 0 {
            placed[d.index()].data_block = alloc.reserve(p.blocks.into());
        }
        order.push(d);
        let first = stack.len();
        for (name, child) in plan.entries(d) {
            if name != b"." && name != b".." && is_dir(child) {
                stack.push(child);
            }
        }
        // Popped in name order.
        stack[first..].reverse();
    }
    for d in order {
        for (_, child) in plan.entries(d) {
            // A hard-linked node goes with its first name.
            if placed[child.index()].offset == UNPLACED {
                let p = &plan.nodes[child.index()];
                placed[child.index()].offset = alloc.place(p.record);
                if p.blocks > 0 {
                    placed[child.index()].data_block = alloc.reserve(p.blocks.into());
                }
            }
        }
    }
    placed
}

/// The metadata area's allocator (block numbers are image blocks; meta_blkaddr is 0).
#[derive(Debug)]
pub(crate) struct Allocator {
    bs: u64,
    cur_block: u64,
    cur_off: u64,
    frontier: u64,
}

impl Allocator {
    /// Starts filling block 0 at `first_free` (after the superblock and device table).
    pub(crate) fn new(block_size: u64, first_free: u64) -> Self {
        debug_assert!(first_free <= block_size);
        Allocator {
            bs: block_size,
            cur_block: 0,
            cur_off: first_free.next_multiple_of(32),
            frontier: 1,
        }
    }

    /// Places an inode record of `size` bytes (inode, xattrs, inline tail or chunk indexes) and
    /// returns its byte offset, 32-byte aligned. A record that fits in a block never crosses one
    /// (so an inline tail stays in its inode's block, as the kernel requires, and one read gets
    /// the whole inode); a larger one (many chunk indexes) takes contiguous blocks.
    pub(crate) fn place(&mut self, size: u64) -> u64 {
        let contiguous_after = self.cur_block + 1 == self.frontier;
        if (size <= self.bs && self.cur_off + size > self.bs)
            || (size > self.bs && !contiguous_after)
        {
            self.cur_block = self.frontier;
            self.frontier += 1;
            self.cur_off = 0;
        }
        let start = self.cur_block * self.bs + self.cur_off;
        let end = (start + size).next_multiple_of(32);
        if end > (self.cur_block + 1) * self.bs {
            // Only a record larger than a block gets here, with no reserved block after the
            // current one: it runs on into fresh blocks.
            let last = (end - 1) / self.bs;
            self.cur_block = last;
            self.frontier = last + 1;
        }
        self.cur_off = end - self.cur_block * self.bs;
        start
    }

    /// Reserves `n` whole blocks for data and returns the first.
    pub(crate) fn reserve(&mut self, n: u64) -> u64 {
        let first = self.frontier;
        self.frontier += n;
        first
    }

    /// Blocks used so far (every block below the frontier).
    pub(crate) fn blocks(&self) -> u64 {
        self.frontier
    }
}

/// Lays out the shared xattr area: offsets (from the area's start) of entries of these sizes, in
/// order, such that an entry that fits in a block does not cross one. Returns the offsets and the
/// area's length.
pub(crate) fn shared_area(
    sizes: impl Iterator<Item = usize>,
    block_size: usize,
) -> (Vec<u64>, u64) {
    let mut offsets = Vec::new();
    let mut pos = 0u64;
    let bs = block_size as u64;
    for size in sizes {
        let size = size as u64;
        if size <= bs && pos % bs + size > bs {
            pos = pos.next_multiple_of(bs);
        }
        offsets.push(pos);
        pos += size;
    }
    (offsets, pos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_never_cross_blocks_and_skip_reserved_ones() {
        let mut a = Allocator::new(4096, 1280);
        assert_eq!(a.place(32), 1280);
        // Block 1-2 for a directory's dirents; inodes keep filling block 0.
        assert_eq!(a.reserve(2), 1);
        assert_eq!(a.place(64), 1312);
        // Fill block 0 up to 4064, then a 64-byte record would cross: it goes to block 3.
        let mut last = 0;
        while a.cur_off + 32 <= 4064 {
            last = a.place(32);
        }
        assert_eq!(last, 4032);
        assert_eq!(a.place(64), 3 * 4096);
        assert_eq!(a.blocks(), 4);
        // With nothing reserved after block 3, a large record runs on from the cursor.
        let at = a.place(10_000);
        assert_eq!(at, 3 * 4096 + 64);
        assert_eq!(a.blocks(), (at + 10_000).div_ceil(4096));
        // With a reservation ahead, a large record starts at the frontier.
        let r = a.reserve(1);
        let at = a.place(5000);
        assert_eq!(at, (r + 1) * 4096);
    }

    #[test]
    fn inline_tail_that_fills_a_block_exactly() {
        let mut a = Allocator::new(4096, 4096 - 64);
        assert_eq!(a.place(64), 4032);
        assert_eq!(a.place(4096), 4096);
        assert_eq!(a.place(32), 8192);
    }

    #[test]
    fn shared_entries_do_not_cross_blocks() {
        let (offs, len) = shared_area([4000usize, 100, 8, 5000, 8].into_iter(), 4096);
        assert_eq!(offs, [0, 4096, 4196, 4204, 9204]);
        assert_eq!(len, 9212);
    }
}
