//! A pure EROFS metadata-image writer: a tree description in, image bytes out.
//!
//! The image holds every inode, directory, symlink and xattr of the tree; regular files are
//! chunk-based inodes whose chunks point into one extra device, the "blob" (device 1 of the
//! device table), which holds their bytes uncompressed and block-aligned. The kernel mounts the
//! pair with `mount("IMAGE", dir, "erofs", MS_RDONLY, "device=BLOB")` (mount(2) on the image
//! file itself: Linux 6.12+ mounts files directly, and then also accepts a file as the extra
//! device). The crate knows nothing of where the tree comes from or who serves the blob.
//!
//! What is written, and why:
//! - Compact (32-byte) inodes wherever the values fit, extended (64-byte) ones otherwise (uid or
//!   gid over 65535, size over 4 GiB, nlink over 65535, or an mtime a compact inode cannot
//!   carry); see [`CompactMtime`] for how mtimes stay exact.
//! - Directories and symlinks keep their last partial block inline after the inode when inode,
//!   xattrs and tail fit in one block (FLAT_INLINE), else whole blocks (FLAT_PLAIN). Dirents are
//!   sorted by name bytes across the directory, "." and ".." included.
//! - Xattrs used by two or more inodes are stored once in the shared area (at the end of the
//!   image); the rest inline. Names map to EROFS's short prefix indexes (user., trusted.,
//!   security., and the two POSIX ACL names); any other name is refused.
//! - Regular files are chunk-based inodes: 8-byte chunk indexes naming device 1 (the blob), or
//!   the null address for holes. Empty files have no chunks.
//! - Layout, directories first: every directory's inode, inline entries and dirent blocks in
//!   depth-first pre-order, then all other inodes grouped by parent in the same order. That is
//!   the order `find` reads, and `find` (which has `d_type`) never reads a file's inode.
//! - The superblock checksum (CRC-32C) is claimed and filled in.
//! - The image streams out front to back; memory is proportional to the tree.
//!
//! Everything stays within what erofs-utils 1.5's `fsck.erofs --device=BLOB` checks: no long
//! xattr prefixes, no xattr name filter, no compression, 4 KiB blocks.
//!
//! # Example
//! ```
//! use squashd_erofs::{write, FileData, Kind, Metadata, Rdev, Timestamp, Tree, WriteOptions};
//!
//! let meta = |mode| Metadata { mode, uid: 0, gid: 0, mtime: Timestamp { sec: 1_700_000_000, nsec: 0 } };
//! let mut tree = Tree::new(meta(0o755))?;
//! let root = tree.root();
//! let bin = tree.add(root, b"bin", meta(0o755), Kind::Directory)?;
//! // 10000 bytes of data at blob blocks 0..3.
//! let ls = tree.add(bin, b"ls", meta(0o755), Kind::File(FileData::Contiguous { size: 10_000, start_block: 0 }))?;
//! tree.set_xattr(ls, b"security.capability", &[1, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])?;
//! tree.link(root, b"ls-again", ls)?; // a hard link: nlink 2
//! tree.add(root, b"sh", meta(0o777), Kind::Symlink(b"bin/ls".to_vec()))?;
//! tree.add(root, b"null", meta(0o666), Kind::CharDevice(Rdev::new(1, 3)?))?;
//!
//! let opts = WriteOptions { blob_blocks: 3, ..WriteOptions::default() };
//! let image = write(&tree, &opts)?;
//! assert_eq!(image.len() % 4096, 0);
//! assert_eq!(&image[1024..1028], &0xE0F5_E1E2u32.to_le_bytes());
//! # Ok::<(), squashd_erofs::Error>(())
//! ```

mod dir;
mod error;
mod inode;
mod layout;
mod plan;
mod sink;
mod superblock;
mod tree;
mod writer;
mod xattr;

pub use error::{Error, Result};
pub use tree::{Chunk, FileData, Kind, Metadata, NodeId, Rdev, Timestamp, Tree};
pub use writer::{
    write, write_to, write_to_with_nids, write_with_nids, CompactMtime, ImageInfo, WriteOptions,
};
