//! Inodes: a common 16-byte header, a fixed body per type, then a variable tail (a file's block
//! list, a symlink's target, an extended directory's index).
//!
//! Parsing is split by those parts because an inode may straddle metadata blocks: the image layer
//! reads the header, asks [`body_size`] how much follows, then reads the tail it needs.

use super::{ByteReader, FormatError, MetadataRef};

/// Size of the header common to every inode.
pub const HEADER_SIZE: usize = 16;

/// Longest symlink target accepted. The kernel refuses targets longer than a page; this is
/// lenient but keeps a hostile size from becoming a huge allocation.
pub const MAX_SYMLINK_TARGET: u32 = 65_536;

/// "No fragment" in a file inode's fragment index.
pub const NO_FRAGMENT: u32 = u32::MAX;

/// "No xattrs" in an extended inode's xattr index.
pub const NO_XATTR: u32 = u32::MAX;

/// The kind of object an inode describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// A directory.
    Directory,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
    /// A block device node.
    BlockDevice,
    /// A character device node.
    CharDevice,
    /// A named pipe.
    Fifo,
    /// A Unix socket.
    Socket,
}

impl FileKind {
    /// The `S_IFMT` bits of `st_mode` for this kind.
    pub fn mode_bits(&self) -> u32 {
        match self {
            FileKind::Directory => 0o040000,
            FileKind::File => 0o100000,
            FileKind::Symlink => 0o120000,
            FileKind::BlockDevice => 0o060000,
            FileKind::CharDevice => 0o020000,
            FileKind::Fifo => 0o010000,
            FileKind::Socket => 0o140000,
        }
    }

    /// Decodes the basic type number (1..=7) used by directory entries.
    pub fn from_basic_type(t: u16) -> Result<Self, FormatError> {
        Ok(match t {
            1 => FileKind::Directory,
            2 => FileKind::File,
            3 => FileKind::Symlink,
            4 => FileKind::BlockDevice,
            5 => FileKind::CharDevice,
            6 => FileKind::Fifo,
            7 => FileKind::Socket,
            other => return Err(FormatError::invalid(format!("bad inode type {other}"))),
        })
    }
}

/// An inode type number (1..=14): a kind and whether the extended layout is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InodeType {
    /// What the inode is.
    pub kind: FileKind,
    /// Whether the extended layout (larger fields, xattr index) is used.
    pub extended: bool,
}

impl InodeType {
    /// Decodes an inode header's type number.
    pub fn from_raw(t: u16) -> Result<Self, FormatError> {
        let (base, extended) = if t > 7 {
            (t.wrapping_sub(7), true)
        } else {
            (t, false)
        };
        Ok(InodeType {
            kind: FileKind::from_basic_type(base)
                .map_err(|_| FormatError::invalid(format!("bad inode type {t}")))?,
            extended,
        })
    }
}

/// The header every inode starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InodeHeader {
    /// Type and layout.
    pub inode_type: InodeType,
    /// Permission bits (the low 12 bits of st_mode).
    pub permissions: u16,
    /// Index of the owner in the id table.
    pub uid_index: u16,
    /// Index of the group in the id table.
    pub gid_index: u16,
    /// Modification time, seconds since the epoch.
    pub mtime: u32,
    /// The inode number (1..=inode_count).
    pub inode_number: u32,
}

impl InodeHeader {
    /// Parses the 16-byte header.
    pub fn parse(buf: &[u8]) -> Result<Self, FormatError> {
        let mut r = ByteReader::new(buf);
        let inode_type = InodeType::from_raw(r.u16()?)?;
        Ok(InodeHeader {
            inode_type,
            permissions: r.u16()? & 0o7777,
            uid_index: r.u16()?,
            gid_index: r.u16()?,
            mtime: r.u32()?,
            inode_number: r.u32()?,
        })
    }
}

/// Bytes of the fixed body that follows the header of an inode of type `t`.
pub fn body_size(t: InodeType) -> usize {
    match (t.kind, t.extended) {
        (FileKind::Directory, false) => 16,
        (FileKind::Directory, true) => 24,
        (FileKind::File, false) => 16,
        (FileKind::File, true) => 40,
        (FileKind::Symlink, _) => 8,
        (FileKind::BlockDevice | FileKind::CharDevice, false) => 8,
        (FileKind::BlockDevice | FileKind::CharDevice, true) => 12,
        (FileKind::Fifo | FileKind::Socket, false) => 4,
        (FileKind::Fifo | FileKind::Socket, true) => 8,
    }
}

/// The fixed body of an inode, by type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InodeBody {
    /// A directory.
    Directory(DirectoryBody),
    /// A regular file; its block list follows.
    File(FileBody),
    /// A symlink; its target (and, if extended, an xattr index) follows.
    Symlink {
        /// Number of hard links.
        link_count: u32,
        /// Length of the target that follows.
        target_size: u32,
    },
    /// A block or character device.
    Device {
        /// Number of hard links.
        link_count: u32,
        /// Device number in the kernel's old encoding (see [`device_major_minor`]).
        device: u32,
        /// Xattr index or [`NO_XATTR`].
        xattr_index: u32,
    },
    /// A fifo or socket.
    Ipc {
        /// Number of hard links.
        link_count: u32,
        /// Xattr index or [`NO_XATTR`].
        xattr_index: u32,
    },
}

/// A directory inode's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectoryBody {
    /// Number of hard links (2 + subdirectories).
    pub link_count: u32,
    /// Size of the listing plus 3 (the size stat reports).
    pub file_size: u32,
    /// Start of the listing: metadata block relative to the directory table, and offset in it.
    pub listing: MetadataRef,
    /// Inode number of the parent directory.
    pub parent_inode: u32,
    /// Number of directory index entries that follow an extended inode.
    pub index_count: u16,
    /// Xattr index or [`NO_XATTR`].
    pub xattr_index: u32,
}

/// A regular file inode's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileBody {
    /// Position of the first data block, relative to the image start.
    pub blocks_start: u64,
    /// File size in bytes.
    pub file_size: u64,
    /// Bytes saved by sparse blocks (extended inodes only).
    pub sparse: u64,
    /// Number of hard links.
    pub link_count: u32,
    /// Fragment holding the tail end, or [`NO_FRAGMENT`].
    pub fragment_index: u32,
    /// Offset of the tail end in its fragment block.
    pub fragment_offset: u32,
    /// Xattr index or [`NO_XATTR`].
    pub xattr_index: u32,
}

impl FileBody {
    /// Whether the tail end lives in a fragment.
    pub fn has_fragment(&self) -> bool {
        self.fragment_index != NO_FRAGMENT
    }

    /// Number of full data blocks in the block list (the tail may be in a fragment instead).
    pub fn block_count(&self, block_size: u32) -> u64 {
        if self.has_fragment() {
            self.file_size / block_size as u64
        } else {
            self.file_size.div_ceil(block_size as u64)
        }
    }
}

/// Parses the fixed body of an inode of type `t` from `buf` (which holds at least
/// [`body_size`]`(t)` bytes).
pub fn parse_body(t: InodeType, buf: &[u8]) -> Result<InodeBody, FormatError> {
    let mut r = ByteReader::new(buf);
    Ok(match (t.kind, t.extended) {
        (FileKind::Directory, false) => {
            let block = r.u32()? as u64;
            let link_count = r.u32()?;
            let file_size = r.u16()? as u32;
            let offset = r.u16()?;
            let parent_inode = r.u32()?;
            InodeBody::Directory(DirectoryBody {
                link_count,
                file_size,
                listing: MetadataRef { block, offset },
                parent_inode,
                index_count: 0,
                xattr_index: NO_XATTR,
            })
        }
        (FileKind::Directory, true) => {
            let link_count = r.u32()?;
            let file_size = r.u32()?;
            let block = r.u32()? as u64;
            let parent_inode = r.u32()?;
            let index_count = r.u16()?;
            let offset = r.u16()?;
            let xattr_index = r.u32()?;
            InodeBody::Directory(DirectoryBody {
                link_count,
                file_size,
                listing: MetadataRef { block, offset },
                parent_inode,
                index_count,
                xattr_index,
            })
        }
        (FileKind::File, false) => InodeBody::File(FileBody {
            blocks_start: r.u32()? as u64,
            fragment_index: r.u32()?,
            fragment_offset: r.u32()?,
            file_size: r.u32()? as u64,
            sparse: 0,
            link_count: 1,
            xattr_index: NO_XATTR,
        }),
        (FileKind::File, true) => InodeBody::File(FileBody {
            blocks_start: r.u64()?,
            file_size: r.u64()?,
            sparse: r.u64()?,
            link_count: r.u32()?,
            fragment_index: r.u32()?,
            fragment_offset: r.u32()?,
            xattr_index: r.u32()?,
        }),
        (FileKind::Symlink, _) => {
            let link_count = r.u32()?;
            let target_size = r.u32()?;
            if target_size > MAX_SYMLINK_TARGET {
                return Err(FormatError::invalid(format!(
                    "symlink target of {target_size} bytes (at most {MAX_SYMLINK_TARGET})"
                )));
            }
            InodeBody::Symlink {
                link_count,
                target_size,
            }
        }
        (FileKind::BlockDevice | FileKind::CharDevice, extended) => InodeBody::Device {
            link_count: r.u32()?,
            device: r.u32()?,
            xattr_index: if extended { r.u32()? } else { NO_XATTR },
        },
        (FileKind::Fifo | FileKind::Socket, extended) => InodeBody::Ipc {
            link_count: r.u32()?,
            xattr_index: if extended { r.u32()? } else { NO_XATTR },
        },
    })
}

/// Splits a device number in the encoding squashfs stores (the kernel's old `new_encode_dev`)
/// into major and minor.
pub fn device_major_minor(dev: u32) -> (u32, u32) {
    let major = (dev >> 8) & 0xfff;
    let minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
    (major, minor)
}

/// One entry of an extended directory's index: where a run of the listing starts and the first
/// name in it, so that lookup can skip the runs before the name it wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirIndexEntry {
    /// Byte offset of the run in the (decompressed) listing.
    pub listing_offset: u32,
    /// Metadata block of the run, relative to the directory table.
    pub block: u32,
    /// First name of the run.
    pub name: Vec<u8>,
}

/// Size of the fixed part of a directory index entry.
pub const DIR_INDEX_FIXED_SIZE: usize = 12;

/// Parses the fixed part of a directory index entry; returns the entry without its name and the
/// length of the name that follows.
pub fn parse_dir_index_fixed(buf: &[u8]) -> Result<(DirIndexEntry, usize), FormatError> {
    let mut r = ByteReader::new(buf);
    let listing_offset = r.u32()?;
    let block = r.u32()?;
    let name_size = r.u32()?;
    if name_size > 255 {
        return Err(FormatError::invalid(format!(
            "directory index name of {} bytes",
            name_size as u64 + 1
        )));
    }
    Ok((
        DirIndexEntry {
            listing_offset,
            block,
            name: Vec::new(),
        },
        name_size as usize + 1,
    ))
}
