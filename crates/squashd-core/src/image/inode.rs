//! Inodes as the library presents them: resolved owners, sizes and link counts, plus where to
//! find the rest (a file's block list, a directory's listing).

use super::metadata::MetadataCursor;
use super::ImageInner;
use crate::error::Result;
use crate::format::inode::{
    body_size, device_major_minor, parse_body, FileBody, FileKind, InodeBody, InodeHeader,
    HEADER_SIZE, NO_XATTR,
};
use crate::format::MetadataRef;

/// Identifies an inode within its image: stable for the image's life, shared by hard links.
/// It is opaque (it encodes where the inode is stored); get one from [`super::Image::root_id`]
/// or a [`super::DirEntry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InodeId(u64);

impl InodeId {
    pub(crate) fn from_ref(r: MetadataRef) -> Self {
        InodeId(r.packed())
    }

    pub(crate) fn to_ref(self) -> MetadataRef {
        MetadataRef::from_packed(self.0)
    }

    /// The id as a number (at most 48 bits), e.g. to use as a FUSE node id.
    pub fn as_u64(self) -> u64 {
        self.0
    }

    /// The id from [`InodeId::as_u64`]. An arbitrary number gives an id that fails to load
    /// with an error, never a wrong inode of another shape.
    pub fn from_u64(raw: u64) -> Self {
        InodeId(raw)
    }
}

/// Where the type-specific parts of an inode are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InodeDetail {
    Directory {
        listing: MetadataRef,
        file_size: u32,
        index_count: u16,
        index_at: MetadataRef,
    },
    File {
        body: FileBody,
        block_list_at: MetadataRef,
    },
    Symlink {
        target: Box<[u8]>,
    },
    Other,
}

/// An inode: what `stat` shows, and where its contents are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inode {
    /// Its id (shared by hard links).
    pub id: InodeId,
    /// Its inode number (`st_ino`, 1..=inode count).
    pub number: u32,
    /// File type.
    pub kind: FileKind,
    /// Permission bits (`st_mode & 0o7777`).
    pub permissions: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Modification time, seconds since the epoch.
    pub mtime: u32,
    /// Number of hard links (for directories, 2 plus subdirectories).
    pub nlink: u32,
    /// Size: a file's length, a symlink's target length, a directory's listing size as the
    /// kernel reports it.
    pub size: u64,
    /// Device number of a device node, in the encoding squashfs stores (see
    /// [`Inode::device`]).
    pub rdev: u32,
    /// Index into the xattr table, if the inode has extended attributes.
    pub xattr_index: Option<u32>,
    /// Inode number of the parent, for directories.
    pub parent: Option<u32>,
    pub(crate) detail: InodeDetail,
}

impl Inode {
    /// The full `st_mode`: type bits and permissions.
    pub fn mode(&self) -> u32 {
        self.kind.mode_bits() | self.permissions as u32
    }

    /// Whether it is a directory.
    pub fn is_dir(&self) -> bool {
        self.kind == FileKind::Directory
    }

    /// (major, minor) of a device node.
    pub fn device(&self) -> (u32, u32) {
        device_major_minor(self.rdev)
    }

    /// The device number in the Linux `dev_t` encoding (`makedev(major, minor)`).
    pub fn rdev_linux(&self) -> u64 {
        let (major, minor) = self.device();
        let (major, minor) = (major as u64, minor as u64);
        ((major & 0xfffff000) << 32)
            | ((major & 0xfff) << 8)
            | ((minor & 0xffffff00) << 12)
            | (minor & 0xff)
    }

    /// 512-byte blocks the kernel reports in `st_blocks`: the file's size less its holes.
    pub fn blocks_512(&self) -> u64 {
        match &self.detail {
            InodeDetail::File { body, .. } => {
                body.file_size.saturating_sub(body.sparse).div_ceil(512)
            }
            _ => 0,
        }
    }

    /// Bytes of holes in a sparse file (recorded by extended file inodes only).
    pub fn sparse_bytes(&self) -> u64 {
        match &self.detail {
            InodeDetail::File { body, .. } => body.sparse,
            _ => 0,
        }
    }

    /// The target of a symlink.
    pub fn symlink_target(&self) -> Option<&[u8]> {
        match &self.detail {
            InodeDetail::Symlink { target } => Some(target),
            _ => None,
        }
    }
}

fn xattr(index: u32) -> Option<u32> {
    (index != NO_XATTR).then_some(index)
}

/// Reads and decodes the inode `id`.
pub(crate) fn load(image: &ImageInner, id: InodeId) -> Result<Inode> {
    load_reusing(image, id, &mut None)
}

/// Reads and decodes the inode `id`, reusing the metadata block in `last` if the inode is in it,
/// and leaving there the block the inode ended in.
pub(crate) fn load_reusing(
    image: &ImageInner,
    id: InodeId,
    last: &mut Option<(u64, super::MetadataBlock)>,
) -> Result<Inode> {
    let sb = &image.superblock;
    let at = id.to_ref();
    if at.block >= sb.directory_table_start - sb.inode_table_start {
        return Err(image.corrupt(
            sb.inode_table_start,
            format!("inode reference {:#x} is outside the inode table", id.0),
        ));
    }
    let mut cur = MetadataCursor::reusing(image, sb.inode_table_start, at, last.take())?;
    let mut raw = [0u8; 40];
    cur.read_exact(&mut raw[..HEADER_SIZE])?;
    let bad = |cur: &MetadataCursor, e| image.format_error(cur.block_pos(), e);
    let header = InodeHeader::parse(&raw[..HEADER_SIZE]).map_err(|e| bad(&cur, e))?;
    let t = header.inode_type;
    let n = body_size(t);
    cur.read_exact(&mut raw[..n])?;
    let body = parse_body(t, &raw[..n]).map_err(|e| bad(&cur, e))?;
    if header.inode_number == 0 || header.inode_number > sb.inode_count {
        return Err(image.corrupt(
            cur.block_pos(),
            format!(
                "inode number {} outside 1..={}",
                header.inode_number, sb.inode_count
            ),
        ));
    }
    let uid = image.id(header.uid_index)?;
    let gid = image.id(header.gid_index)?;
    let mut inode = Inode {
        id,
        number: header.inode_number,
        kind: t.kind,
        permissions: header.permissions,
        uid,
        gid,
        mtime: header.mtime,
        nlink: 1,
        size: 0,
        rdev: 0,
        xattr_index: None,
        parent: None,
        detail: InodeDetail::Other,
    };
    match body {
        InodeBody::Directory(d) => {
            inode.nlink = d.link_count;
            inode.size = d.file_size as u64;
            inode.xattr_index = xattr(d.xattr_index);
            inode.parent = Some(d.parent_inode);
            inode.detail = InodeDetail::Directory {
                listing: d.listing,
                file_size: d.file_size,
                index_count: d.index_count,
                index_at: cur.position(),
            };
        }
        InodeBody::File(f) => {
            inode.nlink = f.link_count;
            inode.size = f.file_size;
            inode.xattr_index = xattr(f.xattr_index);
            inode.detail = InodeDetail::File {
                block_list_at: cur.position(),
                body: f,
            };
        }
        InodeBody::Symlink {
            link_count,
            target_size,
        } => {
            inode.nlink = link_count;
            inode.size = target_size as u64;
            let target = cur.read_vec(target_size as usize)?;
            if t.extended {
                inode.xattr_index = xattr(cur.u32()?);
            }
            inode.detail = InodeDetail::Symlink {
                target: target.into_boxed_slice(),
            };
        }
        InodeBody::Device {
            link_count,
            device,
            xattr_index,
        } => {
            inode.nlink = link_count;
            inode.rdev = device;
            inode.xattr_index = xattr(xattr_index);
        }
        InodeBody::Ipc {
            link_count,
            xattr_index,
        } => {
            inode.nlink = link_count;
            inode.xattr_index = xattr(xattr_index);
        }
    }
    *last = Some(cur.into_last());
    Ok(inode)
}
