//! The library's API: an opened SquashFS image that many threads read at once.
//!
//! `Image` is a cheap handle (an `Arc`); every method takes `&self`. Opening reads the superblock
//! and the compressor options only; tables are loaded on first use and their entries are read
//! through the metadata cache, so nothing at open grows with the number of files.

mod block_pool;
mod blocks;
mod caches;
mod dir;
mod file;
mod inode;
mod metadata;
mod tables;
mod xattr;

pub(crate) use blocks::loads_on_this_thread;
pub(crate) use blocks::MetadataBlock;
pub use caches::{CacheBudgets, Caches};
pub use dir::DirEntry;
pub use file::{Chunk, ChunkRead, FileReader};
use inode::InodeDetail;
pub use inode::{Inode, InodeId};
pub use xattr::Xattr;

use crate::cache::{next_image_id, CacheCounters, CacheStats};
use crate::error::{Error, Result};
use crate::format::superblock::{Flags, Superblock, SUPERBLOCK_SIZE};
use crate::format::{compressor_options::CompressorOptions, FormatError};
use crate::read_ahead::{ReadAheadCounters, ReadAheadStats};
use crate::source::{FileSource, Source};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// How to open an image. More options may come: start from `OpenOptions::default()`.
///
/// ```
/// use squashd_core::{CacheBudgets, OpenOptions};
/// let options = OpenOptions::default()
///     .with_offset(188_392)
///     .with_budgets(CacheBudgets::new(16 << 20, 64 << 20));
/// assert_eq!(options.offset, 188_392);
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct OpenOptions {
    /// Byte offset of the image in the file (an AppImage or SIF container holds one inside).
    pub offset: u64,
    /// Cache budgets, used when `caches` is `None`.
    pub budgets: CacheBudgets,
    /// Caches shared with other images (one budget for many images); `None` gives this image
    /// caches of its own sized by `budgets`.
    pub caches: Option<Arc<Caches>>,
}

impl OpenOptions {
    /// These options with the image at byte `offset` of its file.
    pub fn with_offset(mut self, offset: u64) -> Self {
        self.offset = offset;
        self
    }

    /// These options with caches of their own sized by `budgets`.
    pub fn with_budgets(mut self, budgets: CacheBudgets) -> Self {
        self.budgets = budgets;
        self
    }

    /// These options with `caches` shared with other images.
    pub fn with_caches(mut self, caches: Arc<Caches>) -> Self {
        self.caches = Some(caches);
        self
    }
}

/// This image's own share of the cache counters (the caches may serve other images too).
#[derive(Debug, Default)]
struct ImageCounters {
    metadata: CacheCounters,
    data: CacheCounters,
    compressed: CacheCounters,
}

/// Counters of one image: its caches and the bytes it read from its source. More counters may
/// come.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImageStats {
    /// Decompressed metadata blocks (inodes, directories, tables).
    pub metadata: CacheStats,
    /// Decompressed data blocks and fragments.
    pub data: CacheStats,
    /// Compressed data blocks (the optional tier; zero budget when disabled).
    pub compressed: CacheStats,
    /// Bytes read from the image's source.
    pub bytes_read: u64,
    /// Reads issued to the image's source.
    pub reads: u64,
    /// What read-ahead decompressed for this image's readers, and what became of it.
    pub read_ahead: ReadAheadStats,
}

/// An opened SquashFS image. Clone it freely: clones share caches and tables.
#[derive(Clone)]
pub struct Image {
    inner: Arc<ImageInner>,
}

pub(crate) struct ImageInner {
    name: Arc<str>,
    source: Box<dyn Source>,
    offset: u64,
    superblock: Superblock,
    compressor_options: Option<CompressorOptions>,
    cache_id: u32,
    caches: Arc<Caches>,
    bytes_read: AtomicU64,
    reads: AtomicU64,
    counters: ImageCounters,
    read_ahead: Arc<ReadAheadCounters>,
    /// Data-block buffers whole-file readers are done with, for the next loads.
    block_pool: block_pool::BlockPool,
    ids: OnceLock<Vec<u32>>,
    fragment_index: OnceLock<Vec<u64>>,
    export_index: OnceLock<Vec<u64>>,
    xattr_table: OnceLock<tables::XattrTable>,
}

impl Drop for ImageInner {
    /// A closed image's blocks would only crowd the others out of shared caches.
    fn drop(&mut self) {
        if Arc::strong_count(&self.caches) > 1 {
            self.caches.forget_image(self.cache_id);
        }
    }
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Image")
            .field("name", &self.inner.name)
            .field("offset", &self.inner.offset)
            .finish_non_exhaustive()
    }
}

impl Image {
    /// Opens the image file at `path`.
    pub fn open(path: impl AsRef<Path>, options: &OpenOptions) -> Result<Image> {
        let path = path.as_ref();
        let name: Arc<str> = path.display().to_string().into();
        let source = FileSource::open(path).map_err(|error| Error::Open {
            image: name.clone(),
            error,
        })?;
        Self::from_source(Box::new(source), name, options)
    }

    /// Opens an image read from `source`, calling it `name` in errors.
    pub fn from_source(
        source: Box<dyn Source>,
        name: Arc<str>,
        options: &OpenOptions,
    ) -> Result<Image> {
        let file_len = source.len().map_err(|error| Error::Open {
            image: name.clone(),
            error,
        })?;
        let image_len = file_len
            .checked_sub(options.offset)
            .ok_or_else(|| Error::Corrupt {
                image: name.clone(),
                image_start: options.offset,
                position: 0,
                what: format!(
                    "offset {} is past the end of the {file_len}-byte file",
                    options.offset
                ),
            })?;
        let caches = options
            .caches
            .clone()
            .unwrap_or_else(|| Arc::new(Caches::new(&options.budgets)));
        // The superblock comes first: everything else is sized and checked against it.
        if image_len < SUPERBLOCK_SIZE as u64 {
            return Err(Error::Corrupt {
                image: name.clone(),
                image_start: options.offset,
                position: 0,
                what: format!("{image_len} bytes is too small for a SquashFS image"),
            });
        }
        let mut raw = [0u8; SUPERBLOCK_SIZE];
        source
            .read_exact_at(&mut raw, options.offset)
            .map_err(|error| Error::Io {
                image: name.clone(),
                offset: options.offset,
                len: SUPERBLOCK_SIZE,
                error,
            })?;
        let superblock = Superblock::parse(&raw, image_len)
            .map_err(|e| format_error(&name, options.offset, 0, e))?;
        let block_pool = block_pool::BlockPool::new(superblock.block_size as usize);
        let mut inner = ImageInner {
            name,
            source,
            offset: options.offset,
            superblock,
            compressor_options: None,
            cache_id: next_image_id(),
            caches,
            bytes_read: AtomicU64::new(SUPERBLOCK_SIZE as u64),
            reads: AtomicU64::new(1),
            counters: ImageCounters::default(),
            read_ahead: Arc::default(),
            block_pool,
            ids: OnceLock::new(),
            fragment_index: OnceLock::new(),
            export_index: OnceLock::new(),
            xattr_table: OnceLock::new(),
        };
        if inner.superblock.flags.contains(Flags::COMPRESSOR_OPTIONS) {
            let block = inner.metadata_block(SUPERBLOCK_SIZE as u64)?;
            let options = CompressorOptions::parse(inner.superblock.compressor, &block.data)
                .map_err(|e| inner.format_error(SUPERBLOCK_SIZE as u64, e))?;
            inner.compressor_options = Some(options);
        }
        Ok(Image {
            inner: Arc::new(inner),
        })
    }

    /// The image's name (the path it was opened from).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The byte offset of the image in its file.
    pub fn offset(&self) -> u64 {
        self.inner.offset
    }

    /// The parsed superblock.
    pub fn superblock(&self) -> &Superblock {
        &self.inner.superblock
    }

    /// Whether a read of the image may wait for a network ([`Source::may_stall`]).
    pub fn may_stall(&self) -> bool {
        self.inner.source.may_stall()
    }

    /// The data block size in bytes: the unit files are stored, read and cached in.
    pub fn block_size(&self) -> u32 {
        self.inner.superblock.block_size
    }

    /// The image's size in bytes (the superblock's `bytes_used`), from its offset on.
    pub fn image_size(&self) -> u64 {
        self.inner.superblock.bytes_used
    }

    /// The number of inodes in the image: inode numbers run from 1 to this.
    pub fn inode_count(&self) -> u32 {
        self.inner.superblock.inode_count
    }

    /// The compressor options the image was made with, if it records them.
    pub fn compressor_options(&self) -> Option<&CompressorOptions> {
        self.inner.compressor_options.as_ref()
    }

    /// Drops this image's blocks from the metadata cache (the shared cache keeps other images'):
    /// after a walk that reads every inode and directory once and will not be repeated, as a
    /// translation for the kernel path does, they would only hold memory. What is needed again
    /// is read again.
    pub fn forget_metadata(&self) {
        self.inner.caches.metadata.forget_image(self.inner.cache_id);
    }

    /// The caches this image uses (possibly shared with other images).
    pub fn caches(&self) -> &Arc<Caches> {
        &self.inner.caches
    }

    /// This image's counters: its hits, misses, decompressions and waits in each cache tier,
    /// and the bytes it read from its source. Capacity, residency and evictions are those of
    /// the caches, which may be shared with other images (see [`Caches::stats`]): an eviction
    /// is not attributed to an image.
    pub fn stats(&self) -> ImageStats {
        let caches = self.inner.caches.stats();
        let own = &self.inner.counters;
        let tier = |own: &CacheCounters, shared: CacheStats| CacheStats {
            // Only the cache sees evictions; the image's own stripes never count them.
            evictions: shared.evictions,
            ..own.snapshot(shared.capacity_bytes, shared.resident_bytes, shared.entries)
        };
        ImageStats {
            metadata: tier(&own.metadata, caches.metadata),
            data: tier(&own.data, caches.data),
            compressed: tier(&own.compressed, caches.compressed),
            bytes_read: self.inner.bytes_read.load(Ordering::Relaxed),
            reads: self.inner.reads.load(Ordering::Relaxed),
            read_ahead: self.inner.read_ahead.snapshot(),
        }
    }

    /// Asks the source to fetch the image's metadata (inode and directory tables and the lookup
    /// tables, which lie at its end) in the background: a cold walk then finds it read in a few
    /// large sequential reads instead of thousands of 8 KiB ones as it goes. It is a small part
    /// of an image (a measured share is in `bench/results/notes-from-core-comments.md`), and for
    /// a file the page cache may drop it again.
    pub fn prefetch_metadata(&self) {
        let sb = &self.inner.superblock;
        let start = sb.inode_table_start.min(sb.bytes_used);
        self.prefetch(start, sb.bytes_used - start);
    }

    /// Asks the source to fetch image bytes `pos..pos + len` (positions as
    /// [`Image::data_position`] and [`FileReader::chunk_position`] give them) in the background,
    /// for a reader that knows what it will read next: extraction streams the image ahead of
    /// its writers this way. Bytes past the image's end are ignored.
    pub fn prefetch(&self, pos: u64, len: u64) {
        let end = self.inner.superblock.bytes_used;
        let len = len.min(end.saturating_sub(pos));
        // `pos < end` when `len > 0`, and the image's end lies within its file: no overflow.
        if let (true, Some(at)) = (len > 0, self.inner.offset.checked_add(pos)) {
            self.inner.source.will_need(at, len);
        }
    }

    /// Where regular file `inode`'s data begins in the image: its first data block, or the
    /// fragment block holding its tail end; `None` for other inodes, empty files and a
    /// fragment the table cannot give. For reading many files in the order of their data,
    /// so that the image is read front to back; it is an ordering hint, not a bound.
    pub fn data_position(&self, inode: &Inode) -> Option<u64> {
        let InodeDetail::File { body, .. } = &inode.detail else {
            return None;
        };
        if body.block_count(self.inner.superblock.block_size) > 0 {
            Some(body.blocks_start)
        } else if body.has_fragment() {
            self.inner
                .fragment(body.fragment_index)
                .ok()
                .map(|f| f.start)
        } else {
            None
        }
    }

    /// The id of the root directory's inode.
    pub fn root_id(&self) -> InodeId {
        InodeId::from_ref(self.inner.superblock.root_inode)
    }

    /// The root directory's inode.
    pub fn root(&self) -> Result<Inode> {
        self.inode(self.root_id())
    }

    /// Reads the inode `id` (from a directory entry, or [`Image::root_id`]).
    pub fn inode(&self, id: InodeId) -> Result<Inode> {
        inode::load(&self.inner, id)
    }

    /// The inode with inode number `number`, found through the export table (only images made
    /// with `-exportable` have one).
    pub fn inode_by_number(&self, number: u32) -> Result<Inode> {
        let id = self.inner.export_lookup(number)?;
        let inode = self.inode(id)?;
        if inode.number != number {
            return Err(self.inner.corrupt(
                0,
                format!("export table maps inode {number} to inode {}", inode.number),
            ));
        }
        Ok(inode)
    }

    /// The entries of directory `dir`, in the image's (sorted) order, without "." and "..".
    pub fn read_dir(&self, dir: &Inode) -> Result<Vec<DirEntry>> {
        dir::read_dir(&self.inner, dir)
    }

    /// The entries of directory `dir` with their inodes: what a walker or a FUSE readdirplus
    /// needs, at a fraction of the cache lookups of [`Image::read_dir`] plus one
    /// [`Image::inode`] per entry.
    pub fn read_dir_plus(&self, dir: &Inode) -> Result<Vec<(DirEntry, Inode)>> {
        let entries = self.read_dir(dir)?;
        let mut last = None;
        entries
            .into_iter()
            .map(|e| {
                let inode = inode::load_reusing(&self.inner, e.id, &mut last)?;
                Ok((e, inode))
            })
            .collect()
    }

    /// The entry `name` of directory `dir`, using the directory index of large directories.
    pub fn lookup(&self, dir: &Inode, name: &[u8]) -> Result<Option<DirEntry>> {
        dir::lookup(&self.inner, dir, name)
    }

    /// The inode at `path` (components separated by '/', relative to the root; empty or "/" is
    /// the root). Symlinks are not followed.
    pub fn resolve_path(&self, path: &[u8]) -> Result<Inode> {
        dir::resolve_path(&self.inner, path)
    }

    /// The target of symlink `inode`.
    pub fn read_link(&self, inode: &Inode) -> Result<Vec<u8>> {
        inode
            .symlink_target()
            .map(<[u8]>::to_vec)
            .ok_or_else(|| Error::InvalidInput {
                image: self.inner.name.clone(),
                what: format!("inode {} is not a symbolic link", inode.number),
            })
    }

    /// The extended attributes of `inode`, with full names ("user.foo").
    pub fn xattrs(&self, inode: &Inode) -> Result<Vec<Xattr>> {
        xattr::read_xattrs(&self.inner, inode)
    }

    /// 512-byte blocks as the kernel's squashfs reports them in `st_blocks`: the file's data
    /// less its holes ([`Inode::blocks_512`]) and, for an inode with extended attributes, the
    /// blocks of their size as the xattr id table records it, which the kernel adds.
    pub fn stat_blocks(&self, inode: &Inode) -> Result<u64> {
        let data = inode.blocks_512();
        match inode.xattr_index {
            // Without a table the kernel adds nothing (and reading the xattrs fails instead).
            Some(index) if self.inner.superblock.has_xattrs() => {
                let (entry, _) = self.inner.xattr_id(index)?;
                // The kernel's `((size - 1) >> 9) + 1` on an unsigned int, wrapping included.
                let xattr_blocks = u64::from(entry.size.wrapping_sub(1) >> 9) + 1;
                Ok(data.saturating_add(xattr_blocks))
            }
            _ => Ok(data),
        }
    }

    /// A reader of regular file `inode`'s contents. It holds the file's block list, so open it
    /// once per file and read through it many times.
    pub fn open_file(&self, inode: &Inode) -> Result<FileReader> {
        FileReader::open(self.clone(), inode)
    }

    /// Reads up to `buf.len()` bytes of `inode`'s contents at `offset`; returns how many were
    /// read (0 at end of file). Opens the file each call: prefer [`Image::open_file`].
    pub fn read(&self, inode: &Inode, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.open_file(inode)?.read_at(offset, buf)
    }
}

/// The error for a structure at `position` of image `name` (which starts at `image_start` of its
/// file) that failed to parse.
fn format_error(name: &Arc<str>, image_start: u64, position: u64, e: FormatError) -> Error {
    match e {
        FormatError::Unsupported(what) => Error::Unsupported {
            image: name.clone(),
            what,
        },
        other => Error::Corrupt {
            image: name.clone(),
            image_start,
            position,
            what: other.to_string(),
        },
    }
}

impl ImageInner {
    /// The error for a structure at image position `pos` that failed a check. `pos` may be any
    /// value the image holds (a table entry pointing far past its end): it is kept relative to
    /// the image, and only added to the image's offset where the sum fits (see [`Error`]'s
    /// message).
    pub(crate) fn corrupt(&self, pos: u64, what: impl Into<String>) -> Error {
        Error::Corrupt {
            image: self.name.clone(),
            image_start: self.offset,
            position: pos,
            what: what.into(),
        }
    }

    /// The error for a structure at image position `pos` that failed to parse.
    pub(crate) fn format_error(&self, pos: u64, e: FormatError) -> Error {
        format_error(&self.name, self.offset, pos, e)
    }
}
