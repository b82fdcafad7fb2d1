//! A tiny read-only file system answering FUSE requests through the crate's `Handler`
//! interface, on either transport:
//!
//! ```text
//! /big        1 MiB of known bytes (big_byte), opened with direct I/O so every read reaches it
//! /small      SMALL_CONTENT
//! /oversized  its READ tries to answer one byte more than the reply buffer holds
//! /slow       its READ answers after SLOW_READ
//! /v*         any name starting with 'v': a small file, entry timeout 0 (a cold stat each time)
//! /e*         a small file (timeouts of an hour); its LOOKUP is committed early (ReplyWriter::commit), then waits (5 s
//!             at most) for the caller to set `early_seen`, which it can only once it has the
//!             answer: `early_before_return` counts the answers that arrived before the handler
//!             returned
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use squashd_fuse_uring::{Handler, ReplyWriter, Request};

pub const BIG_SIZE: u64 = 1 << 20;
pub const SMALL_CONTENT: &[u8] = b"hello from the ring\n";
pub const SLOW_READ: Duration = Duration::from_millis(1500);

const ROOT: u64 = 1;
const BIG: u64 = 2;
const SMALL: u64 = 3;
const OVERSIZED: u64 = 4;
const SLOW: u64 = 5;
const VIRTUAL: u64 = 6;

pub const FUSE_LOOKUP: u32 = 1;
pub const FUSE_FORGET: u32 = 2;
pub const FUSE_GETATTR: u32 = 3;
pub const FUSE_OPEN: u32 = 14;
pub const FUSE_READ: u32 = 15;
pub const FUSE_STATFS: u32 = 17;
pub const FUSE_RELEASE: u32 = 18;
pub const FUSE_FLUSH: u32 = 25;
pub const FUSE_INIT: u32 = 26;
pub const FUSE_OPENDIR: u32 = 27;
pub const FUSE_READDIR: u32 = 28;
pub const FUSE_RELEASEDIR: u32 = 29;
pub const FUSE_INTERRUPT: u32 = 36;
pub const FUSE_BATCH_FORGET: u32 = 42;

/// Byte `offset` of /big.
pub fn big_byte(offset: u64) -> u8 {
    (offset.wrapping_mul(7) ^ (offset >> 12)) as u8
}

/// The file system and its counters.
#[derive(Default)]
pub struct TestFs {
    /// Requests answered per transport.
    pub ring_requests: AtomicU64,
    pub dev_requests: AtomicU64,
    /// LOOKUPs answered, per transport.
    pub ring_lookups: AtomicU64,
    pub dev_lookups: AtomicU64,
    /// Largest READ size asked over the ring.
    pub max_ring_read: AtomicU64,
    /// Set when /slow's READ starts.
    pub slow_started: AtomicBool,
    /// INTERRUPTs read from /dev/fuse (the kernel sends them there, whichever transport
    /// carried the request interrupted).
    pub interrupts: AtomicU64,
    /// Set by a test once its lookup of an /e* name returned.
    pub early_seen: AtomicBool,
    /// /e* lookups whose caller had the answer before the handler returned.
    pub early_before_return: AtomicU64,
    /// LOOKUPs of /n* names (answered ENOENT, which the kernel does not cache) over the ring,
    /// by (queue, name of the thread that answered).
    pub missing_lookups_by_thread:
        std::sync::Mutex<std::collections::HashMap<(usize, String), u64>>,
}

struct Node {
    ino: u64,
    mode: u32,
    size: u64,
}

fn node(ino: u64) -> Option<Node> {
    let file = |ino, size| Node {
        ino,
        mode: libc::S_IFREG | 0o444,
        size,
    };
    match ino {
        ROOT => Some(Node {
            ino,
            mode: libc::S_IFDIR | 0o555,
            size: 0,
        }),
        BIG => Some(file(BIG, BIG_SIZE)),
        SMALL | VIRTUAL => Some(file(ino, SMALL_CONTENT.len() as u64)),
        OVERSIZED => Some(file(OVERSIZED, 1 << 20)),
        SLOW => Some(file(SLOW, 4096)),
        _ => None,
    }
}

const NAMES: [(&[u8], u64); 4] = [
    (b"big", BIG),
    (b"small", SMALL),
    (b"oversized", OVERSIZED),
    (b"slow", SLOW),
];

/// `struct fuse_attr` (88 bytes).
fn attr(node: &Node) -> [u8; 88] {
    let mut out = [0u8; 88];
    out[0..8].copy_from_slice(&node.ino.to_ne_bytes());
    out[8..16].copy_from_slice(&node.size.to_ne_bytes());
    out[16..24].copy_from_slice(&node.size.div_ceil(512).to_ne_bytes());
    // atime, mtime, ctime: 1 s after the epoch, no nanoseconds.
    for at in [24, 32, 40] {
        out[at..at + 8].copy_from_slice(&1u64.to_ne_bytes());
    }
    out[60..64].copy_from_slice(&node.mode.to_ne_bytes());
    let nlink: u32 = if node.ino == ROOT { 2 } else { 1 };
    out[64..68].copy_from_slice(&nlink.to_ne_bytes());
    // uid, gid, rdev 0; blksize 4096.
    out[80..84].copy_from_slice(&4096u32.to_ne_bytes());
    out
}

/// `struct fuse_entry_out` with the given entry timeout (seconds).
fn entry_out(node: &Node, entry_valid: u64) -> [u8; 128] {
    let mut out = [0u8; 128];
    out[0..8].copy_from_slice(&node.ino.to_ne_bytes());
    out[16..24].copy_from_slice(&entry_valid.to_ne_bytes());
    out[24..32].copy_from_slice(&3600u64.to_ne_bytes());
    out[40..].copy_from_slice(&attr(node));
    out
}

impl TestFs {
    fn lookup(&self, request: &Request<'_>, reply: &mut dyn ReplyWriter) {
        let counter = if request.queue.is_some() {
            &self.ring_lookups
        } else {
            &self.dev_lookups
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let Some(name) = request.args().name() else {
            let _ = reply.error(libc::EINVAL);
            return;
        };
        if request.header.nodeid != ROOT {
            let _ = reply.error(libc::ENOTDIR);
            return;
        }
        if let (Some(b'n'), Some(queue)) = (name.first(), request.queue) {
            let thread = std::thread::current().name().unwrap_or("").to_string();
            *self
                .missing_lookups_by_thread
                .lock()
                .unwrap()
                .entry((queue, thread))
                .or_default() += 1;
            let _ = reply.error(libc::ENOENT);
            return;
        }
        if name.first() == Some(&b'e') {
            if let Some(node) = node(VIRTUAL) {
                // Cached attributes: the caller's stat needs no GETATTR, which this queue could
                // not answer before this handler returns.
                let _ = reply.ok(&[&entry_out(&node, 3600)]);
                let _ = reply.commit();
                let deadline = std::time::Instant::now() + Duration::from_secs(5);
                while std::time::Instant::now() < deadline {
                    if self.early_seen.swap(false, Ordering::AcqRel) {
                        self.early_before_return.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            return;
        }
        if name.first() == Some(&b'v') {
            if let Some(node) = node(VIRTUAL) {
                let _ = reply.ok(&[&entry_out(&node, 0)]);
            }
            return;
        }
        match NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, ino)| node(*ino))
        {
            Some(node) => {
                let _ = reply.ok(&[&entry_out(&node, 3600)]);
            }
            None => {
                let _ = reply.error(libc::ENOENT);
            }
        }
    }

    fn read(&self, request: &Request<'_>, reply: &mut dyn ReplyWriter) {
        // fuse_read_in: fh, offset, size, ...
        let mut args = request.args();
        let (Some(_fh), Some(offset), Some(size)) = (args.u64(), args.u64(), args.u32()) else {
            let _ = reply.error(libc::EINVAL);
            return;
        };
        let size = u64::from(size);
        if request.queue.is_some() {
            self.max_ring_read.fetch_max(size, Ordering::Relaxed);
        }
        let Some(node) = node(request.header.nodeid) else {
            let _ = reply.error(libc::ENOENT);
            return;
        };
        match node.ino {
            OVERSIZED => {
                // Refused by the writer (TooLarge): the transport then answers EIO.
                let too_big = reply.capacity() + 1;
                let _ = reply.ok_with(too_big, &mut |buf| Ok(buf.len()));
            }
            SLOW => {
                self.slow_started.store(true, Ordering::SeqCst);
                std::thread::sleep(SLOW_READ);
                let _ = reply.ok(&[&[b's'; 16]]);
            }
            BIG => {
                let end = offset.saturating_add(size).min(BIG_SIZE);
                let len = usize::try_from(end.saturating_sub(offset)).unwrap_or(0);
                let _ = reply.ok_with(len, &mut |buf| {
                    for (i, byte) in buf.iter_mut().enumerate() {
                        *byte = big_byte(offset + i as u64);
                    }
                    Ok(buf.len())
                });
            }
            _ => {
                let start = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(SMALL_CONTENT.len());
                let end = start.saturating_add(size as usize).min(SMALL_CONTENT.len());
                let _ = reply.ok(&[&SMALL_CONTENT[start..end]]);
            }
        }
    }

    fn readdir(&self, request: &Request<'_>, reply: &mut dyn ReplyWriter) {
        let mut args = request.args();
        let (Some(_fh), Some(offset), Some(size)) = (args.u64(), args.u64(), args.u32()) else {
            let _ = reply.error(libc::EINVAL);
            return;
        };
        let mut entries: Vec<(&[u8], u64, u32)> = vec![
            (b".", ROOT, libc::DT_DIR as u32),
            (b"..", ROOT, libc::DT_DIR as u32),
        ];
        entries.extend(
            NAMES
                .iter()
                .map(|(name, ino)| (*name, *ino, libc::DT_REG as u32)),
        );
        let mut out = Vec::new();
        for (index, (name, ino, kind)) in entries.iter().enumerate().skip(offset as usize) {
            // struct fuse_dirent: ino, off (of the next entry), namelen, type, name, padded to 8.
            let record = (24 + name.len()).next_multiple_of(8);
            if out.len() + record > size as usize {
                break;
            }
            out.extend_from_slice(&ino.to_ne_bytes());
            out.extend_from_slice(&(index as u64 + 1).to_ne_bytes());
            out.extend_from_slice(&(name.len() as u32).to_ne_bytes());
            out.extend_from_slice(&kind.to_ne_bytes());
            out.extend_from_slice(name);
            out.resize(out.len().next_multiple_of(8), 0);
        }
        let _ = reply.ok(&[&out]);
    }
}

/// `struct fuse_open_out`: fh 0, the given open flags.
fn open_out(open_flags: u32) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[8..12].copy_from_slice(&open_flags.to_ne_bytes());
    out
}

const FOPEN_DIRECT_IO: u32 = 1 << 0;
const FOPEN_KEEP_CACHE: u32 = 1 << 1;

impl Handler for TestFs {
    fn handle(&self, request: &Request<'_>, reply: &mut dyn ReplyWriter) {
        let counter = if request.queue.is_some() {
            &self.ring_requests
        } else {
            &self.dev_requests
        };
        counter.fetch_add(1, Ordering::Relaxed);
        match request.header.opcode {
            FUSE_LOOKUP => self.lookup(request, reply),
            FUSE_GETATTR => match node(request.header.nodeid) {
                Some(node) => {
                    // struct fuse_attr_out: attr_valid, attr_valid_nsec, dummy, attr.
                    let mut out = [0u8; 104];
                    out[0..8].copy_from_slice(&3600u64.to_ne_bytes());
                    out[16..].copy_from_slice(&attr(&node));
                    let _ = reply.ok(&[&out]);
                }
                None => {
                    let _ = reply.error(libc::ENOENT);
                }
            },
            FUSE_OPEN => {
                let flags = match request.header.nodeid {
                    BIG | OVERSIZED | SLOW => FOPEN_DIRECT_IO,
                    _ => FOPEN_KEEP_CACHE,
                };
                let _ = reply.ok(&[&open_out(flags)]);
            }
            FUSE_OPENDIR => {
                let _ = reply.ok(&[&open_out(0)]);
            }
            FUSE_READ => self.read(request, reply),
            FUSE_READDIR => self.readdir(request, reply),
            FUSE_RELEASE | FUSE_RELEASEDIR | FUSE_FLUSH => {
                let _ = reply.ok(&[]);
            }
            FUSE_STATFS => {
                // struct fuse_statfs_out: blocks, bfree, bavail, files, ffree, bsize, namelen,
                // frsize, padding, spare[6].
                let mut out = [0u8; 80];
                out[0..8].copy_from_slice(&300u64.to_ne_bytes());
                out[24..32].copy_from_slice(&6u64.to_ne_bytes());
                out[40..44].copy_from_slice(&4096u32.to_ne_bytes());
                out[44..48].copy_from_slice(&255u32.to_ne_bytes());
                out[48..52].copy_from_slice(&4096u32.to_ne_bytes());
                let _ = reply.ok(&[&out]);
            }
            _ => {
                let _ = reply.error(libc::ENOSYS);
            }
        }
    }
}
