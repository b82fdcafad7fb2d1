//! The dispatcher: one request's bytes in, one answer out.
//!
//! A transport (the /dev/fuse reader threads of [`super::dev_fuse`], or a ring of io_uring
//! entries) hands [`Dispatcher::dispatch`] the bytes of one request as the kernel sent them
//! and gets back the [`Reply`] to send, if the request takes one. The dispatcher parses the
//! request ([`super::request`]), calls the [`FuseFilesystem`], and builds the answer
//! ([`super::reply`]); it neither reads nor writes any descriptor. After sending, the
//! transport calls [`Reply::replied`], which lets the file system act on what must come after
//! the answer (a page-cache store, the end of a directory's listing turn).

use super::abi::InHeader;
use super::abi::{self, init_flags};
use super::reply::{DirentBuffer, ReadData, Reply};
use super::request::{expects_reply, Operation, ParseError, Request};
use crate::answers::{Attr, Entry, Opened, StatFs, XattrReply};
use crate::error::FsResult;
use crate::listings::ListingTurn;
use fuser::{AccessFlags, Errno, FileHandle, INodeNo, OpenFlags};
use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, Ordering};

/// Who sent a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestContext {
    /// The caller's user id (0 for requests the kernel makes on no one's behalf).
    pub uid: u32,
    /// The caller's group id.
    pub gid: u32,
    /// The caller's process id.
    pub pid: u32,
}

/// What the kernel offers at INIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelOffer {
    /// The protocol minor version the kernel speaks.
    pub minor: u32,
    /// The capabilities it offers ([`abi::init_flags`], `flags2` in the high half).
    pub flags: u64,
    /// The most read-ahead it allows, in bytes.
    pub max_readahead: u32,
}

impl KernelOffer {
    /// Whether the kernel offers `flag`.
    pub fn offers(&self, flag: u64) -> bool {
        self.flags & flag == flag
    }
}

/// What a file system asks for at INIT; the session grants the flags the kernel offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitSettings {
    /// Capabilities wanted ([`abi::init_flags`]).
    pub flags: u64,
    /// Read-ahead, in bytes (at most what the kernel offers).
    pub max_readahead: u32,
    /// Background requests (read-ahead, asynchronous direct I/O) in flight at most.
    pub max_background: u16,
    /// Background requests beyond which the kernel counts the connection congested.
    pub congestion_threshold: u16,
}

/// A read-only file system as a FUSE session serves it. Each operation answers one request;
/// the errors carry the errno to answer with. Operations not overridden answer ENOSYS, which
/// the kernel takes as "not implemented" (for OPENDIR: "never send it again").
///
/// Everything that would write is answered EROFS by the dispatcher and never reaches here.
#[allow(unused_variables)]
pub trait FuseFilesystem: Send + Sync + 'static {
    /// The bytes of one read, lent to the answer.
    type Data<'a>: ReadData
    where
        Self: 'a;

    /// What to ask of the kernel at INIT. Called once, before any other request.
    fn init(&self, kernel: &KernelOffer) -> InitSettings;

    /// The kernel dropped `nlookup` references to `node`.
    fn forget(&self, node: INodeNo, nlookup: u64) {}

    /// Looks `name` up in directory `parent`.
    fn lookup(&self, ctx: &RequestContext, parent: INodeNo, name: &OsStr) -> FsResult<Entry>;

    /// The attributes of `node` (open as `fh`, if given).
    fn getattr(
        &self,
        ctx: &RequestContext,
        node: INodeNo,
        fh: Option<FileHandle>,
    ) -> FsResult<Attr>;

    /// The target of symlink `node`.
    fn readlink(&self, ctx: &RequestContext, node: INodeNo) -> FsResult<Vec<u8>> {
        Err(Errno::ENOSYS.into())
    }

    /// Opens file `node`.
    fn open(&self, ctx: &RequestContext, node: INodeNo, flags: OpenFlags) -> FsResult<Opened>;

    /// Reads up to `size` bytes at `offset` of `node`, open as `fh`.
    fn read(
        &self,
        ctx: &RequestContext,
        node: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
    ) -> FsResult<Self::Data<'_>>;

    /// A close of `fh`.
    fn flush(&self, ctx: &RequestContext, node: INodeNo, fh: FileHandle) -> FsResult<()> {
        Ok(())
    }

    /// The last close of `fh`.
    fn release(&self, ctx: &RequestContext, node: INodeNo, fh: FileHandle) -> FsResult<()>;

    /// Opens directory `node`.
    fn opendir(&self, ctx: &RequestContext, node: INodeNo, flags: OpenFlags) -> FsResult<Opened> {
        Err(Errno::ENOSYS.into())
    }

    /// Lists directory `node` from `offset` into `out`; the turn returned is held until the
    /// answer is sent.
    fn readdir<'a>(
        &'a self,
        ctx: &RequestContext,
        node: INodeNo,
        fh: FileHandle,
        offset: u64,
        out: &mut DirentBuffer,
    ) -> FsResult<Option<ListingTurn<'a>>>;

    /// Lists directory `node` from `offset` with each entry's attributes, as `readdir`.
    fn readdirplus<'a>(
        &'a self,
        ctx: &RequestContext,
        node: INodeNo,
        fh: FileHandle,
        offset: u64,
        out: &mut DirentBuffer,
    ) -> FsResult<Option<ListingTurn<'a>>> {
        Err(Errno::ENOSYS.into())
    }

    /// The last close of directory handle `fh`.
    fn releasedir(&self, ctx: &RequestContext, node: INodeNo, fh: FileHandle) -> FsResult<()> {
        Ok(())
    }

    /// The file system's figures.
    fn statfs(&self, ctx: &RequestContext, node: INodeNo) -> FsResult<StatFs>;

    /// Xattr `name` of `node` (with `size` 0: its length).
    fn getxattr(
        &self,
        ctx: &RequestContext,
        node: INodeNo,
        name: &OsStr,
        size: u32,
    ) -> FsResult<XattrReply> {
        Err(Errno::ENOSYS.into())
    }

    /// The names of `node`'s xattrs (with `size` 0: their length).
    fn listxattr(&self, ctx: &RequestContext, node: INodeNo, size: u32) -> FsResult<XattrReply> {
        Err(Errno::ENOSYS.into())
    }

    /// Whether `node` may be accessed as `mask` asks.
    fn access(&self, ctx: &RequestContext, node: INodeNo, mask: AccessFlags) -> FsResult<()> {
        Err(Errno::ENOSYS.into())
    }

    /// The connection is ending (the kernel sends DESTROY to block-device-backed mounts).
    fn destroy(&self) {}

    /// Whether an answer may wait long: for requests of its own mount (a read ahead that goes
    /// back through the same connection) or for a network. FUSE over io_uring then gives each
    /// request thread one ring entry, so that a waiting answer holds up no other request;
    /// otherwise one thread answers all the requests of a CPU, in batches
    /// ([`squashd_fuse_uring::QueueThreads`]).
    fn answers_may_wait(&self) -> bool {
        false
    }
}

/// Turns requests into calls of a [`FuseFilesystem`] and its answers into replies.
#[derive(Debug)]
pub struct Dispatcher<F> {
    fs: F,
    /// The capabilities agreed at INIT (`flags2` in the high half).
    agreed: AtomicU64,
    /// Requests dispatched, by opcode (the last slot counts every opcode past it): logged at
    /// debug level when the session ends, to compare what transports and settings cost.
    requests: [AtomicU64; COUNTED_OPCODES],
}

/// Opcodes counted one by one ([`Dispatcher::requests_by_opcode`]): every one squashd answers
/// (READDIRPLUS is 44) and a slot for the rest.
const COUNTED_OPCODES: usize = 64;

impl<F> Dispatcher<F> {
    /// Requests dispatched so far, by opcode (those not seen are left out; opcodes past the
    /// counted ones are summed under the last counted one).
    pub fn requests_by_opcode(&self) -> Vec<(u32, u64)> {
        (0..COUNTED_OPCODES)
            .filter_map(|op| {
                let n = self.requests[op].load(Ordering::Relaxed);
                (n > 0).then_some((op as u32, n))
            })
            .collect()
    }
}

impl<F> Drop for Dispatcher<F> {
    fn drop(&mut self) {
        if tracing::enabled!(tracing::Level::DEBUG) {
            let counts: Vec<String> = self
                .requests_by_opcode()
                .into_iter()
                .map(|(op, n)| format!("{}={n}", abi::opcode_name(op)))
                .collect();
            tracing::debug!("FUSE requests by opcode: {}", counts.join(" "));
        }
    }
}

/// A reply of a dispatcher over `F`.
pub type FsReply<'a, F> = Reply<'a, <F as FuseFilesystem>::Data<'a>>;

impl<F: FuseFilesystem> Dispatcher<F> {
    /// A dispatcher serving `fs`.
    pub fn new(fs: F) -> Self {
        Dispatcher {
            fs,
            agreed: AtomicU64::new(0),
            requests: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// The file system served.
    pub fn fs(&self) -> &F {
        &self.fs
    }

    /// The capabilities agreed with the kernel at INIT ([`abi::init_flags`]; 0 before INIT):
    /// what a transport may rely on (an io_uring transport: `OVER_IO_URING`).
    pub fn agreed(&self) -> u64 {
        self.agreed.load(Ordering::Relaxed)
    }

    /// Answers one request, given as the kernel sent it: None for requests that take no
    /// answer (FORGET, BATCH_FORGET, INTERRUPT). Send the reply's bytes, then call
    /// [`Reply::replied`].
    pub fn dispatch(&self, request: &[u8]) -> Option<FsReply<'_, F>> {
        self.dispatch_with(Request::parse(request), Request::header(request).ok(), None)
    }

    /// [`Dispatcher::dispatch`] for a request whose arguments a transport split (a ring
    /// entry's header and payload buffers), read where they are.
    pub(crate) fn dispatch_split(
        &self,
        request: &squashd_fuse_uring::Request<'_>,
    ) -> Option<FsReply<'_, F>> {
        let parsed = Request::parse_args(request.header, request.args());
        self.dispatch_with(parsed, Some(request.header), None)
    }

    /// [`Dispatcher::dispatch`], with an INIT answer that accepts FUSE over io_uring and
    /// limits reads to `max_pages` pages (the ring's payload buffers must hold the largest
    /// read: see [`super::ring`]). Only for an INIT that offers the ring, once the ring
    /// transport is prepared.
    pub(crate) fn dispatch_accepting_ring(
        &self,
        request: &[u8],
        max_pages: u16,
    ) -> Option<FsReply<'_, F>> {
        let header = Request::header(request).ok();
        self.dispatch_with(Request::parse(request), header, Some(max_pages))
    }

    fn dispatch_with(
        &self,
        parsed: Result<Request<'_>, ParseError>,
        header: Option<InHeader>,
        ring_pages: Option<u16>,
    ) -> Option<FsReply<'_, F>> {
        let request = match parsed {
            Ok(r) => r,
            Err(e) => {
                let header = header?;
                tracing::warn!(
                    "FUSE request {} (opcode {}) cannot be parsed: {e:?}",
                    header.unique,
                    header.opcode
                );
                return expects_reply(header.opcode)
                    .then(|| Reply::error(header.unique, libc::EIO));
            }
        };
        let slot = (request.header.opcode as usize).min(COUNTED_OPCODES - 1);
        self.requests[slot].fetch_add(1, Ordering::Relaxed);
        let unique = request.header.unique;
        let node = INodeNo(request.header.nodeid);
        let ctx = RequestContext {
            uid: request.header.uid,
            gid: request.header.gid,
            pid: request.header.pid,
        };
        let fs = &self.fs;
        let answer = |result| answer(unique, result);
        match request.operation {
            Operation::Init(init) => Some(self.init(unique, &init, ring_pages)),
            Operation::Destroy => {
                fs.destroy();
                Some(Reply::empty(unique))
            }
            Operation::Lookup(name) => answer(
                fs.lookup(&ctx, node, name)
                    .map(|e| Reply::value(unique, &abi::EntryOut::from(&e))),
            ),
            Operation::Forget(nlookup) => {
                fs.forget(node, nlookup);
                None
            }
            Operation::BatchForget(nodes) => {
                for one in nodes {
                    fs.forget(INodeNo(one.nodeid), one.nlookup);
                }
                None
            }
            Operation::Getattr(fh) => answer(
                fs.getattr(&ctx, node, fh.map(FileHandle))
                    .map(|a| Reply::value(unique, &abi::AttrOut::from(&a))),
            ),
            Operation::Readlink => answer(fs.readlink(&ctx, node).map(|t| Reply::bytes(unique, t))),
            Operation::Open(open) => answer(
                fs.open(&ctx, node, OpenFlags(open.flags as i32))
                    .map(|o| Reply::value(unique, &abi::OpenOut::from(&o))),
            ),
            Operation::Read(read) => answer(
                fs.read(&ctx, node, FileHandle(read.fh), read.offset, read.size)
                    .map(|d| Reply::data(unique, d)),
            ),
            Operation::Flush(flush) => answer(
                fs.flush(&ctx, node, FileHandle(flush.fh))
                    .map(|()| Reply::empty(unique)),
            ),
            Operation::Release(release) => answer(
                fs.release(&ctx, node, FileHandle(release.fh))
                    .map(|()| Reply::empty(unique)),
            ),
            Operation::Opendir(open) => answer(
                fs.opendir(&ctx, node, OpenFlags(open.flags as i32))
                    .map(|o| Reply::value(unique, &abi::OpenOut::from(&o))),
            ),
            Operation::Readdir(read) => {
                let mut out = DirentBuffer::new(read.size);
                answer(
                    fs.readdir(&ctx, node, FileHandle(read.fh), read.offset, &mut out)
                        .map(|turn| Reply::listing(unique, out.into_bytes(), turn)),
                )
            }
            Operation::Readdirplus(read) => {
                let mut out = DirentBuffer::new(read.size);
                answer(
                    fs.readdirplus(&ctx, node, FileHandle(read.fh), read.offset, &mut out)
                        .map(|turn| Reply::listing(unique, out.into_bytes(), turn)),
                )
            }
            Operation::Releasedir(release) => answer(
                fs.releasedir(&ctx, node, FileHandle(release.fh))
                    .map(|()| Reply::empty(unique)),
            ),
            Operation::Statfs => answer(
                fs.statfs(&ctx, node)
                    .map(|s| Reply::value(unique, &abi::StatfsOut::from(&s))),
            ),
            Operation::Getxattr { size, name } => answer(
                fs.getxattr(&ctx, node, name, size)
                    .map(|x| xattr(unique, x)),
            ),
            Operation::Listxattr { size } => {
                answer(fs.listxattr(&ctx, node, size).map(|x| xattr(unique, x)))
            }
            Operation::Access(mask) => answer(
                fs.access(&ctx, node, AccessFlags::from_bits_retain(mask as i32))
                    .map(|()| Reply::empty(unique)),
            ),
            // Every answer is quick or already under way: the interrupted request is answered
            // when it is done, as the protocol allows.
            Operation::Interrupt | Operation::NotifyReply => None,
            Operation::Write => Some(Reply::error(unique, libc::EROFS)),
            Operation::Other => Some(Reply::error(unique, libc::ENOSYS)),
        }
    }

    /// The INIT handshake: the protocol version, and what the file system asks for among what
    /// the kernel offers.
    /// With `ring_pages`, the answer accepts FUSE over io_uring and sends that `max_pages`.
    fn init(&self, unique: u64, init: &abi::InitIn, ring_pages: Option<u16>) -> FsReply<'_, F> {
        if init.major != abi::KERNEL_VERSION || init.minor < 12 {
            tracing::error!(
                "the kernel speaks FUSE {}.{}; squashd needs 7.12 or later",
                init.major,
                init.minor
            );
            return Reply::error(unique, libc::EPROTO);
        }
        let mut offered = u64::from(init.flags);
        if offered & init_flags::INIT_EXT != 0 {
            offered |= u64::from(init.flags2) << 32;
        }
        let kernel = KernelOffer {
            minor: init.minor,
            flags: offered,
            max_readahead: init.max_readahead,
        };
        let settings = self.fs.init(&kernel);
        let ring = ring_pages.map_or(0, |_| init_flags::OVER_IO_URING);
        let agreed = (settings.flags | init_flags::INIT_EXT | ring) & offered;
        self.agreed.store(agreed, Ordering::Relaxed);
        let out = abi::InitOut {
            major: abi::KERNEL_VERSION,
            minor: abi::KERNEL_MINOR_VERSION,
            max_readahead: settings.max_readahead.min(init.max_readahead),
            flags: agreed as u32,
            max_background: settings.max_background,
            congestion_threshold: settings.congestion_threshold.min(settings.max_background),
            max_write: MAX_WRITE,
            time_gran: 1,
            max_pages: ring_pages.unwrap_or(MAX_PAGES),
            map_alignment: 0,
            flags2: (agreed >> 32) as u32,
            max_stack_depth: 0,
            request_timeout: 0,
            unused: [0; 11],
        };
        let bytes = zerocopy::IntoBytes::as_bytes(&out);
        let bytes = if init.minor < 23 {
            &bytes[..abi::INIT_OUT_COMPAT_22_SIZE]
        } else {
            bytes
        };
        Reply::bytes(unique, bytes.to_vec())
    }
}

/// The largest write the kernel may send: the mounts are read-only, so no write ever comes,
/// and the kernel's smallest (4 KiB) keeps the request buffers small (a reader must offer
/// room for one write: [`REQUEST_BUFFER`]).
pub const MAX_WRITE: u32 = 4096;

/// Pages of one read request at most: 16 MiB, which the kernel caps at its
/// `fuse.max_pages_limit` (1 MiB by default): reads come as large as the kernel allows.
pub const MAX_PAGES: u16 = 4096;

/// Bytes a transport's buffer must hold for any request: the kernel refuses a read of
/// /dev/fuse shorter than 8 KiB or than one write ([`MAX_WRITE`] and its header), and the
/// requests squashd serves carry at most a name (1 KiB) or a batch of forgets (which the kernel
/// fits to the buffer). Small, as a daemon has a buffer per thread per image (fuser's were
/// 16 MiB).
pub const REQUEST_BUFFER: usize = 16 << 10;

/// The answer of an operation: its success, or its error.
fn answer<'a, D: ReadData>(unique: u64, result: FsResult<Reply<'a, D>>) -> Option<Reply<'a, D>> {
    Some(result.unwrap_or_else(|e| Reply::error(unique, e.code())))
}

fn xattr<D: ReadData>(unique: u64, answer: XattrReply) -> Reply<'static, D> {
    match answer {
        XattrReply::Size(size) => Reply::value(unique, &abi::GetxattrOut { size, padding: 0 }),
        XattrReply::Data(data) => Reply::bytes(unique, data),
    }
}
