//! A cursor over a metadata stream (the inode table, the directory table, a lookup table):
//! reads bytes across block boundaries, each block fetched through the metadata cache.

use super::{ImageInner, MetadataBlock};
use crate::error::Result;
use crate::format::MetadataRef;

/// Reads a metadata stream from a position on.
pub(crate) struct MetadataCursor<'a> {
    image: &'a ImageInner,
    table_start: u64,
    block_pos: u64,
    offset: usize,
    block: MetadataBlock,
}

impl<'a> MetadataCursor<'a> {
    /// A cursor at `at` in the stream whose blocks are counted from image position `table_start`.
    pub(crate) fn new(image: &'a ImageInner, table_start: u64, at: MetadataRef) -> Result<Self> {
        Self::reusing(image, table_start, at, None)
    }

    /// Like [`MetadataCursor::new`], but takes the block from `last` (a block an earlier cursor
    /// ended on, see [`MetadataCursor::into_last`]) when it is the one needed, sparing a cache
    /// lookup: consecutive inodes of a directory usually share a block.
    pub(crate) fn reusing(
        image: &'a ImageInner,
        table_start: u64,
        at: MetadataRef,
        last: Option<(u64, MetadataBlock)>,
    ) -> Result<Self> {
        let block_pos = table_start
            .checked_add(at.block)
            .ok_or_else(|| image.corrupt(table_start, "metadata reference overflows"))?;
        let block = match last {
            Some((pos, block)) if pos == block_pos => block,
            _ => image.metadata_block(block_pos)?,
        };
        let offset = at.offset as usize;
        if offset > block.data.len() {
            return Err(image.corrupt(
                block_pos,
                format!(
                    "offset {offset} is past the end of a {}-byte metadata block",
                    block.data.len()
                ),
            ));
        }
        Ok(MetadataCursor {
            image,
            table_start,
            block_pos,
            offset,
            block,
        })
    }

    /// Where the cursor is, as a reference into its stream.
    pub(crate) fn position(&self) -> MetadataRef {
        MetadataRef {
            block: self.block_pos - self.table_start,
            offset: self.offset as u16,
        }
    }

    /// The current block and its position, for [`MetadataCursor::reusing`].
    pub(crate) fn into_last(self) -> (u64, MetadataBlock) {
        (self.block_pos, self.block)
    }

    /// Image position of the current block, for error messages.
    pub(crate) fn block_pos(&self) -> u64 {
        self.block_pos
    }

    fn advance_block(&mut self) -> Result<()> {
        self.block_pos = self.block.next;
        self.block = self.image.metadata_block(self.block_pos)?;
        self.offset = 0;
        Ok(())
    }

    /// Fills `out` from the stream.
    pub(crate) fn read_exact(&mut self, mut out: &mut [u8]) -> Result<()> {
        while !out.is_empty() {
            if self.offset == self.block.data.len() {
                self.advance_block()?;
                continue;
            }
            let n = out.len().min(self.block.data.len() - self.offset);
            out[..n].copy_from_slice(&self.block.data[self.offset..self.offset + n]);
            self.offset += n;
            out = &mut out[n..];
        }
        Ok(())
    }

    /// Reads `len` bytes into a new vector. Grows as bytes arrive, so a hostile `len` costs no
    /// more memory than the stream really holds.
    pub(crate) fn read_vec(&mut self, len: usize) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(len.min(64 * 1024));
        let mut chunk = [0u8; 4096];
        let mut left = len;
        while left > 0 {
            let n = left.min(chunk.len());
            self.read_exact(&mut chunk[..n])?;
            out.extend_from_slice(&chunk[..n]);
            left -= n;
        }
        Ok(out)
    }

    /// Reads a little-endian u32.
    pub(crate) fn u32(&mut self) -> Result<u32> {
        let mut b = [0u8; 4];
        self.read_exact(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }
}
