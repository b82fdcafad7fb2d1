//! squashd-kernel: SquashFS images served through the kernel's EROFS.
//!
//! A walk of a FUSE mount costs round trips to the daemon for every directory; on the kernel
//! path it costs none. squashd translates an image's metadata into an EROFS metadata image,
//! exposes the image's file data as one virtual, uncompressed, block-aligned blob file on its
//! own FUSE mount ([`blobfs`], served by squashd-fuse's session like the FUSE path), and
//! mounts the kernel's EROFS on the two ([`erofs_mount`], [`kernel_mount`]).
//! Walks, lookups, stats, readlink and xattrs then never leave the kernel; only data reads that
//! miss EROFS's page cache reach squashd, which decompresses them through its caches. A random
//! read of part of a block brings the whole block into EROFS's page cache ([`block_fill`]), so
//! that the block's other pages never reach squashd.

#![deny(missing_docs)]

pub mod blob;
mod blob_files;
pub mod blob_sweep;
pub mod blobfs;
pub mod block_fill;
pub mod meta_file;
pub mod page_cache;

pub use blob::{Blob, BlobFile, BlobLayout, BlobRead, PartRead, ReadAhead, BLOB_BLOCK};
pub use blobfs::{BlobData, BlobFiles, BlobFs, BlobFsContent};
pub use meta_file::MetaFile;
pub mod translate;

pub use translate::{translate, OwnerOverride, TranslateError, Translation};
pub mod erofs_mount;

pub use erofs_mount::{mount_erofs, BlobMount};
pub mod kernel_mount;

pub use kernel_mount::{
    BlobReadStats, KernelError, KernelMount, KernelMountOptions, KernelPath, Prepared,
    TranslationStats,
};
