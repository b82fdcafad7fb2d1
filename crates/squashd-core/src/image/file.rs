//! Reading a regular file: its block list, mapped to positions once at open, then reads that
//! fetch data blocks and the tail-end fragment through the data cache.

use super::inode::{Inode, InodeDetail};
use super::metadata::MetadataCursor;
use super::Image;
use crate::error::{Error, Result};
use crate::format::inode::FileBody;
use crate::format::tables::FragmentEntry;
use crate::format::DataBlockSize;
use std::sync::{Arc, OnceLock};

/// How [`FileReader::chunk_through_cache`] gets a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fetch {
    /// Through the cache, waiting for another reader's load of it.
    Wait,
    /// The same, but a hit is not another use ([`FileReader::chunk_again`]).
    Again,
    /// Not when another reader is loading it ([`FileReader::preload_chunk`]).
    UnlessLoading,
}

/// The positions of a file's data blocks. Only blocks with bytes on disk are kept: a hostile
/// inode can claim 2^48 holes (one tiny compressed metadata block expands to 2048 zero size
/// words), and a map with an entry per hole would cost gigabytes. Each stored block has at least
/// one byte in the image, so the map is bounded by the image's size, whatever the file claims.
struct BlockMap {
    /// Blocks with stored bytes, in file order.
    stored: Vec<StoredBlock>,
    /// Number of blocks in the block list, holes included.
    count: u64,
}

/// A block of a file that has bytes in the image.
struct StoredBlock {
    /// Its index in the file.
    index: u64,
    /// Its image position.
    start: u64,
    /// Its size word.
    size: DataBlockSize,
}

impl BlockMap {
    /// Block `index` of the list: `None` past the list, `Some(None)` for a hole.
    fn get(&self, index: u64) -> Option<Option<&StoredBlock>> {
        if index >= self.count {
            return None;
        }
        // Files without holes: block i is entry i.
        if let Some(b) = self.stored.get(index as usize).filter(|b| b.index == index) {
            return Some(Some(b));
        }
        let found = self.stored.binary_search_by_key(&index, |b| b.index);
        Some(found.ok().map(|i| &self.stored[i]))
    }
}

/// A regular file opened for reading. Cheap to clone; safe to read from many threads.
#[derive(Clone)]
pub struct FileReader {
    image: Image,
    body: FileBody,
    blocks: Arc<BlockMap>,
    number: u32,
    /// The fragment table's entry for the tail end, once looked up: a reader that asks where
    /// the tail lies, then reads it (extraction), looks it up once.
    fragment: OnceLock<FragmentEntry>,
}

impl std::fmt::Debug for FileReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileReader")
            .field("inode", &self.number)
            .field("size", &self.body.file_size)
            .finish_non_exhaustive()
    }
}

impl FileReader {
    pub(crate) fn open(image: Image, inode: &Inode) -> Result<Self> {
        let inner = &image.inner;
        let (body, at) = match &inode.detail {
            InodeDetail::File {
                body,
                block_list_at,
            } => (body.clone(), *block_list_at),
            InodeDetail::Directory { .. } => {
                return Err(Error::IsADirectory {
                    image: inner.name.clone(),
                    path: format!("inode {}", inode.number),
                })
            }
            _ => {
                return Err(Error::InvalidInput {
                    image: inner.name.clone(),
                    what: format!("inode {} is not a regular file", inode.number),
                })
            }
        };
        let sb = &inner.superblock;
        let count = body.block_count(sb.block_size);
        let mut cur = MetadataCursor::new(inner, sb.inode_table_start, at)?;
        // Grows as sizes are read: stored blocks are bounded by the image's bytes (each holds
        // at least one, and they must all lie in the image), holes take no room, and the loop
        // ends when the inode table's stream does, whatever `count` claims.
        let mut stored = Vec::with_capacity(count.min(1 << 12) as usize);
        let mut pos = body.blocks_start;
        for index in 0..count {
            let size = DataBlockSize::parse(cur.u32()?);
            if size.is_sparse() {
                continue;
            }
            if size.stored_size > sb.block_size + 4096 {
                return Err(inner.corrupt(
                    cur.block_pos(),
                    format!("file block of {} bytes on disk", size.stored_size),
                ));
            }
            let end = pos
                .checked_add(size.stored_size as u64)
                .filter(|&end| end <= sb.bytes_used)
                .ok_or_else(|| {
                    inner.corrupt(
                        cur.block_pos(),
                        format!(
                            "inode {}: data block at {pos} runs past the image end",
                            inode.number
                        ),
                    )
                })?;
            stored.push(StoredBlock {
                index,
                start: pos,
                size,
            });
            pos = end;
        }
        Ok(FileReader {
            blocks: Arc::new(BlockMap { stored, count }),
            image,
            body,
            number: inode.number,
            fragment: OnceLock::new(),
        })
    }

    /// The file's size in bytes.
    pub fn size(&self) -> u64 {
        self.body.file_size
    }

    /// Bytes this reader holds beyond the image it shares: its list of stored blocks (for
    /// callers that keep many readers and must bound them).
    pub fn footprint(&self) -> u64 {
        (std::mem::size_of::<Self>()
            + self.blocks.stored.len() * std::mem::size_of::<StoredBlock>()) as u64
    }

    /// The image's block size: the unit in which the file is stored and cached.
    pub fn block_size(&self) -> u32 {
        self.image.inner.superblock.block_size
    }

    /// Number of block-sized chunks the file has, counting a tail end kept in a fragment.
    pub fn chunk_count(&self) -> u64 {
        self.body.file_size.div_ceil(self.block_size() as u64)
    }

    /// The bytes of chunk `index` (the file's block-size-aligned piece `index`), decompressed
    /// through the data cache: a full block, the last partial block, or the tail end.
    pub fn chunk(&self, index: u64) -> Result<Chunk> {
        self.chunk_waiting(index, Fetch::Wait)
    }

    /// [`FileReader::chunk`] for a read that repeats a use of the block just made: the kernel
    /// path's fill, whose two to four reads of the rest of a block follow the reader's read of
    /// part of it within a millisecond. A hit then does not count as another use in the data
    /// cache's eviction order. Counted as uses, those reads made every block a random reader
    /// touched "hot", so that the cache kept the blocks read last, in order: fio's random map
    /// visits the blocks in the same order every pass, and found none of them still cached.
    pub fn chunk_again(&self, index: u64) -> Result<Chunk> {
        self.chunk_waiting(index, Fetch::Again)
    }

    /// [`FileReader::chunk_through_cache`] for a `fetch` that waits for loads, which always
    /// gives the block.
    fn chunk_waiting(&self, index: u64, fetch: Fetch) -> Result<Chunk> {
        match self.chunk_through_cache(index, fetch)? {
            Some(chunk) => Ok(chunk),
            // Unreachable: a load that waits always gives the block.
            None => Err(self.image.inner.corrupt(0, "data block load gave nothing")),
        }
    }

    /// Decompresses chunk `index`'s block into the data cache for a reader expected soon, as
    /// [`FileReader::chunk`] does, unless it is cached already or another reader is loading it
    /// now: that load is not waited for. For read-ahead workers, which have other blocks to
    /// load meanwhile (files with their tail ends in one fragment block, read ahead side by
    /// side, would otherwise queue behind one load). Returns whether the block is in the cache
    /// (or the chunk is a hole); `false` when it is left to another loader, or the data cache
    /// has no budget to keep it.
    pub fn preload_chunk(&self, index: u64) -> Result<bool> {
        Ok(self
            .chunk_through_cache(index, Fetch::UnlessLoading)?
            .is_some())
    }

    /// [`FileReader::chunk`], [`FileReader::chunk_again`] or [`FileReader::preload_chunk`], as
    /// `fetch` says (`None`: not loaded here).
    fn chunk_through_cache(&self, index: u64, fetch: Fetch) -> Result<Option<Chunk>> {
        let inner = &self.image.inner;
        let load = |pos, size, max_len| -> Result<Option<Arc<[u8]>>> {
            match fetch {
                Fetch::UnlessLoading => inner.data_block_unless_loading(pos, size, max_len),
                Fetch::Again => match inner.data_block_again(pos) {
                    Some(data) => Ok(Some(data)),
                    None => inner.data_block(pos, size, max_len).map(Some),
                },
                Fetch::Wait => inner.data_block(pos, size, max_len).map(Some),
            }
        };
        let bs = self.block_size() as u64;
        let len = self.chunk_len(index)?;
        if let Some(block) = self.blocks.get(index) {
            let Some(&StoredBlock {
                start: pos, size, ..
            }) = block
            else {
                return Ok(Some(Chunk::Zeros(len)));
            };
            let Some(data) = load(pos, size, bs as usize)? else {
                return Ok(None);
            };
            self.check_block_len(index, pos, data.len(), len)?;
            return Ok(Some(Chunk::Data {
                data,
                start: 0,
                len,
            }));
        }
        // The tail end, kept in a fragment block.
        if !self.body.has_fragment() {
            return Err(inner.corrupt(
                0,
                format!("inode {}: block list is shorter than the file", self.number),
            ));
        }
        let frag = self.tail_fragment()?;
        if frag.start.saturating_add(frag.size.stored_size as u64) > inner.superblock.bytes_used {
            return Err(inner.corrupt(frag.start, "fragment block runs past the image end"));
        }
        let Some(data) = load(frag.start, frag.size, bs as usize)? else {
            return Ok(None);
        };
        let offset = self.body.fragment_offset as usize;
        if offset.checked_add(len).is_none_or(|end| end > data.len()) {
            return Err(inner.corrupt(
                frag.start,
                format!(
                    "inode {}: tail end of {len} bytes at {offset} is outside its {}-byte fragment",
                    self.number,
                    data.len()
                ),
            ));
        }
        Ok(Some(Chunk::Data {
            data,
            start: offset,
            len,
        }))
    }

    /// Where the stored bytes of chunk `index` begin in the image: its data block, or the
    /// fragment block holding the tail end. `None` for a hole, past the end of the file, or a
    /// fragment the table cannot give. For prefetching ([`Image::prefetch`]).
    pub fn chunk_position(&self, index: u64) -> Option<u64> {
        if index >= self.chunk_count() {
            return None;
        }
        match self.blocks.get(index) {
            Some(Some(block)) => Some(block.start),
            Some(None) => None,
            None if self.body.has_fragment() => self.tail_fragment().ok().map(|f| f.start),
            None => None,
        }
    }

    /// Whether the data cache holds chunk `index`'s block now (a hole needs none). Counts
    /// nothing: read-ahead asks it to tell a block read ahead that a reader finds from one
    /// evicted before the reader came, and a reader whether a read has blocks to decompress.
    pub fn chunk_cached(&self, index: u64) -> bool {
        if matches!(self.blocks.get(index), Some(None)) {
            return true;
        }
        let inner = &self.image.inner;
        self.chunk_position(index)
            .is_some_and(|pos| inner.caches.data.peek(&inner.key(pos)).is_some())
    }

    /// Whether another reader is loading chunk `index`'s block into the data cache now (a read
    /// of it would wait for that load). Counts nothing.
    pub fn chunk_loading(&self, index: u64) -> bool {
        if matches!(self.blocks.get(index), Some(None)) {
            return false;
        }
        let inner = &self.image.inner;
        self.chunk_position(index)
            .is_some_and(|pos| inner.caches.data.is_loading(&inner.key(pos)))
    }

    /// The image's read-ahead counters.
    pub(crate) fn read_ahead_counters(
        &self,
    ) -> &std::sync::Arc<crate::read_ahead::ReadAheadCounters> {
        &self.image.inner.read_ahead
    }

    /// Whether chunk `index` is the tail end kept in a fragment block, which other files share
    /// and the data cache keeps ([`FileReader::read_chunk_into`] lends its bytes).
    pub fn is_tail_end(&self, index: u64) -> bool {
        index < self.chunk_count() && self.blocks.get(index).is_none() && self.body.has_fragment()
    }

    /// The fragment table's entry for the tail end, looked up on first use.
    fn tail_fragment(&self) -> Result<FragmentEntry> {
        if let Some(frag) = self.fragment.get() {
            return Ok(*frag);
        }
        let frag = self.image.inner.fragment(self.body.fragment_index)?;
        Ok(*self.fragment.get_or_init(|| frag))
    }

    /// Length of chunk `index`, or an error past the end of the file.
    fn chunk_len(&self, index: u64) -> Result<usize> {
        let bs = self.block_size() as u64;
        let start = index.saturating_mul(bs);
        if start >= self.body.file_size {
            return Err(Error::InvalidInput {
                image: self.image.inner.name.clone(),
                what: format!(
                    "inode {}: chunk {index} is past the end of the file",
                    self.number
                ),
            });
        }
        Ok((self.body.file_size - start).min(bs) as usize)
    }

    /// Reads chunk `index` for a reader that reads the file once, front to back (extraction):
    /// a data block is decompressed straight into `buf` and not kept in the data cache, so a
    /// stream of blocks neither allocates per block nor evicts what other readers use. Bytes the
    /// cache holds already are lent, not copied: the tail end (its fragment block is shared
    /// with other files, so it goes through the cache) and a block some other reader cached.
    pub fn read_chunk_into(&self, index: u64, buf: &mut Vec<u8>) -> Result<ChunkRead> {
        let inner = &self.image.inner;
        let len = self.chunk_len(index)?;
        match self.blocks.get(index) {
            Some(None) => Ok(ChunkRead::Hole(len)),
            Some(Some(block)) => {
                let bs = self.block_size() as usize;
                match inner.data_block_into(block.start, block.size, bs, buf)? {
                    Some(data) => {
                        self.check_block_len(index, block.start, data.len(), len)?;
                        Ok(ChunkRead::Cached(Chunk::Data {
                            data,
                            start: 0,
                            len,
                        }))
                    }
                    None => {
                        self.check_block_len(index, block.start, buf.len(), len)?;
                        Ok(ChunkRead::Data)
                    }
                }
            }
            None => Ok(ChunkRead::Cached(self.chunk(index)?)),
        }
    }

    /// A data block must hold exactly its chunk's bytes: a block that decompresses to less (or,
    /// for the last, partial one, more) is corrupt.
    fn check_block_len(&self, index: u64, pos: u64, got: usize, len: usize) -> Result<()> {
        if got == len {
            return Ok(());
        }
        Err(self.image.inner.corrupt(
            pos,
            format!(
                "inode {}: block {index} holds {got} bytes, expected {len}",
                self.number
            ),
        ))
    }

    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read (0 at the end).
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.read_range(offset, buf, false)
    }

    /// Reads up to `buf.len()` bytes at `offset`, as [`FileReader::read_at`], for a reader that
    /// reads this range once into a buffer of its own (a whole file into a new bytes object):
    /// each data block that `buf` takes whole and that the data cache does not hold is
    /// decompressed straight into `buf` and not cached, so it is neither decompressed into the
    /// cache and copied out nor evicts what other readers use. A block the cache holds (read
    /// ahead, or read by another reader), or one being loaded into it, is copied and then
    /// dropped from the cache: read ahead for this read, it is done with. A block `buf` takes
    /// part of, and the tail end (its fragment block is shared with other files) come through
    /// the cache, are copied and stay. Returns how many bytes were read (0 at the end).
    pub fn read_once_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.read_range(offset, buf, true)
    }

    /// [`FileReader::read_at`], and with `once` [`FileReader::read_once_at`].
    fn read_range(&self, offset: u64, buf: &mut [u8], once: bool) -> Result<usize> {
        let size = self.body.file_size;
        if offset >= size || buf.is_empty() {
            return Ok(0);
        }
        let end = size.min(offset.saturating_add(buf.len() as u64));
        let bs = self.block_size() as u64;
        let mut pos = offset;
        while pos < end {
            let index = pos / bs;
            let within = (pos % bs) as usize;
            let out = &mut buf[(pos - offset) as usize..(end - offset) as usize];
            if once {
                let len = self.chunk_len(index)?;
                if within == 0 && out.len() >= len {
                    if let Some(Some(block)) = self.blocks.get(index) {
                        let out = &mut out[..len];
                        let inner = &self.image.inner;
                        if let Some(data) =
                            inner.data_block_to_slice(block.start, block.size, out)?
                        {
                            self.check_block_len(index, block.start, data.len(), len)?;
                            out.copy_from_slice(&data);
                            // Dropped from the cache: its buffer takes the next block loaded.
                            inner.block_pool.give(data);
                        }
                        pos += len as u64;
                        continue;
                    }
                }
            }
            let chunk = self.chunk(index)?;
            let n = out.len().min(chunk.len() - within);
            let out = &mut out[..n];
            match &chunk {
                Chunk::Zeros(_) => out.fill(0),
                Chunk::Data { .. } => out.copy_from_slice(&chunk.bytes()[within..within + n]),
            }
            pos += n as u64;
        }
        Ok((end - offset) as usize)
    }
}

/// What [`FileReader::read_chunk_into`] found.
#[derive(Debug, Clone)]
pub enum ChunkRead {
    /// A hole of this many zero bytes; the buffer was left as it was.
    Hole(usize),
    /// The chunk's bytes are the whole buffer.
    Data,
    /// The chunk's bytes, lent from the data cache; the buffer was left as it was.
    Cached(Chunk),
}

/// A block-sized piece of a file.
#[derive(Debug, Clone)]
pub enum Chunk {
    /// A hole: this many zero bytes.
    Zeros(usize),
    /// Bytes `start..start + len` of a cached block.
    Data {
        /// The cached block (a data block, or a fragment block holding several tail ends).
        data: Arc<[u8]>,
        /// Where this file's bytes start in it.
        start: usize,
        /// How many bytes are this file's.
        len: usize,
    },
}

impl Chunk {
    /// Length of the chunk in bytes.
    pub fn len(&self) -> usize {
        match self {
            Chunk::Zeros(n) => *n,
            Chunk::Data { len, .. } => *len,
        }
    }

    /// Whether the chunk is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the chunk is a hole.
    pub fn is_hole(&self) -> bool {
        matches!(self, Chunk::Zeros(_))
    }

    /// The chunk's bytes; empty for a hole (use [`Chunk::len`] and write zeros).
    pub fn bytes(&self) -> &[u8] {
        match self {
            Chunk::Zeros(_) => &[],
            Chunk::Data { data, start, len } => &data[*start..*start + *len],
        }
    }
}
