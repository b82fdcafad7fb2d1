//! Directory listings: runs of entries, each run under a header that gives the metadata block
//! of its inodes and a base inode number. A listing is read as a stream (it can straddle
//! metadata blocks), so this module parses one header or one entry at a time.

use super::inode::FileKind;
use super::{ByteReader, FormatError};

/// Size of a run header.
pub const HEADER_SIZE: usize = 12;
/// Size of an entry before its name.
pub const ENTRY_FIXED_SIZE: usize = 8;
/// The most entries one header may cover.
pub const MAX_RUN: u32 = 256;
/// The longest name an entry may have.
pub const MAX_NAME: usize = 256;

/// The header of a run of entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirHeader {
    /// Number of entries in the run (1..=256).
    pub count: u32,
    /// Metadata block of the run's inodes, relative to the inode table.
    pub inode_block: u32,
    /// Base the entries' inode numbers are relative to.
    pub base_inode: u32,
}

impl DirHeader {
    /// Parses a 12-byte run header.
    pub fn parse(buf: &[u8]) -> Result<Self, FormatError> {
        let mut r = ByteReader::new(buf);
        let count = r.u32()?;
        if count >= MAX_RUN {
            return Err(FormatError::invalid(format!(
                "directory header with {} entries (at most 256)",
                count as u64 + 1
            )));
        }
        Ok(DirHeader {
            count: count + 1,
            inode_block: r.u32()?,
            base_inode: r.u32()?,
        })
    }
}

/// The fixed part of an entry; its name (`name_len` bytes) follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirEntryFixed {
    /// Offset of the entry's inode in its metadata block.
    pub inode_offset: u16,
    /// Inode number relative to the header's base.
    pub inode_delta: i16,
    /// The entry's kind.
    pub kind: FileKind,
    /// Length of the name that follows (1..=256).
    pub name_len: usize,
}

impl DirEntryFixed {
    /// Parses the 8-byte fixed part of an entry.
    pub fn parse(buf: &[u8]) -> Result<Self, FormatError> {
        let mut r = ByteReader::new(buf);
        let inode_offset = r.u16()?;
        let inode_delta = r.u16()? as i16;
        let kind = FileKind::from_basic_type(r.u16()?)?;
        let name_len = r.u16()? as usize + 1;
        if name_len > MAX_NAME {
            return Err(FormatError::invalid(format!(
                "directory entry name of {name_len} bytes"
            )));
        }
        Ok(DirEntryFixed {
            inode_offset,
            inode_delta,
            kind,
            name_len,
        })
    }

    /// The entry's inode number given its header.
    pub fn inode_number(&self, header: &DirHeader) -> u32 {
        header
            .base_inode
            .wrapping_add(self.inode_delta as i32 as u32)
    }
}

/// Checks an entry name: no '/', no NUL, not "." or "..". Names are otherwise any bytes.
pub fn check_name(name: &[u8]) -> Result<(), FormatError> {
    if name.contains(&b'/') || name.contains(&0) || name == b"." || name == b".." {
        return Err(FormatError::invalid(format!(
            "directory entry with forbidden name {:?}",
            String::from_utf8_lossy(name)
        )));
    }
    Ok(())
}
