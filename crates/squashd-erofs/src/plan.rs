//! Per-node decisions made before layout: inode form, data layout, sizes, xattr split, mtime.
//!
//! Everything here depends only on the tree and the options, not on where things go, so the
//! layout can place records of known sizes.

use std::collections::HashMap;

use crate::dir;
use crate::error::{lossy, Error, Result};
use crate::inode::{self, ifmt, layout, InodeFields};
use crate::tree::{Body, Entry, FileData, NodeId, Timestamp, Tree};
use crate::xattr;
use crate::{CompactMtime, WriteOptions};

/// What a node's inode holds and how big its record is.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NodePlan {
    pub extended: bool,
    pub layout: u16,
    pub nlink: u32,
    /// `i_size`.
    pub size: u64,
    /// Bytes of the xattr body (0: no xattrs).
    pub ibody: u32,
    /// Bytes of data inline after the xattr body (a directory's or symlink's tail).
    pub tail: u32,
    /// Whole data blocks outside the inode (directories and symlinks).
    pub blocks: u32,
    /// Chunk indexes after the xattr body (regular files).
    pub chunks: u64,
    /// Bytes of the record: inode, xattrs, then tail or (8-aligned) chunk indexes.
    pub record: u64,
    /// Index into `Plan::dirs` for a directory.
    pub dir: u32,
}

/// The whole tree's plan.
pub(crate) struct Plan<'t> {
    pub nodes: Vec<NodePlan>,
    /// Each directory's entries in name order, "." and ".." included, as slots (see
    /// [`Plan::entries`]): 4 bytes an entry where (name, node) pairs took 24, on /usr 181k
    /// entries held through the whole write.
    dirs: Vec<Box<[u32]>>,
    tree: &'t Tree,
    /// Per xattr in the tree's pool: shared (stored once in the shared area) or inline.
    pub shared: Vec<bool>,
    /// The superblock's build time: compact inodes' mtime (base).
    pub epoch: Timestamp,
    /// The block size, in bytes.
    pub block_size: usize,
}

/// A directory slot naming ".".
const SLOT_DOT: u32 = 0;
/// A directory slot naming "..".
const SLOT_DOTDOT: u32 = 1;
/// Slots from here name the directory's own entries, in the tree's order.
const SLOT_FIRST_ENTRY: u32 = 2;

impl<'t> Plan<'t> {
    /// Directory `dir`'s entries, "." and ".." included (as itself and its parent), sorted by
    /// name bytes. Nothing for a node that is not a directory.
    pub(crate) fn entries(&self, dir: NodeId) -> impl Iterator<Item = (&'t [u8], NodeId)> + '_ {
        let tree: &'t Tree = self.tree;
        let (entries, parent, slots): (&'t [Entry], NodeId, &[u32]) =
            match &tree.nodes[dir.index()].body {
                Body::Directory { entries, parent } => (
                    entries,
                    *parent,
                    &self.dirs[self.nodes[dir.index()].dir as usize],
                ),
                _ => (&[], dir, &[]),
            };
        slots
            .iter()
            .map(move |&slot| slot_entry(tree, slot, dir, parent, entries))
    }
}

/// What a directory slot names.
fn slot_entry<'t>(
    tree: &'t Tree,
    slot: u32,
    dir: NodeId,
    parent: NodeId,
    entries: &[Entry],
) -> (&'t [u8], NodeId) {
    match slot {
        SLOT_DOT => (b".", dir),
        SLOT_DOTDOT => (b"..", parent),
        entry => {
            let entry = &entries[(entry - SLOT_FIRST_ENTRY) as usize];
            (tree.name(entry), entry.node)
        }
    }
}

impl NodePlan {
    /// How many of the node's xattrs go to the shared area, and the inline bytes of the rest.
    fn split(xattrs: &[u32], tree: &Tree, shared: &[bool]) -> (usize, usize) {
        let (mut n_shared, mut inline) = (0, 0);
        for &x in xattrs {
            if shared[x as usize] && n_shared < xattr::MAX_SHARED_PER_INODE {
                n_shared += 1;
            } else {
                inline += tree.xattr_pool[x as usize].entry_size();
            }
        }
        (n_shared, inline)
    }
}

/// Which of a node's xattrs are referenced by id (in the order listed) and which are inline:
/// the same rule as `NodePlan::split`, for serialization.
pub(crate) fn split_xattrs(xattrs: &[u32], shared: &[bool]) -> (Vec<u32>, Vec<u32>) {
    let (mut ids, mut inline) = (Vec::new(), Vec::new());
    for &x in xattrs {
        if shared[x as usize] && ids.len() < xattr::MAX_SHARED_PER_INODE {
            ids.push(x);
        } else {
            inline.push(x);
        }
    }
    (ids, inline)
}

/// The `st_mode` type bits and the dirent file type of a node.
pub(crate) fn file_type(body: &Body) -> (u16, u8) {
    match body {
        Body::Directory { .. } => (ifmt::DIR, dir::ft::DIR),
        Body::File(_) => (ifmt::REG, dir::ft::REG),
        Body::Symlink(_) => (ifmt::LNK, dir::ft::LNK),
        Body::CharDevice(_) => (ifmt::CHR, dir::ft::CHR),
        Body::BlockDevice(_) => (ifmt::BLK, dir::ft::BLK),
        Body::Fifo => (ifmt::FIFO, dir::ft::FIFO),
        Body::Socket => (ifmt::SOCK, dir::ft::SOCK),
    }
}

/// The compact-inode mtime for `t`, if a compact inode can hold it.
pub(crate) fn compact_mtime(t: Timestamp, epoch: Timestamp, mode: CompactMtime) -> Option<u32> {
    match mode {
        CompactMtime::BuildTime => (t == epoch).then_some(0),
        CompactMtime::Relative if t.nsec == epoch.nsec => {
            u32::try_from(t.sec.checked_sub(epoch.sec)?).ok()
        }
        CompactMtime::Relative => None,
    }
}

/// The build time that lets the most inodes be compact.
fn choose_epoch(tree: &Tree, mode: CompactMtime) -> Timestamp {
    let mut counts: HashMap<Timestamp, u64> = HashMap::new();
    match mode {
        CompactMtime::BuildTime => {
            for n in &tree.nodes {
                *counts.entry(n.meta.mtime).or_default() += 1;
            }
            // Ties go to the earliest time, so the choice does not depend on hash order.
            let best = counts
                .iter()
                .max_by_key(|(t, c)| (**c, std::cmp::Reverse(**t)));
            best.map(|(t, _)| *t).unwrap_or_default()
        }
        CompactMtime::Relative => {
            // Most common nanoseconds (0 for anything from SquashFS), earliest second with them:
            // every later time within 136 years then fits the 32-bit delta.
            let mut nsecs: HashMap<u32, u64> = HashMap::new();
            for n in &tree.nodes {
                *nsecs.entry(n.meta.mtime.nsec).or_default() += 1;
            }
            let nsec = nsecs
                .iter()
                .max_by_key(|(ns, c)| (**c, std::cmp::Reverse(**ns)))
                .map(|(ns, _)| *ns)
                .unwrap_or(0);
            let sec = tree
                .nodes
                .iter()
                .filter(|n| n.meta.mtime.nsec == nsec)
                .map(|n| n.meta.mtime.sec)
                .min()
                .unwrap_or(0);
            Timestamp { sec, nsec }
        }
    }
}

/// Plans every node. Fails on duplicate names, bad chunk lists and oversized xattr bodies.
pub(crate) fn plan<'t>(tree: &'t Tree, opts: &WriteOptions) -> Result<Plan<'t>> {
    let bs = u64::from(opts.block_size);
    let mut refs = vec![0u32; tree.xattr_pool.len()];
    for n in &tree.nodes {
        for &x in &n.xattrs {
            refs[x as usize] = refs[x as usize].saturating_add(1);
        }
    }
    let shared: Vec<bool> = refs.iter().map(|&r| r >= 2).collect();
    let epoch = choose_epoch(tree, opts.compact_mtime);
    let mut nodes = vec![NodePlan::default(); tree.nodes.len()];
    let mut dirs = Vec::new();
    for (i, (n, p)) in tree.nodes.iter().zip(nodes.iter_mut()).enumerate() {
        let id = NodeId(i as u32);
        check_duplicate_xattrs(id, &n.xattrs, tree)?;
        let (n_shared, inline) = NodePlan::split(&n.xattrs, tree, &shared);
        let ibody = xattr::ibody_size(n_shared, inline);
        if xattr::icount(ibody).is_none() {
            return Err(Error::XattrsTooLarge(id));
        }
        p.ibody = ibody as u32;
        p.nlink = n.names;
        match &n.body {
            Body::Directory { entries, parent } => {
                let sorted = sorted_entries(tree, id, *parent, entries)?;
                p.size = dir::dir_size(
                    sorted
                        .iter()
                        .map(|&slot| slot_entry(tree, slot, id, *parent, entries).0.len()),
                    bs as usize,
                );
                let subdirs = entries
                    .iter()
                    .filter(|e| matches!(tree.nodes[e.node.index()].body, Body::Directory { .. }));
                p.nlink = u32::try_from(2 + subdirs.count())
                    .map_err(|_| Error::TooLarge("directory link count"))?;
                p.dir = dirs.len() as u32;
                dirs.push(sorted);
            }
            Body::Symlink(target) => p.size = target.len() as u64,
            Body::File(data) => {
                p.size = data.size();
                p.chunks = check_chunks(id, data, opts)?;
            }
            _ => {}
        }
        p.extended = !InodeFields::fits_compact(n.meta.uid, n.meta.gid, p.nlink, p.size)
            || compact_mtime(n.meta.mtime, epoch, opts.compact_mtime).is_none();
        let head = (InodeFields::size_on_disk(p.extended) + ibody) as u64;
        p.layout = layout::FLAT_PLAIN;
        p.record = head;
        match &n.body {
            Body::Directory { .. } | Body::Symlink(_) => {
                let tail = p.size % bs;
                let full = p.size / bs;
                if tail != 0 && head + tail <= bs {
                    p.layout = layout::FLAT_INLINE;
                    p.tail = tail as u32;
                    p.record = head + tail;
                    p.blocks = u32::try_from(full).map_err(|_| Error::TooLarge("directory"))?;
                } else {
                    p.blocks = u32::try_from(p.size.div_ceil(bs))
                        .map_err(|_| Error::TooLarge("directory"))?;
                }
            }
            Body::File(_) if p.size > 0 => {
                p.layout = layout::CHUNK_BASED;
                p.record = head.next_multiple_of(inode::CHUNK_INDEX_SIZE as u64)
                    + p.chunks * inode::CHUNK_INDEX_SIZE as u64;
            }
            _ => {}
        }
    }
    Ok(Plan {
        nodes,
        dirs,
        tree,
        shared,
        epoch,
        block_size: bs as usize,
    })
}

/// Refuses a node with one xattr name twice (equal name-value pairs are one pool entry, so it is
/// the names that are compared).
fn check_duplicate_xattrs(node: NodeId, xattrs: &[u32], tree: &Tree) -> Result<()> {
    if xattrs.len() < 2 {
        return Ok(());
    }
    let mut names: Vec<(u8, &[u8])> = xattrs
        .iter()
        .map(|&x| {
            (
                tree.xattr_pool[x as usize].index,
                &tree.xattr_pool[x as usize].suffix[..],
            )
        })
        .collect();
    names.sort_unstable();
    match names.windows(2).find(|w| w[0] == w[1]) {
        Some(w) => Err(Error::DuplicateXattr {
            node,
            name: lossy(w[0].1),
        }),
        None => Ok(()),
    }
}

/// A directory's entries with "." and "..", as slots sorted by name bytes; duplicates refused.
fn sorted_entries(
    tree: &Tree,
    dir: NodeId,
    parent: NodeId,
    entries: &[Entry],
) -> Result<Box<[u32]>> {
    let count = u32::try_from(entries.len())
        .ok()
        .and_then(|n| n.checked_add(SLOT_FIRST_ENTRY))
        .ok_or(Error::TooLarge("directory"))?;
    let mut slots: Box<[u32]> = (0..count).collect();
    let name = |slot: u32| slot_entry(tree, slot, dir, parent, entries).0;
    slots.sort_unstable_by(|&a, &b| name(a).cmp(name(b)));
    if let Some(w) = slots.windows(2).find(|w| name(w[0]) == name(w[1])) {
        return Err(Error::DuplicateName {
            dir,
            name: lossy(name(w[0])),
        });
    }
    Ok(slots)
}

/// Checks a file's chunks against its size and the blob; returns the number of chunk indexes.
fn check_chunks(node: NodeId, data: &FileData, opts: &WriteOptions) -> Result<u64> {
    let chunk = u64::from(opts.chunk_size);
    let bs = u64::from(opts.block_size);
    let blob = u64::from(opts.blob_blocks);
    let size = data.size();
    let expected = size.div_ceil(chunk);
    // Blocks chunk `i` covers: a whole chunk, or what is left of the file, rounded up to a block.
    let covered = |i: u64| (size - i * chunk).min(chunk).div_ceil(bs);
    let check = |i: u64, block: u32| {
        if block == inode::NULL_ADDR || u64::from(block) + covered(i) > blob {
            Err(Error::ChunkOutOfBlob {
                node,
                index: i,
                block,
            })
        } else {
            Ok(())
        }
    };
    match data {
        FileData::Contiguous { start_block, .. } => {
            if size > 0 {
                let blocks = size.div_ceil(bs);
                if u64::from(*start_block) + blocks > blob {
                    return Err(Error::ChunkOutOfBlob {
                        node,
                        index: 0,
                        block: *start_block,
                    });
                }
            }
        }
        FileData::Chunks { chunks, .. } => {
            if chunks.len() as u64 != expected {
                return Err(Error::ChunkCountMismatch {
                    node,
                    expected,
                    got: chunks.len() as u64,
                });
            }
            for (i, c) in chunks.iter().enumerate() {
                if let crate::Chunk::Blob { block } = c {
                    check(i as u64, *block)?;
                }
            }
        }
    }
    Ok(expected)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::{Kind, Metadata};

    fn planned(build: impl FnOnce(&mut Tree) -> NodeId) -> NodePlan {
        let mut t = Tree::new(Metadata::default()).unwrap();
        let id = build(&mut t);
        let opts = WriteOptions {
            blob_blocks: 1 << 20,
            ..WriteOptions::default()
        };
        plan(&t, &opts).unwrap().nodes[id.index()]
    }

    fn dir_with(names: Vec<Vec<u8>>) -> impl FnOnce(&mut Tree) -> NodeId {
        move |t| {
            let d = t
                .add(t.root(), b"d", Metadata::default(), Kind::Directory)
                .unwrap();
            for n in names {
                t.add(d, &n, Metadata::default(), Kind::Fifo).unwrap();
            }
            d
        }
    }

    #[test]
    fn small_directory_is_inline() {
        let p = planned(dir_with(vec![b"a".to_vec()]));
        assert_eq!(
            (p.layout, p.size, p.tail, p.blocks),
            (layout::FLAT_INLINE, 12 * 3 + 4, 40, 0)
        );
        assert_eq!(p.record, 32 + 40);
    }

    #[test]
    fn directory_of_exactly_one_block_is_plain() {
        // "." and ".." take 27 bytes; 15 entries of 267 and one of 64 fill the other 4069.
        let mut names: Vec<Vec<u8>> = (0..15u8).map(|i| vec![b'a' + i; 255]).collect();
        names.push(vec![b'z'; 52]);
        let p = planned(dir_with(names));
        assert_eq!(
            (p.layout, p.size, p.tail, p.blocks),
            (layout::FLAT_PLAIN, 4096, 0, 1)
        );
        assert_eq!(p.record, 32);
    }

    #[test]
    fn large_directory_keeps_its_tail_inline() {
        let mut names: Vec<Vec<u8>> = (0..15u8).map(|i| vec![b'a' + i; 255]).collect();
        names.push(vec![b'z'; 52]);
        names.push(b"{".to_vec()); // sorts last

        let p = planned(dir_with(names));
        assert_eq!(
            (p.layout, p.size, p.tail, p.blocks),
            (layout::FLAT_INLINE, 4096 + 13, 13, 1)
        );
    }

    #[test]
    fn tail_that_does_not_fit_beside_the_inode_goes_to_a_block() {
        let p = planned(|t| {
            let d = t
                .add(t.root(), b"d", Metadata::default(), Kind::Directory)
                .unwrap();
            t.set_xattr(d, b"user.big", &[7; 4040]).unwrap();
            d
        });
        // 32 inode + 12 header + 4048 entry (4 + "big" + 4040) = 4092: no room for the 27-byte
        // tail.
        assert_eq!(p.ibody, 12 + 4048);
        assert_eq!((p.layout, p.blocks, p.tail), (layout::FLAT_PLAIN, 1, 0));
        let p = planned(|t| {
            t.add(
                t.root(),
                b"l",
                Metadata::default(),
                Kind::Symlink(vec![b'x'; 4064]),
            )
            .unwrap()
        });
        assert_eq!((p.layout, p.record), (layout::FLAT_INLINE, 4096));
        let p = planned(|t| {
            t.add(
                t.root(),
                b"l",
                Metadata::default(),
                Kind::Symlink(vec![b'x'; 4065]),
            )
            .unwrap()
        });
        assert_eq!((p.layout, p.record, p.blocks), (layout::FLAT_PLAIN, 32, 1));
    }

    #[test]
    fn files_are_chunk_based_with_aligned_indexes() {
        let p = planned(|t| {
            t.add(
                t.root(),
                b"e",
                Metadata::default(),
                Kind::File(FileData::empty()),
            )
            .unwrap()
        });
        assert_eq!((p.layout, p.record, p.chunks), (layout::FLAT_PLAIN, 32, 0));
        let p = planned(|t| {
            let data = FileData::Contiguous {
                size: (2 << 20) + 1,
                start_block: 0,
            };
            let f = t
                .add(t.root(), b"f", Metadata::default(), Kind::File(data))
                .unwrap();
            t.set_xattr(f, b"user.a", b"").unwrap();
            f
        });
        // 32 + 12 + 8 (entry) = 52, aligned to 56, then 3 indexes.
        assert_eq!(
            (p.layout, p.chunks, p.record),
            (layout::CHUNK_BASED, 3, 56 + 24)
        );
    }

    #[test]
    fn values_beyond_compact_make_extended_inodes() {
        let t = |meta: Metadata| {
            planned(move |t| t.add(t.root(), b"f", meta, Kind::Fifo).unwrap()).extended
        };
        assert!(!t(Metadata {
            uid: 65535,
            ..Default::default()
        }));
        assert!(t(Metadata {
            uid: 65536,
            ..Default::default()
        }));
        assert!(t(Metadata {
            gid: 1 << 31,
            ..Default::default()
        }));
        // The root (mtime 0) and the fifo tie: the earliest time wins the build time.
        let late = Metadata {
            mtime: Timestamp { sec: 5, nsec: 0 },
            ..Default::default()
        };
        assert!(t(late));
    }
}
