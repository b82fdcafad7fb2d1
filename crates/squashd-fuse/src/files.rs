//! Open files: open, read and release, with read-ahead for sequential readers and the page
//! store for small ones.
//!
//! A read within one block answers straight from the block in the image's data cache, without
//! copying it ([`FileData`] lends it to the reply), and once the reply is sent the rest of the
//! block goes to the kernel's page cache ([`FileData::replied`]). A read across blocks is read
//! into one buffer.

use crate::answers::Opened;
use crate::error::FsResult;
use crate::handles::HandleTable;
use crate::page_store::PageStore;
use crate::sweep::{FileSweep, FuseSweep};
use crate::tree::ServedTree;
use fuser::{Errno, FileHandle, FopenFlags, INodeNo, OpenAccMode, OpenFlags};
use squashd_core::read_ahead::{CpuGauge, ReadAheadPool, ReadState};
use squashd_core::{Chunk, FileReader};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// Read-ahead jobs waiting, at most (beyond, readers decompress their blocks themselves).
const READ_AHEAD_QUEUE: usize = 64;

/// Bytes of readers (their block lists) kept for files read without an open (no-open). Past
/// it the least recently read lose theirs: the next read opens the file again and its
/// read-ahead starts over, nothing worse. 16 MiB holds the block lists of ~80 GiB of files.
const UNOPENED_READERS_BYTES: u64 = 16 << 20;

/// Files expected in [`UNOPENED_READERS_BYTES`] (quick_cache sizes its tables from it).
const UNOPENED_READERS: usize = 4096;

/// Weighs a kept reader by the memory it holds.
#[derive(Clone, Copy)]
struct ReaderFootprint;

impl quick_cache::Weighter<u64, Arc<OpenFile>> for ReaderFootprint {
    fn weight(&self, _node: &u64, file: &Arc<OpenFile>) -> u64 {
        file.reader.footprint()
    }
}

struct OpenFile {
    reader: FileReader,
    reading: ReadState,
    sweep: FileSweep,
}

/// The files open through the mount, and the workers that serve their readers.
pub(crate) struct OpenFiles {
    handles: HandleTable<OpenFile>,
    /// The kernel opens files without asking (FUSE_NO_OPEN_SUPPORT, [`OpenFiles::set_no_open`]):
    /// no OPEN, FLUSH or RELEASE round trip per `open`/`close`, and reads name no handle.
    no_open: AtomicBool,
    /// Under no-open, each file's reader by node, made at its first read.
    unopened: quick_cache::sync::Cache<u64, Arc<OpenFile>, ReaderFootprint>,
    read_ahead: ReadAheadPool,
    /// Hands whole blocks of small reads to the kernel's page cache.
    page_store: PageStore,
    /// Brings blocks of files read at random into the page cache beside their readers.
    sweep: FuseSweep,
}

/// The bytes of one read, ready to be sent.
///
/// Call [`FileData::replied`] once they are: a small read's block then goes to the kernel's
/// page cache (a store waits for the locks of the pages it fills, which the kernel holds until
/// this reply arrives).
#[derive(Debug)]
pub struct FileData<'a> {
    bytes: Bytes,
    /// Where the rest of a block goes, when this read took only part of it.
    store: Option<Store<'a>>,
}

#[derive(Debug)]
enum Bytes {
    Empty,
    /// Bytes `start..start + len` of a cached chunk, lent without copying.
    Cached {
        chunk: Chunk,
        start: usize,
        len: usize,
    },
    Owned(Vec<u8>),
}

struct Store<'a> {
    page_store: &'a PageStore,
    node: INodeNo,
    offset: u64,
}

impl std::fmt::Debug for Store<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("node", &self.node)
            .field("offset", &self.offset)
            .finish_non_exhaustive()
    }
}

impl FileData<'_> {
    /// The bytes read: fewer than asked at the end of the file, none at or past it.
    pub fn bytes(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Empty => &[],
            // The range was checked against the chunk when it was made.
            Bytes::Cached { chunk, start, len } => {
                chunk.bytes().get(*start..*start + *len).unwrap_or_default()
            }
            Bytes::Owned(v) => v,
        }
    }

    /// Whether [`FileData::replied`] has a block to offer to the page cache.
    pub fn acts_when_replied(&self) -> bool {
        self.store.is_some() && matches!(self.bytes, Bytes::Cached { .. })
    }

    /// Tells the file system that the bytes were sent: the rest of their block is offered to
    /// the kernel's page cache, so that the next small reads of the block never reach the
    /// daemon.
    pub fn replied(self) {
        if let (Some(store), Bytes::Cached { chunk, .. }) = (self.store, self.bytes) {
            store.page_store.offer(store.node, store.offset, chunk);
        }
    }
}

impl OpenFiles {
    /// Open files whose sequential readers get `window` chunks decompressed ahead of them by
    /// `read_ahead_threads` threads, both held back when `gauge` says the CPUs are busy.
    pub(crate) fn new(read_ahead_threads: usize, window: u64, gauge: CpuGauge) -> Self {
        let page_store = PageStore::new();
        let sweep = FuseSweep::new(
            read_ahead_threads > 0 && window > 0,
            gauge,
            page_store.notifier_slot(),
        );
        OpenFiles {
            handles: HandleTable::new(),
            no_open: AtomicBool::new(false),
            unopened: quick_cache::sync::Cache::with_weighter(
                UNOPENED_READERS,
                UNOPENED_READERS_BYTES,
                ReaderFootprint,
            ),
            read_ahead: ReadAheadPool::with_gauge(
                read_ahead_threads,
                window,
                READ_AHEAD_QUEUE,
                gauge,
            ),
            page_store,
            sweep,
        }
    }

    /// Where the session's notifier goes, once the session exists (see [`PageStore`]).
    pub(crate) fn notifier_slot(&self) -> Arc<OnceLock<crate::server::Notifier>> {
        self.page_store.notifier_slot()
    }

    /// The random sweep's policy, whose counters `status` shows.
    pub(crate) fn sweep_policy(&self) -> Arc<squashd_core::read_ahead::RandomSweep> {
        self.sweep.policy()
    }

    /// Files open now.
    pub(crate) fn open_count(&self) -> usize {
        self.handles.len()
    }

    /// Whether to answer OPEN with ENOSYS, which makes the kernel stop sending OPEN and
    /// RELEASE for good (it must have offered FUSE_NO_OPEN_SUPPORT): reads then come without a
    /// handle and find their file's reader by node.
    pub(crate) fn set_no_open(&self, no_open: bool) {
        self.no_open.store(no_open, Ordering::Relaxed);
    }

    /// Whether the kernel was told to open files without asking.
    fn no_open(&self) -> bool {
        self.no_open.load(Ordering::Relaxed)
    }

    fn open_reader(&self, tree: &ServedTree, node: INodeNo) -> FsResult<OpenFile> {
        let inode = tree.inode(node)?;
        if inode.is_dir() {
            return Err(Errno::EISDIR.into());
        }
        let reader = tree.image().open_file(&inode).map_err(|e| tree.error(e))?;
        Ok(OpenFile {
            reader,
            reading: ReadState::default(),
            sweep: FileSweep::default(),
        })
    }

    pub(crate) fn open(
        &self,
        tree: &ServedTree,
        node: INodeNo,
        flags: OpenFlags,
    ) -> FsResult<Opened> {
        if self.no_open() {
            return Err(Errno::ENOSYS.into());
        }
        if flags.acc_mode() != OpenAccMode::O_RDONLY {
            return Err(Errno::EROFS.into());
        }
        let file = self.open_reader(tree, node)?;
        tree.probe().opened();
        let fh = self.handles.insert(file);
        // The image never changes: what the kernel cached of the file stays valid.
        Ok(Opened {
            fh: FileHandle(fh),
            flags: FopenFlags::FOPEN_KEEP_CACHE,
        })
    }

    pub(crate) fn read(
        &self,
        tree: &ServedTree,
        node: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
    ) -> FsResult<FileData<'_>> {
        let file = if fh.0 == 0 && self.no_open() {
            self.unopened
                .get_or_insert_with(&node.0, || self.open_reader(tree, node).map(Arc::new))?
        } else {
            self.handles.get(fh.0).ok_or(Errno::EBADF)?
        };
        let reader = &file.reader;
        let file_size = reader.size();
        if offset >= file_size || size == 0 {
            return Ok(FileData {
                bytes: Bytes::Empty,
                store: None,
            });
        }
        // Queue what follows (where the core's read-ahead policy says it pays) before
        // decompressing this block, so both run at once.
        let streaming = self
            .read_ahead
            .on_read(&file.reading, reader, offset, size as u64);
        let end = file_size.min(offset + size as u64);
        let bs = reader.block_size() as u64;
        let (first, last) = (offset / bs, (end - 1) / bs);
        if first == last {
            // Within one block: reply straight from the cached block, no copy.
            let chunk = reader.chunk(first).map_err(|e| tree.error(e))?;
            let start = (offset - first * bs) as usize;
            let len = (end - offset) as usize;
            // A small read: give the kernel the rest of the block too, once replied.
            let store = (len < chunk.len()).then_some(Store {
                page_store: &self.page_store,
                node,
                offset: first * bs,
            });
            if store.is_some() {
                self.sweep
                    .on_small_read(&file.sweep, reader, node, first, !streaming);
            }
            let bytes = match &chunk {
                Chunk::Zeros(_) => Bytes::Owned(vec![0; len]),
                Chunk::Data { .. } => {
                    if chunk.bytes().get(start..start + len).is_none() {
                        return Err(Errno::EIO.into());
                    }
                    Bytes::Cached { chunk, start, len }
                }
            };
            return Ok(FileData { bytes, store });
        }
        let mut buf = vec![0u8; (end - offset) as usize];
        let n = reader
            .read_at(offset, &mut buf)
            .map_err(|e| tree.error(e))?;
        buf.truncate(n);
        Ok(FileData {
            bytes: Bytes::Owned(buf),
            store: None,
        })
    }

    pub(crate) fn release(&self, tree: &ServedTree, fh: FileHandle) {
        self.handles.remove(fh.0);
        tree.probe().closed();
    }
}
