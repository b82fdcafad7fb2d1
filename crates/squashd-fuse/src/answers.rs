//! The answers of the file system's operations, as plain values: what the adapter turns into
//! FUSE replies, and what the in-process tests check.

use fuser::{FileAttr, FileHandle, FopenFlags, Generation};
use std::time::Duration;

/// The answer to a lookup: an entry the kernel may keep for `ttl`.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    /// The entry's attributes; `attr.ino` is its node. Node 0 is a negative entry: the name
    /// does not exist, and the kernel keeps that answer like any other.
    pub attr: FileAttr,
    /// How long the kernel may keep the entry and its attributes.
    pub ttl: Duration,
    /// The node's generation.
    pub generation: Generation,
}

impl Entry {
    /// Whether this is a negative entry (the name does not exist).
    pub fn is_negative(&self) -> bool {
        self.attr.ino.0 == 0
    }
}

/// The answer to a getattr: attributes the kernel may keep for `ttl`.
#[derive(Debug, Clone, Copy)]
pub struct Attr {
    /// The attributes.
    pub attr: FileAttr,
    /// How long the kernel may keep them.
    pub ttl: Duration,
}

/// The answer to an open or opendir: a handle, and what the kernel may keep of the file.
#[derive(Debug, Clone, Copy)]
pub struct Opened {
    /// The handle the kernel passes back on each request about this open.
    pub fh: FileHandle,
    /// The kernel's cache flags for this open.
    pub flags: FopenFlags,
}

/// The answer to a getxattr or listxattr, by the size the caller's buffer has.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum XattrReply {
    /// The caller asked with size 0: the size a buffer needs.
    Size(u32),
    /// The value (or the NUL-terminated list of names), which fits the caller's buffer.
    Data(Vec<u8>),
}

/// The answer to a statfs, as `statvfs(3)` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFs {
    /// Size of the file system in `frsize` units.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Free blocks for unprivileged users.
    pub bavail: u64,
    /// Inodes.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Preferred I/O size.
    pub bsize: u32,
    /// Longest name.
    pub namelen: u32,
    /// Fragment size: the unit of `blocks`.
    pub frsize: u32,
}
