//! Answers as the kernel reads them: a header and a body, built from the file-system layer's
//! plain values ([`crate::fs::Entry`], [`crate::fs::Attr`], `fuser::FileAttr`...), and the
//! notifications squashd sends (FUSE_NOTIFY_STORE, FUSE_NOTIFY_INVAL_INODE).

use super::abi::{self, OutHeader};
use crate::answers::{Attr, Entry, Opened, StatFs};
use crate::dirs::{DirectoryEntry, DirectoryEntryPlus, DirectoryPlusReplier, DirectoryReplier};
use crate::listings::ListingTurn;
use fuser::{FileAttr, FileType};
use std::io::IoSlice;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use zerocopy::IntoBytes;

/// The bytes of a read, and what to do once they reached the kernel.
pub trait ReadData {
    /// The bytes to answer with.
    fn bytes(&self) -> &[u8];
    /// Called once the answer is sent (or given up): e.g. offer the rest of the block to the
    /// kernel's page cache, which a store can fill only after this read's pages are unlocked.
    fn replied(self);

    /// Whether [`ReadData::replied`] does anything: if not, a transport need not make sure the
    /// answer reached the kernel before calling it (the ring then saves a system call).
    fn acts_when_replied(&self) -> bool {
        true
    }
}

/// One answer, ready to send: [`Reply::io_slices`] are its bytes (header, then body); call
/// [`Reply::replied`] once they are sent.
#[must_use = "send the reply, then call `replied`"]
pub struct Reply<'a, D> {
    header: OutHeader,
    body: Body<'a, D>,
}

enum Body<'a, D> {
    Empty,
    Bytes(Vec<u8>),
    Data(D),
    /// A listing, and the directory's turn, held until the listing is sent.
    Listing(Vec<u8>, Option<ListingTurn<'a>>),
}

impl<D: ReadData> std::fmt::Debug for Reply<'_, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reply")
            .field("header", &self.header)
            .field("body_len", &self.body().len())
            .finish()
    }
}

impl<'a, D: ReadData> Reply<'a, D> {
    fn with_body(unique: u64, body: Body<'a, D>) -> Self {
        let mut reply = Reply {
            header: OutHeader {
                len: 0,
                error: 0,
                unique,
            },
            body,
        };
        let len = std::mem::size_of::<OutHeader>() + reply.body().len();
        reply.header.len = u32::try_from(len).unwrap_or(u32::MAX);
        reply
    }

    /// An error answer: `errno` as the kernel's negative error.
    pub(crate) fn error(unique: u64, errno: i32) -> Self {
        let mut reply = Self::with_body(unique, Body::Empty);
        reply.header.error = -errno;
        reply
    }

    /// A success with no body.
    pub(crate) fn empty(unique: u64) -> Self {
        Self::with_body(unique, Body::Empty)
    }

    /// A success whose body is `bytes`.
    pub(crate) fn bytes(unique: u64, bytes: Vec<u8>) -> Self {
        Self::with_body(unique, Body::Bytes(bytes))
    }

    /// A success whose body is one structure.
    pub(crate) fn value<T: IntoBytes + zerocopy::Immutable>(unique: u64, value: &T) -> Self {
        Self::bytes(unique, value.as_bytes().to_vec())
    }

    /// A read's answer: its bytes, lent by the file system.
    pub(crate) fn data(unique: u64, data: D) -> Self {
        Self::with_body(unique, Body::Data(data))
    }

    /// A listing's answer, and the turn to hold until it is sent.
    pub(crate) fn listing(unique: u64, buffer: Vec<u8>, turn: Option<ListingTurn<'a>>) -> Self {
        Self::with_body(unique, Body::Listing(buffer, turn))
    }

    /// The request this answers.
    pub fn unique(&self) -> u64 {
        self.header.unique
    }

    /// The error answered (a positive errno), or 0.
    pub fn errno(&self) -> i32 {
        -self.header.error
    }

    /// The header's bytes.
    pub fn header(&self) -> &[u8] {
        self.header.as_bytes()
    }

    /// The body's bytes (the operation's answer, empty for an error).
    pub fn body(&self) -> &[u8] {
        match &self.body {
            Body::Empty => &[],
            Body::Bytes(b) | Body::Listing(b, _) => b,
            Body::Data(d) => d.bytes(),
        }
    }

    /// Header and body, for one `writev`.
    pub fn io_slices(&self) -> [IoSlice<'_>; 2] {
        [IoSlice::new(self.header()), IoSlice::new(self.body())]
    }

    /// The whole answer in one buffer (for tests, and transports that copy anyway).
    pub fn to_vec(&self) -> Vec<u8> {
        [self.header(), self.body()].concat()
    }

    /// Whether [`Reply::replied`] must come after the kernel has the answer: it ends a
    /// listing turn, or hands a read's block to the page store. (The ring commits such answers
    /// before calling it; others it commits together with the wait for the next request.)
    pub fn acts_when_replied(&self) -> bool {
        match &self.body {
            Body::Data(d) => d.acts_when_replied(),
            Body::Listing(_, turn) => turn.is_some(),
            Body::Empty | Body::Bytes(_) => false,
        }
    }

    /// Tells the file system the answer was sent (or could not be: the request was
    /// interrupted): releases a listing's turn, and lets a read offer its block to the page
    /// cache.
    pub fn replied(self) {
        match self.body {
            Body::Data(d) => d.replied(),
            Body::Listing(_, turn) => drop(turn),
            Body::Empty | Body::Bytes(_) => {}
        }
    }
}

/// A duration as the kernel's seconds and nanoseconds.
fn valid(ttl: Duration) -> (u64, u32) {
    (ttl.as_secs(), ttl.subsec_nanos())
}

/// A time as seconds and nanoseconds since the epoch (before it: negative seconds).
fn time(t: SystemTime) -> (u64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs(), d.subsec_nanos()),
        Err(before) => {
            let d = before.duration();
            let (secs, nanos) = (d.as_secs() as i64, d.subsec_nanos());
            if nanos == 0 {
                ((-secs) as u64, 0)
            } else {
                ((-secs - 1) as u64, 1_000_000_000 - nanos)
            }
        }
    }
}

/// The `S_IFMT` bits of a file type.
fn mode_type(kind: FileType) -> u32 {
    match kind {
        FileType::NamedPipe => libc::S_IFIFO,
        FileType::CharDevice => libc::S_IFCHR,
        FileType::BlockDevice => libc::S_IFBLK,
        FileType::Directory => libc::S_IFDIR,
        FileType::RegularFile => libc::S_IFREG,
        FileType::Symlink => libc::S_IFLNK,
        FileType::Socket => libc::S_IFSOCK,
    }
}

/// A node's attributes on the wire.
pub(crate) fn wire_attr(a: &FileAttr) -> abi::Attr {
    let (atime, atimensec) = time(a.atime);
    let (mtime, mtimensec) = time(a.mtime);
    let (ctime, ctimensec) = time(a.ctime);
    abi::Attr {
        ino: a.ino.0,
        size: a.size,
        blocks: a.blocks,
        atime,
        mtime,
        ctime,
        atimensec,
        mtimensec,
        ctimensec,
        mode: mode_type(a.kind) | u32::from(a.perm),
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
        flags: a.flags,
    }
}

/// LOOKUP's answer (also each READDIRPLUS entry's).
pub(crate) fn entry_out(attr: &FileAttr, ttl: Duration, generation: u64) -> abi::EntryOut {
    let (secs, nanos) = valid(ttl);
    abi::EntryOut {
        nodeid: attr.ino.0,
        generation,
        entry_valid: secs,
        attr_valid: secs,
        entry_valid_nsec: nanos,
        attr_valid_nsec: nanos,
        attr: wire_attr(attr),
    }
}

impl From<&Entry> for abi::EntryOut {
    fn from(e: &Entry) -> Self {
        entry_out(&e.attr, e.ttl, e.generation.0)
    }
}

impl From<&Attr> for abi::AttrOut {
    fn from(a: &Attr) -> Self {
        let (secs, nanos) = valid(a.ttl);
        abi::AttrOut {
            attr_valid: secs,
            attr_valid_nsec: nanos,
            dummy: 0,
            attr: wire_attr(&a.attr),
        }
    }
}

impl From<&Opened> for abi::OpenOut {
    fn from(o: &Opened) -> Self {
        abi::OpenOut {
            fh: o.fh.0,
            open_flags: o.flags.bits(),
            backing_id: 0,
        }
    }
}

impl From<&StatFs> for abi::StatfsOut {
    fn from(s: &StatFs) -> Self {
        abi::StatfsOut {
            blocks: s.blocks,
            bfree: s.bfree,
            bavail: s.bavail,
            files: s.files,
            ffree: s.ffree,
            bsize: s.bsize,
            namelen: s.namelen,
            frsize: s.frsize,
            padding: 0,
            spare: [0; 6],
        }
    }
}

/// A READDIR or READDIRPLUS answer being filled, up to the size the kernel asked for: the
/// file system adds entries through [`DirectoryReplier`] or [`DirectoryPlusReplier`].
#[derive(Debug)]
pub struct DirentBuffer {
    bytes: Vec<u8>,
    limit: usize,
}

impl DirentBuffer {
    /// A buffer for at most `limit` bytes of entries.
    pub fn new(limit: u32) -> Self {
        let limit = limit as usize;
        DirentBuffer {
            // Most answers fill the kernel's page; start small for the few that do not.
            bytes: Vec::with_capacity(limit.min(4096)),
            limit,
        }
    }

    /// Appends `fixed` and `name`, padded to 8 bytes; true (and nothing appended) when it does
    /// not fit.
    fn push(&mut self, fixed: &[u8], name: &[u8]) -> bool {
        let len = abi::dirent_align(fixed.len() + name.len());
        if self.bytes.len() + len > self.limit {
            return true;
        }
        let end = self.bytes.len() + len;
        self.bytes.extend_from_slice(fixed);
        self.bytes.extend_from_slice(name);
        self.bytes.resize(end, 0);
        false
    }

    /// The entries added, as the kernel reads them.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

fn dirent(node: u64, offset: u64, kind: FileType, name: &[u8]) -> abi::Dirent {
    abi::Dirent {
        ino: node,
        off: offset,
        namelen: name.len() as u32,
        typ: mode_type(kind) >> 12,
    }
}

impl DirectoryReplier for DirentBuffer {
    fn add(&mut self, e: DirectoryEntry<'_>) -> bool {
        let name = e.name.as_bytes();
        let d = dirent(e.node.0, e.offset, e.kind, name);
        self.push(d.as_bytes(), name)
    }
}

impl DirectoryPlusReplier for DirentBuffer {
    fn add(&mut self, e: DirectoryEntryPlus<'_>) -> bool {
        let name = e.name.as_bytes();
        // A zero entry_out (node 0): the kernel takes the name and links nothing.
        let entry = match e.link {
            true => entry_out(e.attr, e.ttl, e.generation.0),
            false => abi::EntryOut::default(),
        };
        let d = abi::DirentPlus {
            entry_out: entry,
            dirent: dirent(e.attr.ino.0, e.offset, e.attr.kind, name),
        };
        self.push(d.as_bytes(), name)
    }
}

/// A notification's header and argument: FUSE_NOTIFY_STORE of `len` bytes at `offset` of
/// `node` (the bytes follow).
pub(crate) fn notify_store(node: u64, offset: u64, len: usize) -> Option<Vec<u8>> {
    let size = u32::try_from(len).ok()?;
    let arg = abi::NotifyStoreOut {
        nodeid: node,
        offset,
        size,
        padding: 0,
    };
    Some(notification(abi::notify::STORE, arg.as_bytes(), len))
}

/// FUSE_NOTIFY_INVAL_INODE of `len` bytes at `offset` of `node` (`len` 0: to the end; a
/// negative `offset`: the attributes only).
pub(crate) fn notify_inval_inode(node: u64, offset: i64, len: i64) -> Vec<u8> {
    let arg = abi::NotifyInvalInodeOut {
        ino: node,
        off: offset,
        len,
    };
    notification(abi::notify::INVAL_INODE, arg.as_bytes(), 0)
}

/// A notification's header (unique 0, the code in `error`) and argument; `trailing` bytes
/// follow them in the same write.
fn notification(code: i32, arg: &[u8], trailing: usize) -> Vec<u8> {
    let len = std::mem::size_of::<OutHeader>() + arg.len() + trailing;
    let header = OutHeader {
        len: u32::try_from(len).unwrap_or(u32::MAX),
        error: code,
        unique: 0,
    };
    [header.as_bytes(), arg].concat()
}
