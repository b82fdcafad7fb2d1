//! One read policy for a reader whose own page cache keeps what it is given: the kernel's,
//! behind squashd's kernel path (EROFS caches what it reads from the blob). Which blocks go
//! through the data cache and which stream past it, and when read-ahead is asked for, are
//! decided here, by [`FileReader::read_into`], not by whoever serves the reads.
//!
//! - A block read whole is decompressed into a per-thread buffer, not through the data cache:
//!   the reader's page cache keeps it, and caching it here too would hold it twice.
//! - A block read in part goes through the data cache: the reader keeps only the part it
//!   asked for, and the rest will be asked for soon (by the reader, or by a fill of the block,
//!   [`ReadFor::Fill`]). The caller hears of each such block.
//! - What the cache already has (a tail end's fragment block, which many small files share, or
//!   a block read ahead) is lent from it either way. So is a block that read-ahead was asked
//!   for: it may be loading into the cache right now, and the cache waits for that load where
//!   the per-thread buffer would decompress the block a second time.
//! - A read that continues the previous one is a stream: the blocks after it are queued for
//!   read-ahead ([`ReadAheadPool::on_read`], which decides whether the stream has earned it)
//!   before this one decompresses, so both run at once.

use crate::read_ahead::{ReadAheadPool, ReadState};
use crate::{Chunk, ChunkRead, FileReader, Result};

/// Who a read is for.
#[derive(Debug, Clone, Copy)]
pub enum ReadFor<'a> {
    /// A reader of the file, whose reads are followed in `state`: a read continuing the
    /// previous one gets the blocks after it decompressed ahead by `read_ahead`.
    Reader {
        /// The file's read-ahead pool.
        read_ahead: &'a ReadAheadPool,
        /// Where the file's reading stands.
        state: &'a ReadState,
    },
    /// The rest of a block that another read took part of: from the data cache, where that
    /// read left it. Neither a seek nor a stream, it leaves the reading state alone.
    Fill,
}

/// What [`FileReader::read_into`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadInto {
    /// The read continued a stream (the previous read ended about where it starts); false for
    /// a seek, and for a fill.
    pub streaming: bool,
}

thread_local! {
    /// Where a thread decompresses a block it copies from without caching it.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl FileReader {
    /// Fills `out` with the file's bytes from `offset` (zeros past what the image holds), for
    /// a reader whose page cache keeps them, by the policy of this module. `part` hears of each
    /// block the read took only part of: its index and its bytes, from the data cache.
    pub fn read_into(
        &self,
        offset: u64,
        out: &mut [u8],
        read_for: ReadFor<'_>,
        part: &mut dyn FnMut(u64, &Chunk),
    ) -> Result<ReadInto> {
        // Past the end of the file: zeros, as past a short read.
        let len = out.len().min(self.size().saturating_sub(offset) as usize);
        let (out, past_end) = out.split_at_mut(len);
        past_end.fill(0);
        let (queued_until, streaming) = match read_for {
            ReadFor::Reader { read_ahead, state } => {
                // What earlier reads queued, asked before this read is noted (which may queue
                // more): those blocks may be loading into the cache now.
                let queued_until = state.queued_until();
                let streaming = read_ahead.on_read(state, self, offset, out.len() as u64);
                (queued_until, streaming)
            }
            ReadFor::Fill => (u64::MAX, false),
        };
        let again = matches!(read_for, ReadFor::Fill);
        self.copy_into(offset, out, queued_until, again, part)?;
        Ok(ReadInto { streaming })
    }

    /// Fills `out` from `offset`: blocks below `queued_until` and blocks read in part through
    /// the data cache, the others through the per-thread buffer. With `again` (a fill's read),
    /// a block the cache holds is not counted as another use ([`FileReader::chunk_again`]).
    fn copy_into(
        &self,
        offset: u64,
        out: &mut [u8],
        queued_until: u64,
        again: bool,
        part: &mut dyn FnMut(u64, &Chunk),
    ) -> Result<()> {
        let bs = u64::from(self.block_size().max(1));
        let mut pos = offset;
        let mut done = 0;
        while done < out.len() {
            let index = pos / bs;
            let within = (pos % bs) as usize;
            let dest = &mut out[done..];
            let whole_block =
                within == 0 && dest.len() as u64 >= bs.min(self.size().saturating_sub(pos));
            if !whole_block || index < queued_until {
                let chunk = if again {
                    self.chunk_again(index)?
                } else {
                    self.chunk(index)?
                };
                let n = dest.len().min(chunk.len().saturating_sub(within));
                if n == 0 {
                    dest.fill(0);
                    break;
                }
                if chunk.is_hole() {
                    dest[..n].fill(0);
                } else {
                    dest[..n].copy_from_slice(&chunk.bytes()[within..within + n]);
                    if n < chunk.len() {
                        part(index, &chunk);
                    }
                }
                done += n;
                pos += n as u64;
                continue;
            }
            let n = SCRATCH.with_borrow_mut(|scratch| -> Result<usize> {
                let bytes: &[u8] = match self.read_chunk_into(index, scratch)? {
                    ChunkRead::Hole(len) => {
                        let n = dest.len().min(len.saturating_sub(within));
                        dest[..n].fill(0);
                        return Ok(n);
                    }
                    ChunkRead::Data => scratch,
                    ChunkRead::Cached(chunk) => {
                        let bytes = chunk.bytes();
                        let n = dest.len().min(bytes.len().saturating_sub(within));
                        dest[..n].copy_from_slice(&bytes[within..within + n]);
                        return Ok(n);
                    }
                };
                let n = dest.len().min(bytes.len().saturating_sub(within));
                dest[..n].copy_from_slice(&bytes[within..within + n]);
                Ok(n)
            })?;
            if n == 0 {
                // The image holds less than the inode's size says: zeros, as past a short read.
                dest.fill(0);
                break;
            }
            done += n;
            pos += n as u64;
        }
        Ok(())
    }
}
