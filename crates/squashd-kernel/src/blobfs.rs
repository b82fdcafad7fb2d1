//! The blob file system: one FUSE mount per daemon, a flat directory of read-only files the
//! kernel's EROFS mounts are backed by ([`BlobFiles`]). Each image served through the kernel
//! path adds two: `NAME.meta`, its EROFS metadata image (bytes in memory), and `NAME.blob`,
//! its file data ([`Blob`]). EROFS needs its backing files on a file system with `read_folio`,
//! which FUSE has and tmpfs has not, so the metadata image never touches a disk either.
//!
//! [`BlobFs`] is a [`FuseFilesystem`] of squashd-fuse's session: each operation answers one
//! request with an [`FsResult`], so its answers are tested in-process (tests/blobfs_answers.rs)
//! without the kernel. It shares the FUSE path's handle table, page store and errno mapping.
//!
//! The blob is opened for direct I/O (FOPEN_DIRECT_IO): EROFS keeps the data it reads in its
//! own page cache, so caching it here too would hold every byte twice. A random read of part of
//! a block has EROFS read the rest of the block too ([`crate::block_fill`]), so that the block
//! is decompressed once and its other pages cost no round trip. Apart from those fills, nothing
//! in the daemon reads through these files or through the EROFS mounts on them; only the
//! kernel does.

use crate::blob::Blob;
use crate::blob_files::ROOT;
pub use crate::blob_files::{BlobFiles, BlobFsContent};
use crate::meta_file::{MetaFile, MetaWindow};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, OpenAccMode, OpenFlags,
};
use squashd_core::Chunk;
use squashd_fuse::fs::{
    Attr, DirectoryEntry, DirectoryReplier, Entry, ListingTurn, Opened, StatFs,
};
use squashd_fuse::page_store::{PageStore, StoreBytes};
use squashd_fuse::server::{
    abi::init_flags, own_mount_waits, DirentBuffer, FuseFilesystem, InitSettings, KernelOffer,
    Notifier, ReadData, RequestContext,
};
use squashd_fuse::{FsError, FsResult, HandleTable};
use std::ffi::OsStr;
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

thread_local! {
    /// The buffer a request thread reads blob ranges into: a read is up to 1 MiB, and zeroing
    /// a fresh one per request would cost as much as copying the data. Lent to the answer and
    /// given back once it is sent, on the same thread.
    static READ_BUFFER: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// How long the kernel may keep attributes and entries: a file never changes once added (a
/// name removed and added again gets a new node).
const TTL: Duration = Duration::from_secs(u32::MAX as u64);

/// An open file of the blob file system: its node and what it holds (a removed name stays
/// readable through handles opened before).
#[derive(Debug)]
struct OpenBlobFile {
    node: u64,
    content: Arc<BlobFsContent>,
}

/// The blob file system over a [`BlobFiles`].
#[derive(Debug)]
pub struct BlobFs {
    files: BlobFiles,
    open: HandleTable<OpenBlobFile>,
    store: PageStore,
    /// Request threads that may be asking for a fill at once: one fewer than there are. A
    /// fill's read-ahead can wait (for a slot among the kernel's background requests, or a read
    /// of the metadata image), and only a request thread ends that wait. Over the ring, the
    /// ring's own limit too ([`own_mount_waits`]).
    fill_threads_max: usize,
    /// Request threads asking for a fill now.
    filling_threads: AtomicUsize,
}

/// The bytes of one read of the blob file system, lent to its answer.
#[derive(Debug)]
pub enum BlobData<'a> {
    /// Bytes of a metadata image; once sent, the window around them goes to the page cache.
    Metadata {
        /// The metadata image.
        file: Arc<MetaFile>,
        /// The bytes read.
        range: Range<usize>,
        /// The window to store after the answer, and where.
        store: Option<(&'a PageStore, INodeNo, MetaWindow)>,
    },
    /// Bytes of a block in the data cache (a fill's read), not copied.
    Cached(Chunk, Range<usize>),
    /// Bytes read into the request thread's buffer, given back once sent.
    Buffer(Vec<u8>, usize),
}

impl ReadData for BlobData<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            BlobData::Metadata { file, range, .. } => {
                file.bytes().get(range.clone()).unwrap_or_default()
            }
            BlobData::Cached(chunk, range) => chunk.bytes().get(range.clone()).unwrap_or_default(),
            BlobData::Buffer(buf, len) => buf.get(..*len).unwrap_or_default(),
        }
    }

    fn replied(self) {
        match self {
            BlobData::Metadata {
                store: Some((store, node, window)),
                ..
            } => store.offer(node, window.offset(), window),
            BlobData::Buffer(buf, _) => READ_BUFFER.set(buf),
            _ => {}
        }
    }
}

impl BlobFs {
    /// A file system serving `files` from `threads` request threads.
    pub fn new(files: BlobFiles, threads: usize) -> Self {
        BlobFs {
            files,
            open: HandleTable::new(),
            store: PageStore::new(),
            fill_threads_max: threads.saturating_sub(1),
            filling_threads: AtomicUsize::new(0),
        }
    }

    /// Where the session's notifier goes once the session exists (for page-cache stores).
    pub fn notifier_slot(&self) -> Arc<OnceLock<Notifier>> {
        self.store.notifier_slot()
    }

    /// Files open now.
    pub fn open_handles(&self) -> usize {
        self.open.len()
    }

    /// Asks for the rest of the blocks `parts` took part of (see [`crate::block_fill`]), if
    /// another request thread is left to answer the reads that causes.
    fn fill_rest(&self, blob: &Blob, parts: &[crate::blob::PartRead]) {
        if !parts.iter().any(|p| p.random) {
            return;
        }
        // Fewer fills at once than there are threads to answer their reads: this file system's
        // own count on /dev/fuse, and the ring's (none at all while one thread answers it).
        let limit = self
            .fill_threads_max
            .min(own_mount_waits().unwrap_or(usize::MAX));
        let taken = self
            .filling_threads
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            });
        if taken.is_ok() {
            blob.fill_rest(parts);
            self.filling_threads.fetch_sub(1, Ordering::AcqRel);
        }
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

    /// Reads `len` bytes at `offset` of `blob`.
    fn read_blob(&self, blob: &Blob, offset: u64, len: u64) -> FsResult<BlobData<'_>> {
        match blob.fill_read(offset, len) {
            Some(Ok((chunk, range))) => return Ok(BlobData::Cached(chunk, range)),
            Some(Err(e)) => return Err(FsError::from_image(e)),
            None => {}
        }
        let mut buf = READ_BUFFER.take();
        // `len` is at most the kernel's largest read (MAX_PAGES pages).
        let len = usize::try_from(len).map_err(|_| FsError::from(Errno::EINVAL))?;
        if buf.len() < len {
            buf.resize(len, 0);
        }
        match blob.read_at(offset, &mut buf[..len]) {
            Ok(read) => {
                // Before the answer: the reader is then still inside its read of the EROFS
                // mount, which the fill opens a file of.
                self.fill_rest(blob, &read.parts);
                Ok(BlobData::Buffer(buf, read.len))
            }
            Err(e) => {
                READ_BUFFER.set(buf);
                Err(FsError::from_image(e))
            }
        }
    }
}

impl FuseFilesystem for BlobFs {
    type Data<'a> = BlobData<'a>;

    fn init(&self, kernel: &KernelOffer) -> InitSettings {
        // Large reads: EROFS asks for whole read-ahead windows at once. FUSE_ASYNC_DIO lets the
        // kernel send the pieces of one direct read as concurrent requests (without it, an
        // asynchronous direct read of the blob is served one request at a time), so several
        // request threads decompress one window together.
        InitSettings {
            flags: init_flags::MAX_PAGES
                | init_flags::ASYNC_READ
                | init_flags::ASYNC_DIO
                | init_flags::BIG_WRITES,
            max_readahead: kernel.max_readahead.min(1 << 20),
            // A fill's read-ahead sends its blob reads as background requests (FUSE_ASYNC_DIO):
            // room for more of them than the default 16, so that a request thread asking for a
            // fill seldom waits for a slot (and never all of them: `fill_threads_max`).
            max_background: 64,
            congestion_threshold: 48,
        }
    }

    /// A request thread may ask EROFS to read ahead (a block fill), which reads the blob through
    /// this same connection, and waits for that while its requests are answered by others.
    fn answers_may_wait(&self) -> bool {
        true
    }

    fn lookup(&self, _ctx: &RequestContext, parent: INodeNo, name: &OsStr) -> FsResult<Entry> {
        if parent.0 != ROOT {
            return Err(Errno::ENOENT.into());
        }
        let t = self.files.read_table();
        match t.by_name.get(name.as_bytes()) {
            Some(&node) => Ok(Entry {
                attr: Self::attr(node, t.by_node.get(&node).map(|c| c.as_ref())),
                ttl: TTL,
                generation: Generation(0),
            }),
            // Not a negative entry: the name may be added later.
            None => Err(Errno::ENOENT.into()),
        }
    }

    fn getattr(
        &self,
        _ctx: &RequestContext,
        node: INodeNo,
        _fh: Option<FileHandle>,
    ) -> FsResult<Attr> {
        if node.0 == ROOT {
            // The root's attributes never change either. Cached, a mount's three walks through
            // this directory (EROFS looks the metadata image up twice and the blob once) ask
            // nothing: with no cache each walk cost a GETATTR round trip.
            return Ok(Attr {
                attr: Self::attr(ROOT, None),
                ttl: TTL,
            });
        }
        match self.files.get(node.0) {
            Some(c) => Ok(Attr {
                attr: Self::attr(node.0, Some(&c)),
                ttl: TTL,
            }),
            None => Err(Errno::ENOENT.into()),
        }
    }

    fn open(&self, _ctx: &RequestContext, node: INodeNo, flags: OpenFlags) -> FsResult<Opened> {
        if flags.acc_mode() != OpenAccMode::O_RDONLY {
            return Err(Errno::EROFS.into());
        }
        if node.0 == ROOT {
            return Err(Errno::EISDIR.into());
        }
        let content = self.files.get(node.0).ok_or(Errno::ENOENT)?;
        let fopen = match *content {
            BlobFsContent::Metadata(_) => FopenFlags::FOPEN_KEEP_CACHE,
            BlobFsContent::Blob(_) => FopenFlags::FOPEN_DIRECT_IO,
        };
        let fh = self.open.insert(OpenBlobFile {
            node: node.0,
            content: content.clone(),
        });
        self.files.opened(node.0);
        if let BlobFsContent::Metadata(meta) = &*content {
            // Before the kernel can read it: EROFS reads its superblock and root right after
            // this open, and finds them in the page cache (kept: FOPEN_KEEP_CACHE). Stored on
            // this thread: the kernel has none of the file's pages yet, so nothing waits.
            // Small images (most of a boot's) then cost the kernel no read at all.
            if let Some(window) = meta.window_at(0) {
                self.store.store_now(node, window.offset(), window.bytes());
            }
        }
        Ok(Opened {
            fh: FileHandle(fh),
            flags: fopen,
        })
    }

    fn read(
        &self,
        _ctx: &RequestContext,
        node: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
    ) -> FsResult<BlobData<'_>> {
        let file = self.open.get(fh.0).ok_or(Errno::EBADF)?;
        match &*file.content {
            BlobFsContent::Metadata(meta) => Ok(BlobData::Metadata {
                file: meta.clone(),
                range: meta.read_range(offset, size),
                store: meta
                    .window_at(offset)
                    .map(|window| (&self.store, node, window)),
            }),
            BlobFsContent::Blob(blob) => {
                let len = u64::from(size).min(blob.layout().len_bytes().saturating_sub(offset));
                self.read_blob(blob, offset, len)
            }
        }
    }

    fn release(&self, _ctx: &RequestContext, _node: INodeNo, fh: FileHandle) -> FsResult<()> {
        if let Some(file) = self.open.remove(fh.0) {
            self.files.closed(file.node);
        }
        Ok(())
    }

    fn opendir(&self, _ctx: &RequestContext, node: INodeNo, _flags: OpenFlags) -> FsResult<Opened> {
        if node.0 != ROOT {
            return Err(Errno::ENOTDIR.into());
        }
        // Files come and go: the listing is not cached.
        Ok(Opened {
            fh: FileHandle(0),
            flags: FopenFlags::empty(),
        })
    }

    fn readdir<'a>(
        &'a self,
        _ctx: &RequestContext,
        node: INodeNo,
        _fh: FileHandle,
        offset: u64,
        out: &mut DirentBuffer,
    ) -> FsResult<Option<ListingTurn<'a>>> {
        if node.0 != ROOT {
            return Err(Errno::ENOTDIR.into());
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
            .skip(usize::try_from(offset).unwrap_or(usize::MAX))
        {
            let entry = DirectoryEntry {
                node: INodeNo(node),
                offset: i as u64 + 1,
                kind,
                name: OsStr::from_bytes(name),
            };
            if out.add(entry) {
                break;
            }
        }
        Ok(None)
    }

    fn statfs(&self, _ctx: &RequestContext, _node: INodeNo) -> FsResult<StatFs> {
        Ok(StatFs {
            blocks: 0,
            bfree: 0,
            bavail: 0,
            files: 0,
            ffree: 0,
            bsize: 4096,
            namelen: 255,
            frsize: 4096,
        })
    }
}
