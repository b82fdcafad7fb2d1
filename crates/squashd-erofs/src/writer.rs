//! The writer: plan, lay out, then serialize every record into one image buffer.

use std::io::Write;

use crate::dir::{self, DirEntry};
use crate::error::{Error, Result};
use crate::inode::{self, InodeFields};
use crate::layout::{self, Allocator, Placed};
use crate::plan::{self, Plan};
use crate::sink::Sink;
use crate::superblock::{self, SuperBlock};
use crate::tree::{Body, Chunk, FileData, NodeId, Tree};
use crate::xattr;

/// How compact (32-byte) inodes get their mtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CompactMtime {
    /// Every kernel: a compact inode's mtime is the superblock's build time. The writer sets the
    /// build time to the most common mtime of the tree; every other node gets an extended inode.
    #[default]
    BuildTime,
    /// Linux 6.15 and later: a compact inode's mtime is the build time plus its 32-bit `i_mtime`
    /// field (same nanoseconds). Nearly every inode is then compact, but older kernels (and
    /// erofs-utils before 1.8.6) show the build time for all of them.
    Relative,
}

/// Options of [`write()`] and [`write_to()`].
#[derive(Clone, Debug)]
pub struct WriteOptions {
    /// Block size of the image and unit of blob addresses. Only 4096 is accepted: it is the page
    /// size here and the only size erofs-utils 1.5 reads.
    pub block_size: u32,
    /// Bytes per chunk of a regular file: a power of two, at least the block size, at most
    /// `block_size << 31`.
    pub chunk_size: u32,
    /// Size of the blob device (device 1) in blocks; every chunk must lie inside it.
    pub blob_blocks: u32,
    /// The blob's device-table tag (a digest, or anything naming it), up to 64 bytes.
    pub blob_tag: [u8; 64],
    /// The image's UUID.
    pub uuid: [u8; 16],
    /// The volume name, NUL-padded.
    pub volume_name: [u8; 16],
    /// How compact inodes carry mtimes.
    pub compact_mtime: CompactMtime,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            block_size: 4096,
            chunk_size: 1 << 20,
            blob_blocks: 0,
            blob_tag: [0; 64],
            uuid: [0; 16],
            volume_name: [0; 16],
            compact_mtime: CompactMtime::BuildTime,
        }
    }
}

/// Statistics of a written image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageInfo {
    /// Image size in bytes (a whole number of blocks).
    pub bytes: u64,
    /// Inodes written.
    pub inodes: u64,
    /// Of which extended (64-byte).
    pub extended_inodes: u64,
    /// The root directory's nid.
    pub root_nid: u64,
}

/// Writes the metadata image of `tree` to `out`, streaming: the image is not held in memory
/// (block 0 aside). Nothing is written when the tree or options are refused.
pub fn write_to(tree: &Tree, opts: &WriteOptions, out: impl Write) -> Result<ImageInfo> {
    build(tree, opts, out, &[]).map(|(info, _, _)| info)
}

/// Returns the metadata image of `tree`.
pub fn write(tree: &Tree, opts: &WriteOptions) -> Result<Vec<u8>> {
    Ok(build(tree, opts, Vec::new(), &[])?.1)
}

/// [`write_to()`], also returning the nid of each node of `wanted`, in that order: the inode
/// number the kernel gives the node once the image is mounted, which names it in a file handle
/// (`open_by_handle_at(2)`).
pub fn write_to_with_nids(
    tree: &Tree,
    opts: &WriteOptions,
    out: impl Write,
    wanted: &[NodeId],
) -> Result<(ImageInfo, Vec<u64>)> {
    build(tree, opts, out, wanted).map(|(info, _, nids)| (info, nids))
}

/// [`write()`], also returning the nid of each node of `wanted` (see [`write_to_with_nids()`]).
pub fn write_with_nids(
    tree: &Tree,
    opts: &WriteOptions,
    wanted: &[NodeId],
) -> Result<(Vec<u8>, Vec<u64>)> {
    build(tree, opts, Vec::new(), wanted).map(|(_, image, nids)| (image, nids))
}

fn check_options(opts: &WriteOptions) -> Result<u8> {
    if opts.block_size != 4096 {
        return Err(Error::InvalidOptions("block size must be 4096"));
    }
    let c = opts.chunk_size;
    if !c.is_power_of_two() || c < opts.block_size {
        return Err(Error::InvalidOptions(
            "chunk size must be a power of two no smaller than the block size",
        ));
    }
    // chunk_size is a u32, so the 5-bit chunk_bits field (at most 31) always holds it.
    Ok((c.trailing_zeros() - opts.block_size.trailing_zeros()) as u8)
}

/// What goes at an offset of the image.
#[derive(Clone, Copy)]
enum Piece {
    /// A node's record: inode, xattr body, inline tail or chunk indexes.
    Record(u32),
    /// A directory's or symlink's data blocks (all its data, or all but the inline tail).
    Blocks(u32),
    /// One entry of the shared xattr area (index into the tree's pool).
    Shared(u32),
}

fn build<W: Write>(
    tree: &Tree,
    opts: &WriteOptions,
    out: W,
    wanted: &[NodeId],
) -> Result<(ImageInfo, W, Vec<u64>)> {
    let chunk_bits = check_options(opts)?;
    let bs = u64::from(opts.block_size);
    let plan = plan::plan(tree, opts)?;

    // Superblock, then the device table right after it, then inodes.
    let devt_off = superblock::SUPER_OFFSET + superblock::SUPER_SIZE;
    let mut alloc = Allocator::new(bs, (devt_off + superblock::DEVICE_SLOT_SIZE) as u64);
    let placed = layout::place_all(tree, &plan, &mut alloc);
    let meta_blocks = alloc.blocks();

    // The shared xattr area follows the inodes: only getxattr/listxattr read it, never a walk.
    let shared_ids: Vec<usize> = (0..tree.xattr_pool.len())
        .filter(|&x| plan.shared[x])
        .collect();
    let (offsets, shared_len) = layout::shared_area(
        shared_ids.iter().map(|&x| tree.xattr_pool[x].entry_size()),
        bs as usize,
    );
    let mut shared_id = vec![0u32; tree.xattr_pool.len()];
    for (&x, &off) in shared_ids.iter().zip(&offsets) {
        shared_id[x] = u32::try_from(off / 4).map_err(|_| Error::TooLarge("shared xattr area"))?;
    }
    let xattr_blkaddr = if shared_ids.is_empty() {
        0
    } else {
        meta_blocks
    };
    let total_blocks = meta_blocks + shared_len.div_ceil(bs);
    let blocks = u32::try_from(total_blocks).map_err(|_| Error::TooLarge("image"))?;

    let root_nid = placed[0].offset / inode::COMPACT_SIZE as u64;
    let nids = wanted
        .iter()
        .map(|id| {
            placed
                .get(id.index())
                .map(|at| at.offset / inode::COMPACT_SIZE as u64)
                .ok_or(Error::InvalidOptions("a node asked for is not in the tree"))
        })
        .collect::<Result<Vec<u64>>>()?;
    let sb = SuperBlock {
        blkszbits: opts.block_size.trailing_zeros() as u8,
        // The root is placed first, in block 0 or 1, so its nid is far below 2^16.
        root_nid: root_nid as u16,
        inos: tree.nodes.len() as u64,
        build_time: plan.epoch.sec as u64,
        build_time_nsec: plan.epoch.nsec,
        blocks,
        meta_blkaddr: 0,
        xattr_blkaddr: xattr_blkaddr as u32,
        uuid: opts.uuid,
        volume_name: opts.volume_name,
        extra_devices: 1,
        devt_slotoff: (devt_off / superblock::DEVICE_SLOT_SIZE) as u16,
    };
    let mut block0 = vec![0u8; bs as usize];
    block0[superblock::SUPER_OFFSET..devt_off].copy_from_slice(&sb.encode());
    block0[devt_off..devt_off + superblock::DEVICE_SLOT_SIZE]
        .copy_from_slice(&superblock::device_slot(&opts.blob_tag, opts.blob_blocks));

    // Every piece, in offset order, so the image streams out front to back.
    let mut pieces: Vec<(u64, Piece)> = Vec::with_capacity(tree.nodes.len() * 2);
    for (i, (at, p)) in placed.iter().zip(&plan.nodes).enumerate() {
        pieces.push((at.offset, Piece::Record(i as u32)));
        if p.blocks > 0 {
            pieces.push((at.data_block * bs, Piece::Blocks(i as u32)));
        }
    }
    let area = xattr_blkaddr * bs;
    pieces.extend(
        shared_ids
            .iter()
            .zip(&offsets)
            .map(|(&x, &off)| (area + off, Piece::Shared(x as u32))),
    );
    pieces.sort_unstable_by_key(|&(off, _)| off);

    let mut sink = Sink::new(std::io::BufWriter::with_capacity(1 << 20, out), block0);
    let mut extended = 0;
    let (mut rec, mut data) = (Vec::new(), Vec::new());
    for &(offset, piece) in &pieces {
        rec.clear();
        match piece {
            Piece::Shared(x) => tree.xattr_pool[x as usize].encode(&mut rec),
            Piece::Blocks(i) => {
                let p = &plan.nodes[i as usize];
                node_data(tree, &plan, &placed, i as usize, &mut rec);
                // All of it for FLAT_PLAIN, all but the tail for FLAT_INLINE.
                rec.truncate(rec.len() - p.tail as usize);
            }
            Piece::Record(i) => {
                let i = i as usize;
                let p = &plan.nodes[i];
                extended += u64::from(p.extended);
                encode_record(
                    tree, &plan, opts, chunk_bits, &placed, &shared_id, i, &mut rec,
                );
                if p.tail > 0 {
                    data.clear();
                    node_data(tree, &plan, &placed, i, &mut data);
                    rec.extend_from_slice(&data[data.len() - p.tail as usize..]);
                }
                debug_assert_eq!(rec.len() as u64, p.record, "record of node {i}");
            }
        }
        sink.put(offset, &rec)?;
    }
    let out = sink.finish(total_blocks * bs)?;
    let out = out.into_inner().map_err(|e| Error::Io(e.into_error()))?;
    let info = ImageInfo {
        bytes: total_blocks * bs,
        inodes: tree.nodes.len() as u64,
        extended_inodes: extended,
        root_nid,
    };
    Ok((info, out, nids))
}

/// The data of a directory (its dirent blocks) or symlink (its target).
fn node_data(tree: &Tree, plan: &Plan, placed: &[Placed], i: usize, out: &mut Vec<u8>) {
    match &tree.nodes[i].body {
        Body::Directory { .. } => {
            let entries: Vec<DirEntry> = plan
                .entries(NodeId(i as u32))
                .map(|(name, id)| DirEntry {
                    name,
                    nid: placed[id.index()].offset / inode::COMPACT_SIZE as u64,
                    file_type: plan::file_type(&tree.nodes[id.index()].body).1,
                })
                .collect();
            dir::encode(&entries, plan.block_size, out);
        }
        Body::Symlink(target) => out.extend_from_slice(target),
        _ => {}
    }
}

/// Appends a node's inode, its xattr body, and its chunk indexes (regular files).
#[allow(clippy::too_many_arguments)]
fn encode_record(
    tree: &Tree,
    plan: &Plan,
    opts: &WriteOptions,
    chunk_bits: u8,
    placed: &[Placed],
    shared_id: &[u32],
    i: usize,
    rec: &mut Vec<u8>,
) {
    let (node, p, at) = (&tree.nodes[i], &plan.nodes[i], &placed[i]);
    let (type_bits, _) = plan::file_type(&node.body);
    let i_u = match &node.body {
        Body::CharDevice(r) | Body::BlockDevice(r) => r.encoded(),
        Body::File(_) if p.size > 0 => inode::chunk_format(chunk_bits),
        Body::Directory { .. } | Body::Symlink(_) if p.blocks > 0 => at.data_block as u32,
        _ => 0,
    };
    InodeFields {
        extended: p.extended,
        layout: p.layout,
        xattr_icount: xattr::icount(p.ibody as usize).unwrap_or(0),
        mode: type_bits | node.meta.mode,
        nlink: p.nlink,
        size: p.size,
        i_u,
        ino: (i + 1) as u32,
        uid: node.meta.uid,
        gid: node.meta.gid,
        mtime: node.meta.mtime,
        mtime_delta: plan::compact_mtime(node.meta.mtime, plan.epoch, opts.compact_mtime)
            .unwrap_or(0),
    }
    .encode(rec);
    if p.ibody > 0 {
        let (ids, inline) = plan::split_xattrs(&node.xattrs, &plan.shared);
        // h_name_filter stays 0: the filter feature is not claimed, so readers ignore it.
        rec.extend_from_slice(&0u32.to_le_bytes());
        rec.push(ids.len() as u8);
        rec.extend_from_slice(&[0; 7]);
        for x in ids {
            rec.extend_from_slice(&shared_id[x as usize].to_le_bytes());
        }
        for x in inline {
            tree.xattr_pool[x as usize].encode(rec);
        }
    }
    if let Body::File(fd) = &node.body {
        if p.size > 0 {
            rec.resize(rec.len().next_multiple_of(inode::CHUNK_INDEX_SIZE), 0);
            chunk_indexes(fd, opts, rec);
        }
    }
}

/// Appends a file's chunk indexes.
fn chunk_indexes(fd: &FileData, opts: &WriteOptions, out: &mut Vec<u8>) {
    match fd {
        FileData::Contiguous { size, start_block } => {
            let per_chunk = opts.chunk_size / opts.block_size;
            for i in 0..size.div_ceil(u64::from(opts.chunk_size)) {
                // Checked in planning: the file's last block is inside the blob (a u32).
                inode::encode_chunk_index(Some(start_block + i as u32 * per_chunk), 1, out);
            }
        }
        FileData::Chunks { chunks, .. } => {
            for c in chunks {
                let block = match c {
                    Chunk::Hole => None,
                    Chunk::Blob { block } => Some(*block),
                };
                inode::encode_chunk_index(block, 1, out);
            }
        }
    }
}
