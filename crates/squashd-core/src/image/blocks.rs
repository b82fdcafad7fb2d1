//! The block-loading engine: where the source, the codecs and the caches meet.
//!
//! Everything above this module asks for blocks by image position: a metadata block
//! ([`ImageInner::metadata_block`]), a data or fragment block through the data cache
//! ([`ImageInner::data_block`]), or a data block decompressed straight into the caller's buffer
//! for readers that pass through once ([`ImageInner::data_block_into`]). Below it, bytes are read
//! from the source at the image's offset ([`ImageInner::read_at`], bounded by the image's end),
//! optionally through the compressed tier, and decompressed by [`crate::compress`].
//!
//! These are the hot paths of every read: a cached block is an `Arc` clone; a load allocates
//! once, at the block's size, for the cache, and decompresses into it (or into a block a
//! whole-file reader handed back, `block_pool`); a streaming read allocates nothing once its
//! buffers have grown to a block (per-thread scratch buffers hold stored and decompressed bytes
//! that are not kept).

use super::ImageInner;
use crate::cache::Cached;
use crate::compress::decompress;
use crate::error::{Error, Result};
use crate::format::{DataBlockSize, MetadataHeader, METADATA_BLOCK_SIZE};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A decompressed metadata block and the position of the block after it.
#[derive(Clone)]
pub(crate) struct MetadataBlock {
    pub(crate) data: Arc<[u8]>,
    pub(crate) next: u64,
}

impl crate::cache::CacheValue for MetadataBlock {
    fn weight(&self) -> u64 {
        self.data.len() as u64 + 64
    }
}

impl ImageInner {
    /// Reads `buf.len()` bytes at image position `pos`, which must lie within the image.
    pub(crate) fn read_at(&self, pos: u64, buf: &mut [u8]) -> Result<()> {
        let end = pos.checked_add(buf.len() as u64);
        if end.is_none_or(|end| end > self.superblock.bytes_used) {
            return Err(self.corrupt(
                pos,
                format!(
                    "{} bytes at {pos} run past the image end {}",
                    buf.len(),
                    self.superblock.bytes_used
                ),
            ));
        }
        self.read_raw(pos, buf)
    }

    fn read_raw(&self, pos: u64, buf: &mut [u8]) -> Result<()> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.bytes_read
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        // Callers check that the bytes lie within the image, which lies within its file; a
        // position past u64::MAX is still refused rather than wrapped.
        let abs = self.offset.checked_add(pos).ok_or_else(|| {
            self.corrupt(
                pos,
                format!("{} bytes at {pos} lie past the end of any file", buf.len()),
            )
        })?;
        self.source
            .read_exact_at(buf, abs)
            .map_err(|error| Error::Io {
                image: self.name.clone(),
                offset: abs,
                len: buf.len(),
                error,
            })
    }

    pub(crate) fn key(&self, pos: u64) -> crate::cache::BlockKey {
        crate::cache::BlockKey {
            image: self.cache_id,
            pos,
        }
    }

    /// The decompressed metadata block at image position `pos`, through the metadata cache.
    pub(crate) fn metadata_block(&self, pos: u64) -> Result<MetadataBlock> {
        self.caches
            .metadata
            .get_or_load(self.key(pos), Some(&self.counters.metadata), || {
                let avail = self.superblock.bytes_used.saturating_sub(pos);
                if avail < 3 {
                    return Err(self.corrupt(pos, "metadata block starts past the image end"));
                }
                let mut raw = vec![0u8; avail.min(2 + METADATA_BLOCK_SIZE as u64) as usize];
                self.read_at(pos, &mut raw)?;
                let header = MetadataHeader::parse(u16::from_le_bytes([raw[0], raw[1]]))
                    .map_err(|e| self.format_error(pos, e))?;
                let end = 2 + header.stored_size as usize;
                if end > raw.len() {
                    return Err(self.corrupt(pos, "metadata block runs past the image end"));
                }
                let data: Arc<[u8]> = if header.compressed {
                    let mut out = vec![0u8; METADATA_BLOCK_SIZE];
                    let n = decompress(self.superblock.compressor, &raw[2..end], &mut out)
                        .map_err(|e| self.corrupt(pos, format!("metadata block: {e}")))?;
                    out.truncate(n);
                    out.into()
                } else {
                    raw[2..end].into()
                };
                Ok(MetadataBlock {
                    data,
                    // Within the image: `end` bytes were read at `pos`.
                    next: pos + end as u64,
                })
            })
    }

    /// The decompressed data block or fragment block at `pos`, through the data cache (and the
    /// compressed tier when it has a budget). `max_len` bounds what it may decompress to.
    pub(crate) fn data_block(
        &self,
        pos: u64,
        size: DataBlockSize,
        max_len: usize,
    ) -> Result<Arc<[u8]>> {
        let key = self.key(pos);
        self.caches
            .data
            .get_or_load(key, Some(&self.counters.data), || {
                self.load_data_block(pos, size, max_len)
            })
    }

    /// The data block or fragment block at `pos` if the data cache holds it, counted as a hit
    /// that is not another use (see [`crate::FileReader::chunk_again`]).
    pub(crate) fn data_block_again(&self, pos: u64) -> Option<Arc<[u8]>> {
        self.caches
            .data
            .peek_counted(&self.key(pos), Some(&self.counters.data))
    }

    /// The data block or fragment block at `pos`, as [`ImageInner::data_block`] gives it,
    /// unless another reader is loading it into the data cache now: then `None`, without
    /// waiting. For read-ahead workers (see [`crate::cache::BlockCache::get_or_load_unless_loading`]).
    pub(crate) fn data_block_unless_loading(
        &self,
        pos: u64,
        size: DataBlockSize,
        max_len: usize,
    ) -> Result<Option<Arc<[u8]>>> {
        let key = self.key(pos);
        self.caches
            .data
            .get_or_load_unless_loading(key, Some(&self.counters.data), || {
                self.load_data_block(pos, size, max_len)
            })
    }

    /// Reads and decompresses the data block at `pos` for the data cache.
    fn load_data_block(&self, pos: u64, size: DataBlockSize, max_len: usize) -> Result<Arc<[u8]>> {
        LOADS_HERE.with(|n| n.set(n.get() + 1));
        if self.caches.compressed.is_enabled() || !size.compressed {
            let raw = self.stored_block(pos, size, max_len)?;
            if !size.compressed {
                return Ok(raw);
            }
            return self.decompress_for_cache(pos, &raw, max_len);
        }
        // The stored bytes go into this thread's buffer (grown once, not allocated and zeroed
        // per block): they are not kept.
        let stored = self.stored_size(pos, size, max_len)?;
        let mut raw = SCRATCH.with(|scratch| std::mem::take(&mut scratch.borrow_mut().stored));
        if raw.len() < stored {
            raw.resize(stored, 0);
        }
        let result = self
            .read_at(pos, &mut raw[..stored])
            .and_then(|()| self.decompress_for_cache(pos, &raw[..stored], max_len));
        SCRATCH.with(|scratch| scratch.borrow_mut().stored = raw);
        result
    }

    /// Decompresses `raw` (the block at `pos`) for the data cache: into this thread's buffer
    /// (grown once to a block; its pages stay mapped and warm), then copied into an allocation
    /// of exactly the bytes it holds. A block shorter than `max_len` (a fragment block, a file's
    /// last block) is then allocated and written once, where decompressing into a zeroed
    /// allocation of `max_len` had to zero it, and copy it again at its size; a full block
    /// costs a copy where it cost zeroing.
    ///
    /// A buffer a whole-file reader handed back (`block_pool`) is decompressed into in place
    /// instead: a full block is then cached with no copy and no fresh memory.
    fn decompress_for_cache(&self, pos: u64, raw: &[u8], max_len: usize) -> Result<Arc<[u8]>> {
        if max_len == self.block_pool.block_len() {
            if let Some(mut block) = self.block_pool.take() {
                if let Some(out) = Arc::get_mut(&mut block) {
                    let result = decompress(self.superblock.compressor, raw, out)
                        .map_err(|e| self.corrupt(pos, format!("data block: {e}")));
                    return match result {
                        Ok(n) if n == out.len() => Ok(block),
                        Ok(n) => {
                            // A file's last block, or a fragment block: kept at its size.
                            let short = Arc::from(out.get(..n).unwrap_or_default());
                            self.block_pool.give(block);
                            Ok(short)
                        }
                        Err(e) => {
                            self.block_pool.give(block);
                            Err(e)
                        }
                    };
                }
            }
        }
        let mut out =
            SCRATCH.with(|scratch| std::mem::take(&mut scratch.borrow_mut().decompressed));
        let result = self
            .decompress_into(pos, raw, max_len, &mut out)
            .map(|n| Arc::from(out.get(..n).unwrap_or_default()));
        SCRATCH.with(|scratch| scratch.borrow_mut().decompressed = out);
        result
    }

    /// Decompresses the data block at `pos` into `out` without caching it (its bytes are
    /// `out[..]` afterwards), for readers that will not come back for it: no allocation once
    /// `out` has grown to a block, no copy into the cache, no eviction of blocks others need.
    /// A block the data cache holds already is returned instead, and `out` is left as it was.
    pub(crate) fn data_block_into(
        &self,
        pos: u64,
        size: DataBlockSize,
        max_len: usize,
        out: &mut Vec<u8>,
    ) -> Result<Option<Arc<[u8]>>> {
        if let Some(cached) = self.caches.data.peek(&self.key(pos)) {
            return Ok(Some(cached));
        }
        if self.caches.compressed.is_enabled() {
            let raw = self.stored_block(pos, size, max_len)?;
            if size.compressed {
                self.decompress_block(pos, &raw, max_len, out)?;
            } else {
                out.clear();
                out.extend_from_slice(&raw);
            }
        } else if !size.compressed {
            // Stored as it is: read straight into `out` (zero-filling only what it grows by).
            out.resize(self.stored_size(pos, size, max_len)?, 0);
            self.read_at(pos, out)?;
        } else {
            let stored = self.stored_size(pos, size, max_len)?;
            self.with_stored_bytes(pos, stored, |raw| {
                self.decompress_block(pos, raw, max_len, out)
            })?;
        }
        self.caches
            .data
            .count_uncached_load(Some(&self.counters.data), out.len() as u64);
        Ok(None)
    }

    /// Decompresses the data block at `pos` straight into `out`, which is exactly as long as the
    /// block's bytes must be (its chunk of the file), without caching it: for a reader that
    /// reads a range once into a buffer of its own. A block the data cache holds, or that
    /// another reader is loading into it (then waited for), is returned instead and `out` is
    /// left as it was; it is then dropped from the cache, since its reader has come (it was
    /// read ahead for this read; a walk that reads every file would otherwise fill the cache
    /// with blocks read once, evicting the fragment blocks that the next files share). A block
    /// that decompresses to any other length than `out.len()` is corrupt.
    pub(crate) fn data_block_to_slice(
        &self,
        pos: u64,
        size: DataBlockSize,
        out: &mut [u8],
    ) -> Result<Option<Arc<[u8]>>> {
        let key = self.key(pos);
        let len = out.len();
        let found =
            self.caches
                .data
                .get_or_load_elsewhere(key, Some(&self.counters.data), || {
                    let n = if self.caches.compressed.is_enabled() {
                        let raw = self.stored_block(pos, size, len)?;
                        if size.compressed {
                            decompress(self.superblock.compressor, &raw, out)
                                .map_err(|e| self.corrupt(pos, format!("data block: {e}")))?
                        } else {
                            let n = raw.len().min(len);
                            out[..n].copy_from_slice(&raw[..n]);
                            raw.len()
                        }
                    } else if !size.compressed {
                        let stored = self.stored_size(pos, size, len)?;
                        self.read_at(pos, &mut out[..stored])?;
                        stored
                    } else {
                        let stored = self.stored_size(pos, size, len)?;
                        self.with_stored_bytes(pos, stored, |raw| {
                            decompress(self.superblock.compressor, raw, out)
                                .map_err(|e| self.corrupt(pos, format!("data block: {e}")))
                        })?
                    };
                    if n != len {
                        return Err(self
                            .corrupt(pos, format!("data block holds {n} bytes, expected {len}")));
                    }
                    Ok(((), n as u64))
                })?;
        Ok(match found {
            Cached::Held(block) => {
                self.caches.data.remove(&key);
                Some(block)
            }
            Cached::Elsewhere(()) => None,
        })
    }

    /// Reads the `stored` bytes of the block at `pos` into this thread's buffer and hands them
    /// to `use_bytes`: no allocation, zeroing or copy per block once the buffer has grown to a
    /// block. `use_bytes` must not read another block this way (the buffer is borrowed).
    fn with_stored_bytes<T>(
        &self,
        pos: u64,
        stored: usize,
        use_bytes: impl FnOnce(&[u8]) -> Result<T>,
    ) -> Result<T> {
        SCRATCH.with(|scratch| {
            let raw = &mut scratch.borrow_mut().stored;
            if raw.len() < stored {
                raw.resize(stored, 0);
            }
            let raw = &mut raw[..stored];
            self.read_at(pos, raw)?;
            use_bytes(raw)
        })
    }

    /// The size in the image of the data block at `pos`, checked: an uncompressed block holds
    /// at most `max_len` bytes, and no block is stored in much more than a block.
    fn stored_size(&self, pos: u64, size: DataBlockSize, max_len: usize) -> Result<usize> {
        let stored = size.stored_size as usize;
        if !size.compressed && stored > max_len {
            return Err(self.corrupt(
                pos,
                format!("uncompressed block of {stored} bytes exceeds {max_len}"),
            ));
        }
        if stored > self.superblock.block_size as usize + 4096 {
            return Err(self.corrupt(
                pos,
                format!("data block stored in {stored} bytes, more than a block"),
            ));
        }
        Ok(stored)
    }

    /// The stored (possibly compressed) bytes of the data block at `pos`, through the compressed
    /// tier when it has a budget.
    fn stored_block(&self, pos: u64, size: DataBlockSize, max_len: usize) -> Result<Arc<[u8]>> {
        let stored = self.stored_size(pos, size, max_len)?;
        let read = || {
            let mut raw = vec![0u8; stored];
            self.read_at(pos, &mut raw)?;
            Ok::<Arc<[u8]>, Error>(raw.into())
        };
        // A disabled compressed tier is not consulted (nor counted): reads go straight to the
        // image.
        if self.caches.compressed.is_enabled() {
            let key = self.key(pos);
            self.caches
                .compressed
                .get_or_load(key, Some(&self.counters.compressed), read)
        } else {
            read()
        }
    }

    /// Decompresses `raw` (the block at `pos`) into `out`, which ends up holding exactly the
    /// decompressed bytes; at most `max_len` of them.
    fn decompress_block(
        &self,
        pos: u64,
        raw: &[u8],
        max_len: usize,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let n = self.decompress_into(pos, raw, max_len, out)?;
        out.truncate(n);
        Ok(())
    }

    /// Decompresses `raw` (the block at `pos`) into the start of `out`, grown to `max_len` if it
    /// is shorter (zero-filling only what it grows by); returns the bytes decompressed.
    fn decompress_into(
        &self,
        pos: u64,
        raw: &[u8],
        max_len: usize,
        out: &mut Vec<u8>,
    ) -> Result<usize> {
        if out.len() < max_len {
            out.resize(max_len, 0);
        }
        decompress(self.superblock.compressor, raw, &mut out[..max_len])
            .map_err(|e| self.corrupt(pos, format!("data block: {e}")))
    }
}

/// Buffers each thread reuses to read blocks whose stored bytes are not kept. They live as
/// long as the thread and grow to a block at most.
#[derive(Default)]
struct Scratch {
    /// A block's stored bytes.
    stored: Vec<u8>,
    /// A block decompressed for the data cache, before it is copied there.
    decompressed: Vec<u8>,
}

thread_local! {
    /// Data blocks this thread loaded into the data cache: read-ahead tells by it whether its
    /// job decompressed a block or found it cached.
    static LOADS_HERE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// Data blocks the calling thread has loaded into the data cache so far.
pub(crate) fn loads_on_this_thread() -> u64 {
    LOADS_HERE.with(|n| n.get())
}
