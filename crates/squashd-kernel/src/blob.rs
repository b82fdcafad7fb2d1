//! The blob: every regular file of one image, decompressed, laid end to end at block-aligned
//! offsets, as one virtual file. The EROFS metadata image points each file's chunks into it;
//! reads of the blob become reads of the files through the image's caches. Nothing is stored:
//! a blob is an index of (offset, file) and the gaps read as zeros.

use crate::blob_sweep::{BlobSweep, BlobSweepStats, FileBlock};
use crate::block_fill::{BlockFill, FillFile};
use squashd_core::read_ahead::{RandomSweep, ReadAheadPool, ReadState, SweepState, SweepStats};
use squashd_core::read_policy::ReadFor;
use squashd_core::{Chunk, FileReader, Image, InodeId};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The EROFS block size the blob is aligned to.
pub const BLOB_BLOCK: u64 = 4096;

/// One file's place in the blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobFile {
    /// First block of the file in the blob.
    pub start_block: u64,
    /// Its length in bytes.
    pub size: u64,
    /// The file in the image.
    pub inode: InodeId,
    /// Its nid in the EROFS metadata image (its inode number once mounted), once written.
    pub nid: Option<u64>,
}

/// Where each file lies in the blob, in the order they were placed.
#[derive(Debug, Clone, Default)]
pub struct BlobLayout {
    files: Vec<BlobFile>,
    blocks: u64,
}

impl BlobLayout {
    /// An empty blob.
    pub fn new() -> Self {
        Self::default()
    }

    /// Places a file of `size` bytes after the last one and returns its first block; an empty
    /// file takes no room and gets no place (None). Saturates rather than wraps: a hostile
    /// image's sizes are checked by the caller against the EROFS limits.
    pub fn place(&mut self, inode: InodeId, size: u64) -> Option<u64> {
        if size == 0 {
            return None;
        }
        let start_block = self.blocks;
        self.blocks = self.blocks.saturating_add(size.div_ceil(BLOB_BLOCK));
        self.files.push(BlobFile {
            start_block,
            size,
            inode,
            nid: None,
        });
        Some(start_block)
    }

    /// Notes the nid of each file, in blob order (what the metadata image's writer gave).
    pub fn set_nids(&mut self, nids: &[u64]) {
        for (file, &nid) in self.files.iter_mut().zip(nids) {
            file.nid = Some(nid);
        }
    }

    /// The blob's length in blocks.
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// The blob's length in bytes.
    pub fn len_bytes(&self) -> u64 {
        self.blocks.saturating_mul(BLOB_BLOCK)
    }

    /// The files, in blob order.
    pub fn files(&self) -> &[BlobFile] {
        &self.files
    }

    /// The index of the file whose blocks hold byte `pos`, or of the first file after it
    /// (None past the last).
    fn at_or_after(&self, pos: u64) -> Option<usize> {
        let block = pos / BLOB_BLOCK;
        let i = self
            .files
            .partition_point(|f| f.start_block + f.size.div_ceil(BLOB_BLOCK) <= block);
        (i < self.files.len()).then_some(i)
    }
}

/// How far ahead of a sequential reader of a file a blob decompresses, and with how many threads.
#[derive(Debug, Clone, Copy)]
pub struct ReadAhead {
    /// Threads decompressing ahead (0: none).
    pub threads: usize,
    /// Bytes ahead of the reader.
    pub bytes: u64,
}

/// A file of the blob read lately: its reader, and where its reading stands.
///
/// Made at a file's first read and dropped once [`Blob::OPEN_FILES`] others were read since,
/// not one per file of the layout from the start: a blob of usr has 130k files, and a read
/// state and a sweep state for each took 53 MiB at every mount, read or not
/// (bench/results/2026-12-07-s16.md). A file that comes back after that starts a new stream,
/// as a FUSE-path file does when it is opened again.
#[derive(Clone)]
struct OpenFile {
    /// Opening one reads its whole block list, which for a large file costs more than the
    /// read it serves.
    reader: FileReader,
    /// Shared with read-ahead jobs in flight, which may outlive the entry.
    state: Arc<FileState>,
}

/// Where one file's reading stands: its stream (for read-ahead) and its random sweep.
#[derive(Debug, Default)]
struct FileState {
    reading: ReadState,
    sweep: SweepState,
}

/// Jobs waiting for the read-ahead threads at most (a full queue drops new ones).
const READ_AHEAD_QUEUE: usize = 64;

/// A blob of one open image: answers reads of any range. A file read in order gets its next
/// blocks decompressed ahead of it on other threads, as on the FUSE path: EROFS asks for one
/// read-ahead window at a time, and one thread decompressing it would hold a reader to one
/// core's speed.
pub struct Blob {
    image: Image,
    layout: BlobLayout,
    read_ahead: ReadAheadPool,
    /// Files read recently, by index in the layout.
    open_files: quick_cache::sync::Cache<usize, OpenFile>,
    reads: AtomicU64,
    /// Of them, reads a fill caused (EROFS reading the rest of a block ahead).
    fill_reads: AtomicU64,
    /// Failed reads and the last one's error, counted as a FUSE mount counts them.
    probe: squashd_fuse::MountProbe,
    block_fill: BlockFill,
    /// Blocks brought in beside random readers (each file's sweep is in its [`FileState`]).
    sweep: RandomSweep,
    /// The sweep's workers, and the blocks they decompressed for EROFS.
    swept: BlobSweep,
}

impl Blob {
    /// Files kept open between reads of a blob, with where their reading stands; past that
    /// many, the least recently read is dropped.
    pub const OPEN_FILES: usize = 256;

    /// Files open now (read lately): [`Blob::OPEN_FILES`] at most, none before the first read.
    pub fn open_files(&self) -> usize {
        self.open_files.len()
    }

    /// The blob of `image` laid out as `layout`, reading ahead as `read_ahead` says.
    pub fn new(image: Image, layout: BlobLayout, read_ahead: ReadAhead) -> Self {
        let window = read_ahead.bytes / u64::from(image.block_size().max(1));
        // A block per core per miss, not one less as on the FUSE path: here the reader's miss is
        // decompressed by a request thread while the reader waits, and a swept block reaches
        // EROFS only at the reader's next miss. Measured, three passes of fio's random map:
        // 113-114k IOPS against 97-104k with one less, 23% fewer misses; the FUSE path gained
        // nothing (bench/results/2026-11-27-readpath-s9.md).
        let sweep = RandomSweep::new(read_ahead.threads > 0 && window > 0)
            .with_per_miss(squashd_core::cores() as u64);
        Blob {
            image,
            layout,
            read_ahead: ReadAheadPool::new(read_ahead.threads, window, READ_AHEAD_QUEUE),
            open_files: quick_cache::sync::Cache::new(Self::OPEN_FILES),
            reads: AtomicU64::new(0),
            fill_reads: AtomicU64::new(0),
            probe: squashd_fuse::MountProbe::default(),
            block_fill: BlockFill::new(),
            swept: BlobSweep::new(sweep.per_miss() as usize),
            sweep,
        }
    }

    /// The same blob with `sweep` bringing in blocks beside random readers (by default, one
    /// that sweeps when read-ahead is on and the CPUs are not busy).
    pub fn with_sweep(mut self, sweep: RandomSweep) -> Self {
        self.swept = BlobSweep::new(sweep.per_miss() as usize);
        self.sweep = sweep;
        self
    }

    /// What the sweeps beside random readers did.
    pub fn sweep_stats(&self) -> SweepStats {
        self.sweep.stats()
    }

    /// What the sweep's workers did.
    pub fn swept_stats(&self) -> BlobSweepStats {
        self.swept.stats()
    }

    /// Reads served.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Of the reads served, those a fill caused: the others are readers' misses.
    pub fn fill_reads(&self) -> u64 {
        self.fill_reads.load(Ordering::Relaxed)
    }

    /// What the last failed read's error said.
    pub fn last_error(&self) -> Option<String> {
        self.probe.last_error()
    }

    /// Reads that failed (the image is corrupt or unreadable there).
    pub fn failed_reads(&self) -> u64 {
        self.probe.failed_requests()
    }

    /// The image it reads.
    pub fn image(&self) -> &Image {
        &self.image
    }

    /// Its layout.
    pub fn layout(&self) -> &BlobLayout {
        &self.layout
    }

    /// Fills `buf` from blob offset `pos`; returns the bytes filled (short only at the end) and
    /// the blocks the read took only part of.
    pub fn read_at(&self, pos: u64, buf: &mut [u8]) -> squashd_core::Result<BlobRead> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let mut parts = Vec::new();
        let result = self.fill(pos, buf, &mut parts);
        if let Err(e) = &result {
            self.probe.failed(e);
        }
        result.map(|len| BlobRead { len, parts })
    }

    /// Answers a read that the fill of a block caused (see [`BlockFill`]) from that block in
    /// the data cache, where the reader's read left it, without copying: the block's bytes
    /// and the range of them read. None when `pos..pos + len` is not a fill's read within the
    /// bytes of one block (the other reads go through [`Blob::read_at`]).
    pub fn fill_read(
        &self,
        pos: u64,
        len: u64,
    ) -> Option<squashd_core::Result<(Chunk, std::ops::Range<usize>)>> {
        let index = self.layout.at_or_after(pos)?;
        let file = &self.layout.files[index];
        let within = pos.checked_sub(file.start_block * BLOB_BLOCK)?;
        // Block sizes are powers of two from 4 KiB to 1 MiB; the image is checked at open.
        let bs = u64::from(self.image.block_size().max(1));
        let chunk_start = within / bs * bs;
        let block = (file.start_block * BLOB_BLOCK + chunk_start) / BLOB_BLOCK;
        if within.checked_add(len)? > file.size.min(chunk_start + bs)
            || !self.block_fill.is_filling(block)
        {
            return None;
        }
        let reader = match self.open(index, file) {
            Ok(open) => open.reader,
            Err(e) => return Some(Err(e)),
        };
        let chunk = match reader.chunk_again(within / bs) {
            Ok(chunk) if chunk.is_hole() => return None,
            Ok(chunk) => chunk,
            Err(e) => return Some(Err(e)),
        };
        let start = (within - chunk_start) as usize;
        let range = start..start + len as usize;
        chunk.bytes().get(range.clone())?;
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.fill_reads.fetch_add(1, Ordering::Relaxed);
        Some(Ok((chunk, range)))
    }

    /// What fills EROFS's page cache with the rest of blocks read in part.
    pub fn block_fill(&self) -> &BlockFill {
        &self.block_fill
    }

    /// `file`, index `index` of the layout, kept open between reads.
    fn open(&self, index: usize, file: &BlobFile) -> squashd_core::Result<OpenFile> {
        self.open_files.get_or_insert_with(&index, || {
            let inode = self.image.inode(file.inode)?;
            Ok(OpenFile {
                reader: self.image.open_file(&inode)?,
                state: Arc::default(),
            })
        })
    }

    /// Asks EROFS to read the rest of each block a reader's random read took part of (see
    /// [`BlockFill`]); gives the sweep's workers the blocks the file's random sweep names
    /// ([`RandomSweep`], [`crate::blob_sweep`]), and asks EROFS for those they have
    /// decompressed since the last fill. Blocks read in order are left to read-ahead.
    pub fn fill_rest(&self, parts: &[PartRead]) {
        let bs = u64::from(self.image.block_size().max(1));
        let mut ready: Option<Vec<FileBlock>> = None;
        for part in parts.iter().filter(|p| p.random) {
            // The file was just read, so it is open; one dropped since has no sweep to add to.
            let (Some(file), Some(open)) = (
                self.layout.files.get(part.file),
                self.open_files.peek(&part.file),
            ) else {
                continue;
            };
            let state = &open.state.sweep;
            let Some(nid) = file.nid else {
                continue;
            };
            let index = part.file_offset / bs;
            if self.swept.reached((part.file, index)) {
                self.sweep.used(state, index);
            }
            let candidates = self.sweep.candidates(state, index, file.size.div_ceil(bs));
            let Some(fill) = self.block_fill.open(nid) else {
                continue;
            };
            fill.fill(
                part.blob_offset / BLOB_BLOCK,
                part.file_offset,
                part.chunk.len() as u64,
            );
            // The blocks of this file swept since the last miss, on the same descriptor.
            let swept_ready = ready.get_or_insert_with(|| self.swept.take_ready());
            for &(_, c) in swept_ready.iter().filter(|b| b.0 == part.file) {
                Self::hand_over(&fill, file, c, bs);
            }
            swept_ready.retain(|b| b.0 != part.file);
            let reader = &open.reader;
            let mut taken = 0;
            for c in candidates {
                if taken >= self.sweep.per_miss() {
                    break;
                }
                let (offset, len) = (c * bs, bs.min(file.size - c * bs));
                if self.swept.has((part.file, c)) || fill.holds(offset, len) {
                    continue;
                }
                if !self.swept.offer(reader, (part.file, c)) {
                    break;
                }
                self.sweep.swept(state, c);
                taken += 1;
            }
        }
        // Those of other files, each on a descriptor of its own.
        let mut ready = ready.unwrap_or_else(|| self.swept.take_ready());
        ready.sort_unstable();
        for group in ready.chunk_by(|a, b| a.0 == b.0) {
            let Some(file) = self.layout.files.get(group[0].0) else {
                continue;
            };
            if let Some(fill) = file.nid.and_then(|nid| self.block_fill.open(nid)) {
                for &(_, c) in group {
                    Self::hand_over(&fill, file, c, bs);
                }
            }
        }
    }

    /// Asks EROFS, through `fill` (a descriptor of `file`), for block `c` of it, which the
    /// sweep's workers decompressed, unless it holds the block whole already.
    fn hand_over(fill: &FillFile<'_>, file: &BlobFile, c: u64, bs: u64) {
        let (offset, len) = (c * bs, bs.min(file.size.saturating_sub(c * bs)));
        if len > 0 && !fill.holds(offset, len) {
            fill.fill(file.start_block + offset / BLOB_BLOCK, offset, len);
        }
    }

    fn fill(
        &self,
        pos: u64,
        buf: &mut [u8],
        parts: &mut Vec<PartRead>,
    ) -> squashd_core::Result<usize> {
        let end = self.layout.len_bytes();
        let want = (buf.len() as u64).min(end.saturating_sub(pos)) as usize;
        let mut done = 0;
        while done < want {
            let at = pos + done as u64;
            let rest = &mut buf[done..want];
            let Some(index) = self.layout.at_or_after(at) else {
                rest.fill(0);
                break;
            };
            let file = &self.layout.files[index];
            let start = file.start_block * BLOB_BLOCK;
            if at < start {
                // Padding before the next file (or a gap): zeros.
                let n = rest.len().min((start - at) as usize);
                rest[..n].fill(0);
                done += n;
                continue;
            }
            let within = at - start;
            if within >= file.size {
                // The zero tail of the file's last block.
                let block_end = start + file.size.div_ceil(BLOB_BLOCK) * BLOB_BLOCK;
                let n = rest.len().min((block_end - at) as usize);
                rest[..n].fill(0);
                done += n;
                continue;
            }
            let n = rest.len().min((file.size - within) as usize);
            let OpenFile { reader, state } = self.open(index, file)?;
            let bs = u64::from(reader.block_size().max(1));
            let first_block = start + within / bs * bs;
            let from_fill = self.block_fill.is_filling(first_block / BLOB_BLOCK);
            if from_fill && done == 0 {
                self.fill_reads.fetch_add(1, Ordering::Relaxed);
            }
            let read_for = if from_fill {
                ReadFor::Fill
            } else {
                ReadFor::Reader {
                    read_ahead: &self.read_ahead,
                    state: &state.reading,
                }
            };
            let first_part = parts.len();
            let mut part = |chunk_index: u64, chunk: &Chunk| {
                if !from_fill {
                    parts.push(PartRead {
                        file: index,
                        file_offset: chunk_index * bs,
                        blob_offset: start + chunk_index * bs,
                        chunk: chunk.clone(),
                        random: false,
                    });
                }
            };
            let read = reader.read_into(within, &mut rest[..n], read_for, &mut part)?;
            // A seek, not a fill's read: the parts it took are worth filling.
            let random = !read.streaming && !from_fill;
            for p in &mut parts[first_part..] {
                p.random = random;
            }
            done += n;
        }
        Ok(want)
    }
}

/// What a blob read gave.
#[derive(Debug)]
pub struct BlobRead {
    /// Bytes filled.
    pub len: usize,
    /// The blocks it took only part of.
    pub parts: Vec<PartRead>,
}

/// A block a blob read took only part of.
#[derive(Debug, Clone)]
pub struct PartRead {
    /// The file's index in the layout.
    pub file: usize,
    /// Where the block starts in the file.
    pub file_offset: u64,
    /// Where the block starts in the blob.
    pub blob_offset: u64,
    /// Its bytes, from the data cache.
    pub chunk: Chunk,
    /// Whether the read was a seek, not the next of a stream.
    pub random: bool,
}

impl std::fmt::Debug for Blob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blob")
            .field("image", &self.image)
            .field("files", &self.layout.files.len())
            .field("read_ahead", &self.read_ahead)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_block_aligned_and_empty_files_take_no_room() {
        let mut l = BlobLayout::new();
        let id = |n| InodeId::from_u64(n);
        assert_eq!(l.place(id(1), 1), Some(0));
        assert_eq!(l.place(id(2), 0), None);
        assert_eq!(l.place(id(3), 4096), Some(1));
        assert_eq!(l.place(id(4), 4097), Some(2));
        assert_eq!(l.blocks(), 4);
        let at = |pos| l.files()[l.at_or_after(pos).unwrap()].inode;
        assert_eq!(at(0), id(1));
        assert_eq!(at(4095), id(1));
        assert_eq!(at(4096), id(3));
        assert_eq!(at(3 * 4096 + 5), id(4));
        assert!(l.at_or_after(4 * 4096).is_none());
    }
}
