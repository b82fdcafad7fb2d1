//! The blob file system: one FUSE mount per daemon, a flat directory of read-only files the
//! kernel's EROFS mounts are backed by. Each image served through the kernel path adds two:
//! `NAME.meta`, its EROFS metadata image (bytes in memory), and `NAME.blob`, its file data
//! ([`Blob`]). EROFS needs its backing files on a file system with `read_folio`, which FUSE has
//! and tmpfs has not, so the metadata image never touches a disk either.
//!
//! The blob is opened for direct I/O (FOPEN_DIRECT_IO): EROFS keeps the data it reads in its
//! own page cache, so caching it here too would hold every byte twice. A random read of part of
//! a block has EROFS read the rest of the block too ([`crate::block_fill`]), so that the block
//! is decompressed once and its other pages cost no round trip. Apart from those fills, nothing
//! in the daemon reads through these files or through the EROFS mounts on them; only the
//! kernel does.

use crate::blob::Blob;
use crate::meta_file::MetaFile;
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenAccMode, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory,
    ReplyEntry, ReplyOpen, ReplyStatfs, Request,
};
use squashd_fuse::page_store::{PageStore, StoreBytes};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

/// What a file of the blob file system holds.
#[derive(Debug, Clone)]
pub enum BlobFsContent {
    /// An EROFS metadata image, held in memory.
    Metadata(Arc<MetaFile>),
    /// The decompressed file data of an image.
    Blob(Arc<Blob>),
}

impl BlobFsContent {
    fn len(&self) -> u64 {
        match self {
            BlobFsContent::Metadata(m) => m.len() as u64,
            BlobFsContent::Blob(b) => b.layout().len_bytes(),
        }
    }
}

thread_local! {
    /// The buffer a request thread reads blob ranges into.
    static READ_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The root directory's node.
const ROOT: u64 = 1;

/// How long the kernel may keep attributes and entries: a file never changes once added (a
/// name removed and added again gets a new node).
const TTL: Duration = Duration::from_secs(u32::MAX as u64);

#[derive(Debug, Default)]
struct Table {
    by_name: BTreeMap<Vec<u8>, u64>,
    by_node: HashMap<u64, Arc<BlobFsContent>>,
}

/// How many times each node is open, and whether it ever was: the kernel opens a mount's
/// backing files when it mounts and closes them when the mount is gone, so "opened, then no
/// longer open" tells that an EROFS mount ended, however it was unmounted.
#[derive(Debug, Default)]
struct Opens {
    counts: std::sync::Mutex<HashMap<u64, (usize, bool)>>,
    changed: std::sync::Condvar,
}

/// The files served, shared between the FUSE session and whoever adds and removes them.
#[derive(Debug, Clone, Default)]
pub struct BlobFiles {
    table: Arc<RwLock<Table>>,
    next_node: Arc<AtomicU64>,
    opens: Arc<Opens>,
}

impl BlobFiles {
    /// An empty set of files.
    pub fn new() -> Self {
        BlobFiles {
            next_node: Arc::new(AtomicU64::new(ROOT + 1)),
            ..Default::default()
        }
    }

    fn read_table(&self) -> std::sync::RwLockReadGuard<'_, Table> {
        self.table.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_table(&self) -> std::sync::RwLockWriteGuard<'_, Table> {
        self.table.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Serves `content` as `name` (replacing what had that name).
    pub fn add(&self, name: &str, content: BlobFsContent) {
        let node = self.next_node.fetch_add(1, Ordering::Relaxed);
        let mut t = self.write_table();
        if let Some(old) = t.by_name.insert(name.as_bytes().to_vec(), node) {
            t.by_node.remove(&old);
        }
        t.by_node.insert(node, Arc::new(content));
    }

    /// Stops serving `name`. A kernel mount still holding it open keeps reading it until it
    /// closes it: the content lives as long as its last user.
    pub fn remove(&self, name: &str) {
        let mut t = self.write_table();
        if let Some(node) = t.by_name.remove(name.as_bytes()) {
            t.by_node.remove(&node);
            let mut counts = self.opens.counts.lock().unwrap_or_else(|e| e.into_inner());
            if counts.get(&node).is_some_and(|&(open, _)| open == 0) {
                counts.remove(&node);
            }
        }
    }

    fn get(&self, node: u64) -> Option<Arc<BlobFsContent>> {
        self.read_table().by_node.get(&node).cloned()
    }

    fn node_of(&self, name: &str) -> Option<u64> {
        self.read_table().by_name.get(name.as_bytes()).copied()
    }

    fn opened(&self, node: u64) {
        let mut counts = self.opens.counts.lock().unwrap_or_else(|e| e.into_inner());
        let entry = counts.entry(node).or_insert((0, false));
        *entry = (entry.0 + 1, true);
        self.opens.changed.notify_all();
    }

    fn closed(&self, node: u64) {
        let mut counts = self.opens.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = counts.get_mut(&node) {
            entry.0 = entry.0.saturating_sub(1);
        }
        self.opens.changed.notify_all();
    }

    /// Waits until every file of `names` has been opened and is no longer open: the mount the
    /// kernel made on them is gone. Returns false if a name is not served.
    pub fn wait_released(&self, names: &[&str]) -> bool {
        let Some(nodes) = names
            .iter()
            .map(|n| self.node_of(n))
            .collect::<Option<Vec<_>>>()
        else {
            return false;
        };
        let mut counts = self.opens.counts.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let done = nodes
                .iter()
                .all(|n| counts.get(n).is_some_and(|&(open, ever)| ever && open == 0));
            if done {
                return true;
            }
            counts = self
                .opens
                .changed
                .wait(counts)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// How many times the file `name` is open now.
    pub fn open_count(&self, name: &str) -> usize {
        let Some(node) = self.node_of(name) else {
            return 0;
        };
        let counts = self.opens.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.get(&node).map_or(0, |&(open, _)| open)
    }
}

/// The FUSE file system over a [`BlobFiles`].
#[derive(Debug)]
pub struct BlobFs {
    files: BlobFiles,
    /// Open files, by handle: a removed name stays readable through handles opened before.
    open: RwLock<HashMap<u64, (u64, Arc<BlobFsContent>)>>,
    next_handle: AtomicU64,
    store: PageStore,
    /// Request threads that may be asking for a fill at once: one fewer than there are. A
    /// fill's read-ahead can wait (for a slot among the kernel's background requests, or a read
    /// of the metadata image), and only a request thread ends that wait.
    fill_permits: AtomicUsize,
}

impl BlobFs {
    /// A file system serving `files` from `threads` request threads.
    pub fn new(files: BlobFiles, threads: usize) -> Self {
        BlobFs {
            files,
            open: RwLock::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            store: PageStore::new(),
            fill_permits: AtomicUsize::new(threads.saturating_sub(1)),
        }
    }

    /// Asks for the rest of the blocks `parts` took part of (see [`crate::block_fill`]), if
    /// another request thread is left to answer the reads that causes.
    fn fill_rest(&self, blob: &Blob, parts: &[crate::blob::PartRead]) {
        if !parts.iter().any(|p| p.random) {
            return;
        }
        let taken = self
            .fill_permits
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if taken.is_ok() {
            blob.fill_rest(parts);
            self.fill_permits.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Where the session's notifier goes once the session exists (for page-cache stores).
    pub fn notifier_slot(&self) -> Arc<std::sync::OnceLock<fuser::Notifier>> {
        self.store.notifier_slot()
    }

    fn attr(node: u64, content: Option<&BlobFsContent>) -> FileAttr {
        let (kind, perm, size, nlink) = match content {
            None => (FileType::Directory, 0o500, 0, 2),
            Some(c) => (FileType::RegularFile, 0o400, c.len(), 1),
        };
        FileAttr {
            ino: INodeNo(node),
            size,
            blocks: size.div_ceil(512),
            atime: SystemTime::UNIX_EPOCH,
            mtime: SystemTime::UNIX_EPOCH,
            ctime: SystemTime::UNIX_EPOCH,
            crtime: SystemTime::UNIX_EPOCH,
            kind,
            perm,
            nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }
}

impl Filesystem for BlobFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Large reads: EROFS asks for whole read-ahead windows at once. FUSE_ASYNC_DIO lets the
        // kernel send the pieces of one direct read as concurrent requests (without it, an
        // asynchronous direct read of the blob is served one request at a time), so several
        // request threads decompress one window together.
        for wanted in [
            InitFlags::FUSE_MAX_PAGES,
            InitFlags::FUSE_ASYNC_READ,
            InitFlags::FUSE_ASYNC_DIO,
        ] {
            let _ = config.add_capabilities(wanted);
        }
        let _ = config.set_max_readahead(1 << 20);
        // A fill's read-ahead sends its blob reads as background requests (FUSE_ASYNC_DIO):
        // room for more of them than the default 16, so that a request thread asking for a
        // fill seldom waits for a slot (and never all of them: `fill_permits`).
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        use std::os::unix::ffi::OsStrExt;
        if parent.0 != ROOT {
            return reply.error(Errno::ENOENT);
        }
        let t = self.files.read_table();
        match t.by_name.get(name.as_bytes()) {
            Some(&node) => {
                let attr = Self::attr(node, t.by_node.get(&node).map(|c| c.as_ref()));
                reply.entry(&TTL, &attr, Generation(0))
            }
            // Not cached: the name may be added later.
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if ino.0 == ROOT {
            // The root's attributes never change either. Cached, a mount's three walks through
            // this directory (EROFS looks the metadata image up twice and the blob once) ask
            // nothing: with no cache each walk cost a GETATTR round trip.
            return reply.attr(&TTL, &Self::attr(ROOT, None));
        }
        match self.files.get(ino.0) {
            Some(c) => reply.attr(&TTL, &Self::attr(ino.0, Some(&c))),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.acc_mode() != OpenAccMode::O_RDONLY {
            return reply.error(Errno::EROFS);
        }
        let Some(content) = self.files.get(ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let fopen = match *content {
            BlobFsContent::Metadata(_) => FopenFlags::FOPEN_KEEP_CACHE,
            BlobFsContent::Blob(_) => FopenFlags::FOPEN_DIRECT_IO,
        };
        let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
        self.open
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(fh, (ino.0, content.clone()));
        self.files.opened(ino.0);
        if let BlobFsContent::Metadata(meta) = &*content {
            // Before the kernel can read it: EROFS reads its superblock and root right after
            // this open, and finds them in the page cache (kept: FOPEN_KEEP_CACHE). Stored on
            // this thread: the kernel has none of the file's pages yet, so nothing waits.
            // Small images (most of a boot's) then cost the kernel no read at all.
            if let Some(window) = meta.window_at(0) {
                self.store.store_now(ino, window.offset(), window.bytes());
            }
        }
        reply.opened(FileHandle(fh), fopen);
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
        let content = self
            .open
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&fh.0)
            .map(|(_, c)| c.clone());
        let Some(content) = content else {
            return reply.error(Errno::EBADF);
        };
        match &*content {
            BlobFsContent::Metadata(meta) => {
                reply.data(meta.read(offset, size));
                if let Some(window) = meta.window_at(offset) {
                    self.store.offer(ino, window.offset(), window);
                }
            }
            BlobFsContent::Blob(blob) => {
                let len = (size as u64).min(blob.layout().len_bytes().saturating_sub(offset));
                match blob.fill_read(offset, len) {
                    Some(Ok((chunk, range))) => return reply.data(&chunk.bytes()[range]),
                    Some(Err(e)) => {
                        tracing::error!("{e}");
                        return reply.error(Errno::EIO);
                    }
                    None => {}
                }
                // Each request thread reuses one buffer: a read is up to 1 MiB, and zeroing a
                // fresh one per request would cost as much as copying the data.
                READ_BUFFER.with_borrow_mut(|buf| {
                    if buf.len() < len as usize {
                        buf.resize(len as usize, 0);
                    }
                    match blob.read_at(offset, &mut buf[..len as usize]) {
                        Ok(read) => {
                            // Before the answer: the reader is then still inside its read of
                            // the EROFS mount, which the fill opens a file of.
                            self.fill_rest(blob, &read.parts);
                            reply.data(&buf[..read.len]);
                        }
                        Err(e) => {
                            tracing::error!("{e}");
                            reply.error(Errno::EIO)
                        }
                    }
                })
            }
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: fuser::ReplyEmpty,
    ) {
        let released = self
            .open
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&fh.0);
        if let Some((node, _)) = released {
            self.files.closed(node);
        }
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        use std::os::unix::ffi::OsStrExt;
        if ino.0 != ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let t = self.files.read_table();
        let dots = [
            (ROOT, FileType::Directory, &b"."[..]),
            (ROOT, FileType::Directory, b".."),
        ];
        let files = t
            .by_name
            .iter()
            .map(|(name, &node)| (node, FileType::RegularFile, name.as_slice()));
        for (i, (node, kind, name)) in dots
            .into_iter()
            .chain(files)
            .enumerate()
            .skip(offset as usize)
        {
            if reply.add(INodeNo(node), i as u64 + 1, kind, OsStr::from_bytes(name)) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(0, 0, 0, 0, 0, 4096, 255, 4096);
    }
}
