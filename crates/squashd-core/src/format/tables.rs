//! Entries of the lookup tables: fragments, ids, exports, and the xattr id table.

use super::{ByteReader, DataBlockSize, FormatError, MetadataRef};

/// Size of a fragment table entry.
pub const FRAGMENT_ENTRY_SIZE: usize = 16;
/// Size of an id table entry.
pub const ID_ENTRY_SIZE: usize = 4;
/// Size of an export table entry.
pub const EXPORT_ENTRY_SIZE: usize = 8;
/// Size of an xattr id table entry.
pub const XATTR_ID_ENTRY_SIZE: usize = 16;
/// Size of the header in front of the xattr id table's index.
pub const XATTR_ID_HEADER_SIZE: usize = 16;

/// Where a fragment block lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentEntry {
    /// Position of the block, relative to the image start.
    pub start: u64,
    /// Its size word.
    pub size: DataBlockSize,
}

impl FragmentEntry {
    /// Parses a 16-byte fragment entry.
    pub fn parse(buf: &[u8]) -> Result<Self, FormatError> {
        let mut r = ByteReader::new(buf);
        let start = r.u64()?;
        let size = DataBlockSize::parse(r.u32()?);
        Ok(FragmentEntry { start, size })
    }
}

/// The header of the xattr id table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XattrIdHeader {
    /// Start of the key/value metadata stream, relative to the image start.
    pub kv_table_start: u64,
    /// Number of xattr id entries.
    pub count: u32,
}

impl XattrIdHeader {
    /// Parses the 16-byte header.
    pub fn parse(buf: &[u8]) -> Result<Self, FormatError> {
        let mut r = ByteReader::new(buf);
        Ok(XattrIdHeader {
            kv_table_start: r.u64()?,
            count: r.u32()?,
        })
    }
}

/// One xattr id entry: where an inode's key/value pairs are and how many there are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XattrIdEntry {
    /// Reference into the key/value stream.
    pub kv: MetadataRef,
    /// Number of key/value pairs.
    pub count: u32,
    /// Total size of the pairs (names and values) as the kernel reports for listxattr.
    pub size: u32,
}

impl XattrIdEntry {
    /// Parses a 16-byte xattr id entry.
    pub fn parse(buf: &[u8]) -> Result<Self, FormatError> {
        let mut r = ByteReader::new(buf);
        Ok(XattrIdEntry {
            kv: MetadataRef::from_packed(r.u64()?),
            count: r.u32()?,
            size: r.u32()?,
        })
    }
}

/// Parses a table index: `count` little-endian u64 positions of metadata blocks.
pub fn parse_index(buf: &[u8], count: usize) -> Result<Vec<u64>, FormatError> {
    let mut r = ByteReader::new(buf);
    (0..count).map(|_| r.u64()).collect()
}
