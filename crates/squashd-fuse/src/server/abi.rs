//! The FUSE wire protocol's structures and numbers, as `include/uapi/linux/fuse.h` of Linux 6.18
//! (protocol 7.45) defines them: only what squashd's read-only servers receive and send.
//!
//! Each structure derives zerocopy's traits, so a request is read with `read_from_prefix` (a
//! short message is an error, never a panic) and a reply written with `as_bytes`, without any
//! `unsafe` here. The layouts are those of the C header: `#[repr(C)]`, no implicit padding
//! (zerocopy refuses to derive `IntoBytes` for a struct that has any).

#![allow(missing_docs)] // The fields are the header's; their meaning is documented there.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// The protocol version squashd speaks: 7.40 (the kernel answers in the lower of its own and
/// this). Nothing squashd asks for needs a later minor.
pub const KERNEL_VERSION: u32 = 7;
/// See [`KERNEL_VERSION`].
pub const KERNEL_MINOR_VERSION: u32 = 40;

/// The node id of the root directory.
pub const ROOT_ID: u64 = 1;

/// Opcodes (`enum fuse_opcode`).
pub mod opcode {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const SETXATTR: u32 = 21;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const REMOVEXATTR: u32 = 24;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const INTERRUPT: u32 = 36;
    pub const DESTROY: u32 = 38;
    pub const NOTIFY_REPLY: u32 = 41;
    pub const BATCH_FORGET: u32 = 42;
    pub const FALLOCATE: u32 = 43;
    pub const READDIRPLUS: u32 = 44;
    pub const RENAME2: u32 = 45;
    pub const COPY_FILE_RANGE: u32 = 47;
    pub const TMPFILE: u32 = 51;
    pub const COPY_FILE_RANGE_64: u32 = 53;
}

/// A short name of `op` for logs (`opcode-N` for those squashd does not name).
pub fn opcode_name(op: u32) -> String {
    let name = match op {
        opcode::LOOKUP => "lookup",
        opcode::FORGET => "forget",
        opcode::GETATTR => "getattr",
        opcode::READLINK => "readlink",
        opcode::OPEN => "open",
        opcode::READ => "read",
        opcode::STATFS => "statfs",
        opcode::RELEASE => "release",
        opcode::GETXATTR => "getxattr",
        opcode::LISTXATTR => "listxattr",
        opcode::FLUSH => "flush",
        opcode::INIT => "init",
        opcode::OPENDIR => "opendir",
        opcode::READDIR => "readdir",
        opcode::RELEASEDIR => "releasedir",
        opcode::ACCESS => "access",
        opcode::INTERRUPT => "interrupt",
        opcode::DESTROY => "destroy",
        opcode::BATCH_FORGET => "batch_forget",
        opcode::READDIRPLUS => "readdirplus",
        _ => return format!("opcode-{op}"),
    };
    name.to_string()
}

/// Notification codes (`enum fuse_notify_code`), sent in `fuse_out_header.error`.
pub mod notify {
    pub const INVAL_INODE: i32 = 2;
    pub const STORE: i32 = 4;
}

/// INIT flags: `fuse_init_in.flags` in the low 32 bits, `flags2` in the high ones (as the
/// header numbers them since 7.36).
pub mod init_flags {
    pub const ASYNC_READ: u64 = 1 << 0;
    pub const BIG_WRITES: u64 = 1 << 5;
    pub const DO_READDIRPLUS: u64 = 1 << 13;
    pub const READDIRPLUS_AUTO: u64 = 1 << 14;
    pub const ASYNC_DIO: u64 = 1 << 15;
    /// Offered by the kernel: it takes ENOSYS from OPEN as "open without asking".
    pub const NO_OPEN_SUPPORT: u64 = 1 << 17;
    pub const PARALLEL_DIROPS: u64 = 1 << 18;
    pub const MAX_PAGES: u64 = 1 << 22;
    pub const CACHE_SYMLINKS: u64 = 1 << 23;
    pub const NO_OPENDIR_SUPPORT: u64 = 1 << 24;
    /// `flags2` is valid (the kernel and server speak 7.36 or later).
    pub const INIT_EXT: u64 = 1 << 30;
    /// The kernel can carry requests over io_uring (7.42): offered at INIT when the module
    /// parameter `enable_uring` is on. The ring transport's crate defines it; one definition.
    pub const OVER_IO_URING: u64 = squashd_fuse_uring::FUSE_OVER_IO_URING;
}

/// `fuse_getattr_in.getattr_flags`: `fh` is set.
pub const GETATTR_FH: u32 = 1;

/// The header of every request: one definition, the ring transport's, which both transports
/// parse (bounds-checked, native-endian).
pub use squashd_fuse_uring::InHeader;

/// The header of every reply and notification.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct OutHeader {
    pub len: u32,
    pub error: i32,
    pub unique: u64,
}

/// INIT's argument. Kernels before 7.36 send only the first four fields.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct InitIn {
    pub major: u32,
    pub minor: u32,
    pub max_readahead: u32,
    pub flags: u32,
    pub flags2: u32,
    pub unused: [u32; 11],
}

/// The size of [`InitIn`] before `flags2` (protocol 7.35 and earlier).
pub const INIT_IN_COMPAT_SIZE: usize = 16;

/// INIT's answer.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct InitOut {
    pub major: u32,
    pub minor: u32,
    pub max_readahead: u32,
    pub flags: u32,
    pub max_background: u16,
    pub congestion_threshold: u16,
    pub max_write: u32,
    pub time_gran: u32,
    pub max_pages: u16,
    pub map_alignment: u16,
    pub flags2: u32,
    pub max_stack_depth: u32,
    pub request_timeout: u16,
    pub unused: [u16; 11],
}

/// The size of [`InitOut`] a kernel before 7.23 expects.
pub const INIT_OUT_COMPAT_22_SIZE: usize = 24;

/// A node's attributes.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Attr {
    pub ino: u64,
    pub size: u64,
    pub blocks: u64,
    pub atime: u64,
    pub mtime: u64,
    pub ctime: u64,
    pub atimensec: u32,
    pub mtimensec: u32,
    pub ctimensec: u32,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
    pub flags: u32,
}

/// LOOKUP's answer (and each entry of a READDIRPLUS answer).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct EntryOut {
    pub nodeid: u64,
    pub generation: u64,
    pub entry_valid: u64,
    pub attr_valid: u64,
    pub entry_valid_nsec: u32,
    pub attr_valid_nsec: u32,
    pub attr: Attr,
}

/// GETATTR's answer.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct AttrOut {
    pub attr_valid: u64,
    pub attr_valid_nsec: u32,
    pub dummy: u32,
    pub attr: Attr,
}

/// GETATTR's argument.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct GetattrIn {
    pub getattr_flags: u32,
    pub dummy: u32,
    pub fh: u64,
}

/// OPEN's and OPENDIR's argument.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct OpenIn {
    pub flags: u32,
    pub open_flags: u32,
}

/// OPEN's and OPENDIR's answer.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct OpenOut {
    pub fh: u64,
    pub open_flags: u32,
    pub backing_id: i32,
}

/// READ's, READDIR's and READDIRPLUS's argument.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ReadIn {
    pub fh: u64,
    pub offset: u64,
    pub size: u32,
    pub read_flags: u32,
    pub lock_owner: u64,
    pub flags: u32,
    pub padding: u32,
}

/// RELEASE's and RELEASEDIR's argument.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ReleaseIn {
    pub fh: u64,
    pub flags: u32,
    pub release_flags: u32,
    pub lock_owner: u64,
}

/// FLUSH's argument.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct FlushIn {
    pub fh: u64,
    pub unused: u32,
    pub padding: u32,
    pub lock_owner: u64,
}

/// FORGET's argument.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ForgetIn {
    pub nlookup: u64,
}

/// BATCH_FORGET's argument, followed by `count` [`ForgetOne`]s.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct BatchForgetIn {
    pub count: u32,
    pub dummy: u32,
}

/// One node of a BATCH_FORGET.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ForgetOne {
    pub nodeid: u64,
    pub nlookup: u64,
}

/// GETXATTR's argument (followed by the name) and LISTXATTR's.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct GetxattrIn {
    pub size: u32,
    pub padding: u32,
}

/// GETXATTR's and LISTXATTR's answer to a size query.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct GetxattrOut {
    pub size: u32,
    pub padding: u32,
}

/// ACCESS's argument.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct AccessIn {
    pub mask: u32,
    pub padding: u32,
}

/// INTERRUPT's argument.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct InterruptIn {
    pub unique: u64,
}

/// STATFS's answer.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct StatfsOut {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
    pub padding: u32,
    pub spare: [u32; 6],
}

/// The fixed part of a READDIR entry, followed by the name and padding to 8 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Dirent {
    pub ino: u64,
    pub off: u64,
    pub namelen: u32,
    pub typ: u32,
}

/// The fixed part of a READDIRPLUS entry, followed by the name and padding to 8 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct DirentPlus {
    pub entry_out: EntryOut,
    pub dirent: Dirent,
}

/// FUSE_NOTIFY_STORE's argument, followed by the bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NotifyStoreOut {
    pub nodeid: u64,
    pub offset: u64,
    pub size: u32,
    pub padding: u32,
}

/// FUSE_NOTIFY_INVAL_INODE's argument.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NotifyInvalInodeOut {
    pub ino: u64,
    pub off: i64,
    pub len: i64,
}

/// Round a directory entry's length up to the next multiple of 8 (`FUSE_DIRENT_ALIGN`).
pub const fn dirent_align(len: usize) -> usize {
    (len + 7) & !7
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sizes the kernel checks replies and reads requests against.
    #[test]
    fn sizes_match_the_kernel_header() {
        use std::mem::size_of;
        assert_eq!(InHeader::default().to_bytes().len(), 40);
        assert_eq!(size_of::<OutHeader>(), 16);
        assert_eq!(size_of::<InitIn>(), 64);
        assert_eq!(size_of::<InitOut>(), 64);
        assert_eq!(size_of::<Attr>(), 88);
        assert_eq!(size_of::<EntryOut>(), 128);
        assert_eq!(size_of::<AttrOut>(), 104);
        assert_eq!(size_of::<OpenOut>(), 16);
        assert_eq!(size_of::<ReadIn>(), 40);
        assert_eq!(size_of::<ReleaseIn>(), 24);
        assert_eq!(size_of::<FlushIn>(), 24);
        assert_eq!(size_of::<StatfsOut>(), 80);
        assert_eq!(size_of::<Dirent>(), 24);
        assert_eq!(size_of::<DirentPlus>(), 152);
        assert_eq!(size_of::<NotifyStoreOut>(), 24);
        assert_eq!(size_of::<NotifyInvalInodeOut>(), 24);
    }
}
