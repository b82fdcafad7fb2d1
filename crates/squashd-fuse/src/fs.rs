//! The FUSE request handlers: each maps one request to `Image` calls and shapes the reply so
//! the kernel caches it for good.

use crate::attr::{errno, file_attr, negative_attr, Owner, FOREVER};
use crate::dirs::OpenDir;
use crate::handles::HandleTable;
use crate::nodes::NodeMap;
use crate::page_store::PageStore;
use crate::prefetch::{Prefetcher, ReadState};
use crate::session::{Activity, MountConfig};
use fuser::{
    AccessFlags, Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use squashd_core::{Chunk, DirEntry, FileReader, Image, Inode, InodeId};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::SystemTime;

/// The generation of every node: node numbers are never reused while mounted.
pub(crate) const GENERATION: Generation = Generation(0);

struct OpenFile {
    reader: FileReader,
    reading: ReadState,
}

/// A read-only file system serving one image (or one directory of it) to the kernel.
pub struct SquashFs {
    pub(crate) image: Image,
    pub(crate) root: Inode,
    pub(crate) nodes: NodeMap,
    owner: Owner,
    files: HandleTable<OpenFile>,
    pub(crate) dirs: HandleTable<OpenDir>,
    prefetch: Prefetcher,
    activity: Option<Arc<Activity>>,
    /// The kernel skips OPENDIR/RELEASEDIR (FUSE_NO_OPENDIR_SUPPORT): a walk costs no round
    /// trips for directories it has listed before, and readdir comes with no handle.
    no_opendir: bool,
    /// Listings being read in several readdir calls without a handle, by node.
    pub(crate) listings: Mutex<HashMap<u64, Arc<[DirEntry]>>>,
    /// Listing requests of one directory are answered one at a time (striped by node).
    listing_turns: ListingTurns,
    pub(crate) metadata_read_ahead: std::sync::Once,
    pub(crate) probe: MountProbe,
    /// Hands whole blocks of small reads to the kernel's page cache.
    pub(crate) page_store: PageStore,
}

/// Live figures of one mount, readable from outside the session (by a daemon's `status`).
#[derive(Debug, Clone, Default)]
pub struct MountProbe {
    counters: Arc<MountCounters>,
}

#[derive(Debug, Default)]
struct MountCounters {
    open_handles: AtomicI64,
    failed_requests: AtomicU64,
    requests: AtomicU64,
}

impl MountProbe {
    /// Files and directories open through the mount now.
    pub fn open_handles(&self) -> u64 {
        self.counters.open_handles.load(Ordering::Relaxed).max(0) as u64
    }

    /// Requests answered with EIO because the image could not be read or is corrupt.
    pub fn failed_requests(&self) -> u64 {
        self.counters.failed_requests.load(Ordering::Relaxed)
    }

    /// Requests served: lookups, attributes, reads, listings, links, xattrs, statfs and access
    /// checks (not the kernel's releases and forgets). What the kernel answers from its own
    /// caches never gets here: this shows how much of a workload it takes off the daemon.
    pub fn requests(&self) -> u64 {
        self.counters.requests.load(Ordering::Relaxed)
    }

    pub(crate) fn opened(&self) {
        self.counters.open_handles.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn closed(&self) {
        self.counters.open_handles.fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for SquashFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SquashFs")
            .field("image", &self.image)
            .finish_non_exhaustive()
    }
}

type Result<T> = std::result::Result<T, Errno>;

/// Turns at answering listing requests, one directory at a time.
///
/// Parallel walkers of a cold mount (16 `find`s at once) reach the same directories together,
/// and each sends its own listing requests before any reply has filled the kernel's listing
/// cache. Answered at once, those duplicates keep the walkers in lockstep, so every directory
/// is listed (and its entries parsed and linked by the kernel) by many of them. Answered one
/// after another, the walkers drift apart and the later ones find listings cached. Measured
/// on /usr (19k directories, 2 cores, medians of 3): 16 cold walks 8.0 s and 280-465k
/// requests answered in parallel, 5.3 s and about 200k one directory at a time; 8 walks 4.6 s
/// against 3.8 s; 1 and 4 walks unchanged. Directories hash onto a few locks, so listings of
/// different directories still go in parallel.
struct ListingTurns([Mutex<()>; LISTING_TURNS]);

const LISTING_TURNS: usize = 64;

impl Default for ListingTurns {
    fn default() -> Self {
        ListingTurns(std::array::from_fn(|_| Mutex::new(())))
    }
}

impl ListingTurns {
    /// Waits for the turn of directory `node`; the turn ends when the guard drops.
    fn take(&self, node: INodeNo) -> MutexGuard<'_, ()> {
        self.0[(node.0 % LISTING_TURNS as u64) as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

impl SquashFs {
    /// A file system serving `image`, rooted at `config.subdir` if given. Fails (without
    /// mounting anything) when the image's root or that directory cannot be read.
    pub(crate) fn new(
        image: Image,
        config: &MountConfig,
        activity: Option<Arc<Activity>>,
    ) -> squashd_core::Result<Self> {
        let root = match &config.subdir {
            Some(dir) => image.resolve_path(dir.as_os_str().as_bytes())?,
            None => image.root()?,
        };
        if !root.is_dir() {
            return Err(squashd_core::Error::NotADirectory {
                image: image.name().into(),
                path: config
                    .subdir
                    .as_deref()
                    .unwrap_or(Path::new("/"))
                    .display()
                    .to_string(),
            });
        }
        let window = config.readahead_bytes / image.superblock().block_size.max(1) as u64;
        Ok(SquashFs {
            nodes: NodeMap::new(root.number, root.id),
            owner: Owner {
                uid: config.uid,
                gid: config.gid,
            },
            files: HandleTable::new(),
            dirs: HandleTable::new(),
            prefetch: Prefetcher::new(config.prefetch_threads, window, 64),
            activity,
            no_opendir: false,
            listings: Mutex::new(HashMap::new()),
            listing_turns: ListingTurns::default(),
            metadata_read_ahead: std::sync::Once::new(),
            probe: MountProbe::default(),
            page_store: PageStore::new(),
            root,
            image,
        })
    }

    /// Number of open files and directories (for tests and status).
    pub fn open_handles(&self) -> usize {
        self.files.len() + self.dirs.len()
    }

    /// The errno for a library error, counting the requests that fail with EIO.
    pub(crate) fn errno(&self, e: &squashd_core::Error) -> Errno {
        let n = errno(e);
        if n == Errno::EIO {
            self.probe
                .counters
                .failed_requests
                .fetch_add(1, Ordering::Relaxed);
        }
        n
    }

    /// Counts a request and marks the mount active (for the idle timeout).
    pub(crate) fn touch(&self) {
        self.probe.counters.requests.fetch_add(1, Ordering::Relaxed);
        if let Some(a) = &self.activity {
            a.touch();
        }
    }

    pub(crate) fn inode(&self, node: INodeNo) -> Result<Inode> {
        if node.0 == 1 {
            return Ok(self.root.clone());
        }
        // The kernel names only nodes it was given; anything else is a stale handle.
        let id = self.nodes.id(node.0).ok_or(Errno::from_i32(libc::ESTALE))?;
        self.image.inode(id).map_err(|e| self.errno(&e))
    }

    pub(crate) fn load(&self, id: InodeId) -> Result<Inode> {
        self.image.inode(id).map_err(|e| self.errno(&e))
    }

    pub(crate) fn attr(&self, inode: &Inode) -> fuser::FileAttr {
        let node = self.nodes.remember(inode.number, inode.id);
        file_attr(node, inode, self.owner, self.blksize())
    }

    fn blksize(&self) -> u32 {
        self.image.superblock().block_size
    }

    fn do_lookup(&self, parent: INodeNo, name: &OsStr) -> Result<Option<fuser::FileAttr>> {
        let dir = self.inode(parent)?;
        if !dir.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        match self.image.lookup(&dir, name.as_bytes()) {
            Ok(Some(entry)) => Ok(Some(self.attr(&self.load(entry.id)?))),
            Ok(None) => Ok(None),
            Err(e) => Err(self.errno(&e)),
        }
    }

    fn do_read(&self, ino: INodeNo, fh: FileHandle, offset: u64, size: u32, reply: ReplyData) {
        let Some(file) = self.files.get(fh.0) else {
            return reply.error(Errno::EBADF);
        };
        let reader = &file.reader;
        let file_size = reader.size();
        if offset >= file_size || size == 0 {
            return reply.data(&[]);
        }
        // Queue what follows before decompressing this block, so both run at once.
        self.prefetch
            .on_read(&file.reading, reader, offset, size as u64);
        let end = file_size.min(offset + size as u64);
        let bs = reader.block_size() as u64;
        let (first, last) = (offset / bs, (end - 1) / bs);
        if first == last {
            // Within one block: reply straight from the cached block, no copy.
            let chunk = match reader.chunk(first) {
                Ok(c) => c,
                Err(e) => return reply.error(self.errno(&e)),
            };
            let within = (offset - first * bs) as usize;
            let n = (end - offset) as usize;
            match &chunk {
                Chunk::Zeros(_) => reply.data(&vec![0; n]),
                Chunk::Data { .. } => match chunk.bytes().get(within..within + n) {
                    Some(bytes) => reply.data(bytes),
                    None => return reply.error(Errno::EIO),
                },
            };
            if n < chunk.len() {
                // A small read: give the kernel the rest of the block too.
                self.page_store.offer(ino, first * bs, chunk);
            }
            return;
        }
        let mut buf = vec![0u8; (end - offset) as usize];
        match reader.read_at(offset, &mut buf) {
            Ok(n) => reply.data(&buf[..n]),
            Err(e) => reply.error(self.errno(&e)),
        }
    }

    fn xattr_reply(value_len: usize, size: u32, reply: ReplyXattr, data: &[u8]) {
        if size == 0 {
            reply.size(value_len as u32);
        } else if (size as usize) < value_len {
            reply.error(Errno::ERANGE);
        } else {
            reply.data(data);
        }
    }
}

impl Filesystem for SquashFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Ask for each optimisation the kernel offers; an old kernel just goes without.
        for wanted in [
            InitFlags::FUSE_ASYNC_READ,
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_CACHE_SYMLINKS,
            InitFlags::FUSE_MAX_PAGES,
        ] {
            let _ = config.add_capabilities(wanted);
        }
        self.no_opendir = config
            .add_capabilities(InitFlags::FUSE_NO_OPENDIR_SUPPORT)
            .is_ok();
        // Readahead requests are "background" requests: let many be in flight so that the
        // worker threads (and read-ahead decompression) are kept busy.
        let _ = config.set_max_background(256);
        let _ = config.set_congestion_threshold(192);
        if let Err(max) = config.set_max_readahead(u32::MAX) {
            let _ = config.set_max_readahead(max);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.dir_request();
        match self.do_lookup(parent, name) {
            Ok(Some(attr)) => reply.entry(&FOREVER, &attr, GENERATION),
            // A negative entry, cached like a positive one: the name will never appear.
            Ok(None) => reply.entry(&FOREVER, &negative_attr(), GENERATION),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.touch();
        match self.inode(ino) {
            Ok(inode) => reply.attr(&FOREVER, &self.attr(&inode)),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.touch();
        match self
            .inode(ino)
            .and_then(|i| self.image.read_link(&i).map_err(|e| self.errno(&e)))
        {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.touch();
        if flags.acc_mode() != OpenAccMode::O_RDONLY {
            return reply.error(Errno::EROFS);
        }
        let inode = match self.inode(ino) {
            Ok(i) => i,
            Err(e) => return reply.error(e),
        };
        if inode.is_dir() {
            return reply.error(Errno::EISDIR);
        }
        match self.image.open_file(&inode) {
            Ok(reader) => {
                self.probe.opened();
                let fh = self.files.insert(OpenFile {
                    reader,
                    reading: ReadState::default(),
                });
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE);
            }
            Err(e) => reply.error(self.errno(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.touch();
        self.do_read(ino, fh, offset, size, reply);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.files.remove(fh.0);
        self.probe.closed();
        reply.ok();
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.touch();
        if self.no_opendir {
            // ENOSYS tells the kernel to stop sending OPENDIR and RELEASEDIR; it then treats
            // every directory as opened with FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR.
            return reply.error(Errno::ENOSYS);
        }
        let inode = match self.inode(ino) {
            Ok(i) => i,
            Err(e) => return reply.error(e),
        };
        if !inode.is_dir() {
            return reply.error(Errno::ENOTDIR);
        }
        self.probe.opened();
        let fh = self.dirs.insert(OpenDir {
            inode,
            entries: OnceLock::new(),
        });
        // CACHE_DIR: the kernel keeps the listing in its page cache; KEEP_CACHE: opening the
        // directory again does not throw that cache away.
        reply.opened(
            FileHandle(fh),
            FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
        );
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.dir_request();
        let _turn = self.listing_turns.take(ino);
        self.fill_readdir(ino, fh, offset, reply);
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        self.dir_request();
        let _turn = self.listing_turns.take(ino);
        self.fill_readdirplus(ino, fh, offset, reply);
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs.remove(fh.0);
        self.probe.closed();
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.touch();
        let sb = self.image.superblock();
        let bs = sb.block_size.max(1) as u64;
        // As the kernel's squashfs: blocks of the image's block size, nothing free.
        let blocks = sb.bytes_used.div_ceil(bs);
        reply.statfs(
            blocks,
            0,
            0,
            sb.inode_count as u64,
            0,
            bs as u32,
            256,
            bs as u32,
        );
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.touch();
        let xattrs = match self
            .inode(ino)
            .and_then(|i| self.image.xattrs(&i).map_err(|e| self.errno(&e)))
        {
            Ok(x) => x,
            Err(e) => return reply.error(e),
        };
        match xattrs.iter().find(|x| x.name == name.as_bytes()) {
            Some(x) => Self::xattr_reply(x.value.len(), size, reply, &x.value),
            None => reply.error(Errno::from_i32(libc::ENODATA)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.touch();
        let xattrs = match self
            .inode(ino)
            .and_then(|i| self.image.xattrs(&i).map_err(|e| self.errno(&e)))
        {
            Ok(x) => x,
            Err(e) => return reply.error(e),
        };
        let mut list = Vec::new();
        for x in &xattrs {
            list.extend_from_slice(&x.name);
            list.push(0);
        }
        Self::xattr_reply(list.len(), size, reply, &list);
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        if mask.contains(AccessFlags::W_OK) {
            return reply.error(Errno::EROFS);
        }
        match self.inode(ino) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    // Everything that would change the image: EROFS (the mount is read-only too, so the
    // kernel usually answers these itself).

    fn setattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        _size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        reply.error(Errno::EROFS);
    }

    fn mknod(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn mkdir(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn unlink(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn rmdir(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn symlink(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _link_name: &OsStr,
        _target: &Path,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn rename(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _newparent: INodeNo,
        _newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EROFS);
    }

    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        reply.error(Errno::EROFS);
    }

    fn create(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        reply.error(Errno::EROFS);
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EROFS);
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EROFS);
    }
}
