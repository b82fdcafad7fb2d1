//! What every object of one opened image shares: the image, its read-ahead pool, its remote
//! source's counters, and the number it is known by as `st_dev`.

use crate::errors::{OpError, OpResult};
use crate::parents::ParentDirs;
use crate::siblings::SiblingReadAhead;
use squashd_core::container::Located;
use squashd_core::read_ahead::{ReadAheadPool, ReadState};
use squashd_core::{FileReader, Image, Inode};
use squashd_remote::RemoteSource;
use std::sync::atomic::{AtomicU64, Ordering};

/// Jobs the read-ahead pool may hold waiting (a full queue drops new ones: readers then
/// decompress those blocks themselves), as the FUSE path's.
const READ_AHEAD_QUEUE: usize = 64;
/// The blocks at the start of a file whose loads a whole-file reader looks at before it reads:
/// those read-ahead across files loads.
const HELP_BLOCKS: u64 = 16;

/// An opened image and what its readers share.
pub struct Shared {
    /// The image.
    pub image: Image,
    /// Its remote source, for its counters.
    pub remote: Option<RemoteSource>,
    /// Where its container said it is.
    pub located: Option<Located>,
    /// Decompression ahead of sequential readers; `None` when read-ahead is off.
    pub prefetch: Option<ReadAheadPool>,
    /// Decompression of the next files of a directory read file after file; `None` when
    /// read-ahead is off.
    pub siblings: Option<SiblingReadAhead>,
    /// Threads that may split one large read between them (1: none).
    pub read_threads: usize,
    /// Directories recently resolved as paths' parents.
    pub parents: ParentDirs,
    /// `st_dev` of its files: a number of its own in this process, so that `os.path.samefile`
    /// tells files of two images apart.
    pub dev: u64,
}

impl Drop for Shared {
    /// Read-ahead pools join their threads when dropped, and a thread may be in the middle of a
    /// job that needs the GIL (a fetch from a server that runs in this interpreter). The last
    /// reference to an image is often dropped with the GIL held (by `close()`, or when Python
    /// frees a file object), so the pools are dropped on a thread of their own.
    fn drop(&mut self) {
        let pools = (self.prefetch.take(), self.siblings.take());
        if pools.0.is_none() && pools.1.is_none() {
            return;
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("squashd-close".into())
            .spawn(move || {
                if let Ok(pools) = rx.recv() {
                    drop::<(Option<ReadAheadPool>, Option<SiblingReadAhead>)>(pools);
                }
            });
        match spawned {
            Ok(_) => {
                let _ = tx.send(pools);
            }
            // No thread to spare: joined here, as before.
            Err(_) => drop(pools),
        }
    }
}

impl Shared {
    /// `image` read with `threads` threads decompressing ahead of sequential readers (and
    /// splitting large reads), `window_bytes` ahead of each.
    pub fn new(
        image: Image,
        remote: Option<RemoteSource>,
        located: Option<Located>,
        threads: usize,
        window_bytes: u64,
    ) -> Self {
        static NEXT_DEV: AtomicU64 = AtomicU64::new(1);
        let window = window_bytes / u64::from(image.block_size().max(1));
        Shared {
            prefetch: (threads > 0 && window > 0)
                .then(|| ReadAheadPool::new(threads, window, READ_AHEAD_QUEUE)),
            siblings: (threads > 0).then(|| {
                // The reader is one of the threads decompressing: it does what the workers
                // have not done when it comes to a file. Workers that outnumber the other cores
                // would take turns with it on its own (see `siblings`).
                let workers = threads.saturating_sub(1).max(1);
                SiblingReadAhead::new(workers, workers >= squashd_core::cores())
            }),
            read_threads: threads.max(1),
            image,
            remote,
            located,
            parents: ParentDirs::default(),
            dev: NEXT_DEV.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The inode at `path`, following symlinks as `os.stat` (or not, as `os.lstat`).
    pub fn resolve(&self, path: &[u8], follow: bool) -> OpResult<Inode> {
        Ok(self.parents.resolve_in(&self.image, path, follow)?.0)
    }

    /// A reader of the regular file at `path` (symlinks followed). A file read after its
    /// neighbour in the same directory has the files after it read ahead.
    pub fn open_file(&self, path: &[u8]) -> OpResult<FileReader> {
        let (inode, parent, listing) = self.parents.resolve_in(&self.image, path, true)?;
        if let (Some(siblings), Some((dir, name))) = (&self.siblings, &parent) {
            if inode.kind == squashd_core::FileKind::File {
                // The directory's path as the reader names it (`walk_order` follows the walk
                // by these texts).
                let dir_path = match path.iter().rposition(|&b| b == b'/') {
                    Some(at) => &path[..at],
                    None => &path[..0],
                };
                siblings.on_read(&self.image, &self.parents, dir, dir_path, listing, name);
            }
        }
        if inode.is_dir() {
            return Err(OpError::errno(libc::EISDIR));
        }
        if inode.kind != squashd_core::FileKind::File {
            // The kernel would open a device or fifo; an image holds none of their contents.
            return Err(OpError::Errno(
                libc::EINVAL,
                format!("inode {} is not a regular file", inode.number),
            ));
        }
        Ok(self.image.open_file(&inode)?)
    }

    /// Reads `out.len()` bytes (fewer at the end of the file) at `offset` of `reader`'s file.
    /// A read of several blocks is split between the read threads; a sequential reader's next
    /// blocks are queued for read-ahead.
    ///
    /// A read of the whole file (`read_bytes`, or `read()` of a file just opened), and with
    /// read-ahead off any read, decompresses the blocks it takes whole and the data cache does
    /// not hold straight into `out` and does not cache them (`FileReader::read_once_at`): its
    /// caller keeps the bytes (a new bytes object). Cached, each would be decompressed into a
    /// new allocation of the cache (fresh pages: a 256 MiB file read in 1 MiB reads took 33,000
    /// page faults), copied out, and evict what the cache held (fragment blocks that the next
    /// files of a walk share). Blocks read in part, and tail ends, go through the cache. With
    /// read-ahead on, a stream's next blocks are queued for the workers, which load them into
    /// the cache: a block the reader came to first and decompressed past the cache, its job
    /// would decompress again, so those reads go through the cache (as the kernel path's reads
    /// of blocks queued for read-ahead do, `squashd_core::read_policy`).
    pub fn read(
        &self,
        reader: &FileReader,
        state: Option<&ReadState>,
        offset: u64,
        out: &mut [u8],
    ) -> OpResult<usize> {
        let size = reader.size();
        if offset >= size || out.is_empty() {
            return Ok(0);
        }
        let len = (size - offset).min(out.len() as u64) as usize;
        let out = &mut out[..len];
        if let (Some(prefetch), Some(state)) = (&self.prefetch, state) {
            prefetch.on_read(state, reader, offset, len as u64);
        }
        let whole_file = offset == 0 && len as u64 == size;
        if let (true, Some(siblings)) = (whole_file, &self.siblings) {
            // Blocks of this file a worker is decompressing now (the first few, which read-ahead
            // across files loads): decompress the next queued files meanwhile, rather than wait.
            for index in 0..reader.chunk_count().min(HELP_BLOCKS) {
                while reader.chunk_loading(index) && siblings.help_one(&self.image) {}
            }
        }
        let once = whole_file || self.prefetch.is_none();
        crate::read::read_at(reader, offset, out, self.read_threads, once)?;
        Ok(len)
    }
}
