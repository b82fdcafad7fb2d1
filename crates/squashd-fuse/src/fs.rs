//! The file system: what the mount answers to each request, as plain results.
//!
//! [`SquashFs`] serves one image (or one directory of it) read-only. Its operations take node
//! ids and handles as the kernel gives them and return [`FsResult`]s: attributes with how long
//! the kernel may keep them, handles with the kernel's cache flags, listings written into a
//! [`DirectoryReplier`], file bytes lent from the data cache. No FUSE reply object appears
//! here: the `fuse` module turns requests into these calls and results into replies, so every
//! answer can be tested in-process, without the kernel.
//!
//! The image never changes, so the answers tell the kernel to keep everything: entries and
//! attributes for (practically) ever, failed lookups as negative entries, file pages across
//! opens (FOPEN_KEEP_CACHE), listings (FOPEN_CACHE_DIR).

pub use crate::answers::{Attr, Entry, Opened, StatFs, XattrReply};
use crate::attr::{negative_attr, FOREVER, GENERATION};
use crate::config::MountConfig;
use crate::dirs::Directories;
pub use crate::dirs::{DirectoryEntry, DirectoryEntryPlus, DirectoryPlusReplier, DirectoryReplier};
pub use crate::error::{FsError, FsResult};
pub use crate::files::FileData;
use crate::files::OpenFiles;
use crate::idle::Activity;
pub use crate::listings::{with_listing_waits, ListingTurn, FILL_WAIT};
use crate::probe::MountProbe;
use crate::tree::ServedTree;
use fuser::{AccessFlags, Errno, FileHandle, INodeNo, OpenFlags};
use squashd_core::Image;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Once, OnceLock};

/// A read-only file system serving one image (or one directory of it).
pub struct SquashFs {
    tree: ServedTree,
    files: OpenFiles,
    dirs: Directories,
    /// When the last request came, for the idle timeout (when there is one).
    activity: Option<Arc<Activity>>,
    /// Started at the first directory request: the metadata lies together at the image's end,
    /// and a walk reads most of it.
    metadata_prefetch: Once,
}

impl std::fmt::Debug for SquashFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SquashFs")
            .field("image", self.tree.image())
            .finish_non_exhaustive()
    }
}

impl SquashFs {
    /// A file system serving `image`, rooted at `config.subdir` if given. Fails (without
    /// mounting anything) when the image's root or that directory cannot be read.
    pub fn new(image: Image, config: &MountConfig) -> squashd_core::Result<Self> {
        let window = config.read_ahead_bytes / image.block_size().max(1) as u64;
        let tree = ServedTree::new(image, config)?;
        let files = OpenFiles::new(config.read_ahead_threads, window, config.cpu_gauge);
        tree.probe().set_sweep(files.sweep_policy());
        Ok(SquashFs {
            tree,
            files,
            dirs: Directories::new(config.listing_attrs == crate::config::ListingAttrs::Auto),
            activity: config.idle_timeout.map(|_| Arc::new(Activity::new())),
            metadata_prefetch: Once::new(),
        })
    }

    /// Tells the file system that the kernel agreed to send no OPENDIR/RELEASEDIR
    /// (FUSE_NO_OPENDIR_SUPPORT): opendir then answers ENOSYS, and readdir comes without a
    /// handle.
    pub fn set_no_opendir(&self, no_opendir: bool) {
        self.dirs.set_no_opendir(no_opendir);
    }

    /// The mount's live figures (shared with every clone).
    pub fn probe(&self) -> MountProbe {
        self.tree.probe().clone()
    }

    /// Number of open files and directories (for tests and status).
    pub fn open_handles(&self) -> usize {
        self.files.open_count() + self.dirs.open_count()
    }

    pub(crate) fn activity(&self) -> Option<Arc<Activity>> {
        self.activity.clone()
    }

    pub(crate) fn notifier_slot(&self) -> Arc<OnceLock<crate::server::Notifier>> {
        self.files.notifier_slot()
    }

    /// Counts a request and marks the mount active (for the idle timeout).
    fn touch(&self) {
        self.tree.probe().request();
        if let Some(a) = &self.activity {
            a.touch();
        }
    }

    /// Whether a read of the image may wait for a network (a remote image).
    pub fn may_stall(&self) -> bool {
        self.tree.image().may_stall()
    }

    /// A request that walks the tree: the first one starts reading the metadata ahead.
    fn dir_request(&self) {
        self.touch();
        self.metadata_prefetch
            .call_once(|| self.tree.image().prefetch_metadata());
    }

    /// Looks `name` up in directory `parent`. A missing name is not an error: it is a
    /// negative entry, cached like a positive one (the name will never appear).
    pub fn lookup(&self, parent: INodeNo, name: &OsStr) -> FsResult<Entry> {
        self.dir_request();
        let dir = self.tree.inode(parent)?;
        if !dir.is_dir() {
            return Err(Errno::ENOTDIR.into());
        }
        let attr = match self.tree.image().lookup(&dir, name.as_bytes()) {
            Ok(Some(entry)) => {
                self.dirs.looked_up(&self.tree, entry.kind);
                self.tree.attr(&self.tree.load(entry.id)?)
            }
            Ok(None) => negative_attr(),
            Err(e) => return Err(self.tree.error(e)),
        };
        Ok(Entry {
            attr,
            ttl: FOREVER,
            generation: GENERATION,
        })
    }

    /// The attributes of `node`.
    pub fn getattr(&self, node: INodeNo) -> FsResult<Attr> {
        self.touch();
        let inode = self.tree.inode(node)?;
        Ok(Attr {
            attr: self.tree.attr(&inode),
            ttl: FOREVER,
        })
    }

    /// The target of symlink `node`.
    pub fn readlink(&self, node: INodeNo) -> FsResult<Vec<u8>> {
        self.touch();
        let inode = self.tree.inode(node)?;
        self.tree
            .image()
            .read_link(&inode)
            .map_err(|e| self.tree.error(e))
    }

    /// Opens file `node` for reading (EROFS for writing, EISDIR for a directory).
    pub fn open(&self, node: INodeNo, flags: OpenFlags) -> FsResult<Opened> {
        self.touch();
        self.files.open(&self.tree, node, flags)
    }

    /// Reads up to `size` bytes at `offset` of the file open as `fh`: fewer at the end of the
    /// file, none at or past it. Call [`FileData::replied`] once the bytes are sent.
    pub fn read(
        &self,
        node: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
    ) -> FsResult<FileData<'_>> {
        self.touch();
        self.files.read(&self.tree, node, fh, offset, size)
    }

    /// A close of the file: ENOSYS, so that the kernel sends no FLUSH again on this mount (it
    /// takes ENOSYS as "nothing to flush, ever"; a read-only file has nothing to write back).
    /// A round trip less per `close`.
    pub fn flush(&self, _fh: FileHandle) -> FsResult<()> {
        Err(Errno::ENOSYS.into())
    }

    /// Forgets the file open as `fh`.
    pub fn release(&self, fh: FileHandle) -> FsResult<()> {
        self.files.release(&self.tree, fh);
        Ok(())
    }

    /// Opens files without asking the daemon from now on (the kernel offered
    /// FUSE_NO_OPEN_SUPPORT): OPEN then answers ENOSYS, after which the kernel sends no OPEN
    /// or RELEASE, and reads come without a handle. Files open that way are not counted in
    /// [`SquashFs::open_handles`].
    pub fn set_no_open(&self, no_open: bool) {
        self.files.set_no_open(no_open);
    }

    /// Opens directory `node` for listing; ENOSYS once the kernel agreed to send no opendir
    /// ([`SquashFs::set_no_opendir`]).
    pub fn opendir(&self, node: INodeNo, _flags: OpenFlags) -> FsResult<Opened> {
        self.touch();
        self.dirs.open(&self.tree, node)
    }

    /// Lists directory `node` (opened as `fh`, or `FileHandle(0)` without opendir) from
    /// position `offset` into `reply`, until it is full. Each entry carries the offset to
    /// resume at; a listing resumed at each returned offset gives every entry once. Hold the
    /// returned turn until the reply is sent (see [`ListingTurn`]).
    pub fn readdir(
        &self,
        node: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: &mut impl DirectoryReplier,
    ) -> FsResult<ListingTurn<'_>> {
        self.dir_request();
        self.dirs.readdir(&self.tree, node, fh, offset, reply)
    }

    /// Lists directory `node` with each entry's attributes, as [`SquashFs::readdir`].
    pub fn readdirplus(
        &self,
        node: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: &mut impl DirectoryPlusReplier,
    ) -> FsResult<ListingTurn<'_>> {
        self.dir_request();
        self.dirs.readdirplus(&self.tree, node, fh, offset, reply)
    }

    /// Forgets the directory open as `fh`.
    pub fn releasedir(&self, fh: FileHandle) -> FsResult<()> {
        self.dirs.release(&self.tree, fh);
        Ok(())
    }

    /// The file system's figures, as the kernel's squashfs gives them: blocks of the image's
    /// block size, nothing free.
    pub fn statfs(&self) -> FsResult<StatFs> {
        self.touch();
        let image = self.tree.image();
        let bs = image.block_size().max(1);
        Ok(StatFs {
            blocks: image.image_size().div_ceil(bs as u64),
            bfree: 0,
            bavail: 0,
            files: image.inode_count() as u64,
            ffree: 0,
            bsize: bs,
            namelen: 256,
            frsize: bs,
        })
    }

    /// The value of xattr `name` of `node`, or with `size` 0 its length; ERANGE when it is
    /// longer than `size`, ENODATA when `node` has no such xattr.
    pub fn getxattr(&self, node: INodeNo, name: &OsStr, size: u32) -> FsResult<XattrReply> {
        self.touch();
        let xattrs = self.xattrs(node)?;
        match xattrs.into_iter().find(|x| x.name == name.as_bytes()) {
            Some(x) => sized(x.value, size),
            None => Err(Errno::from_i32(libc::ENODATA).into()),
        }
    }

    /// The names of `node`'s xattrs, each followed by a NUL, or with `size` 0 the length of
    /// that list; ERANGE when it is longer than `size`.
    pub fn listxattr(&self, node: INodeNo, size: u32) -> FsResult<XattrReply> {
        self.touch();
        let xattrs = self.xattrs(node)?;
        let mut list = Vec::new();
        for x in &xattrs {
            list.extend_from_slice(&x.name);
            list.push(0);
        }
        sized(list, size)
    }

    fn xattrs(&self, node: INodeNo) -> FsResult<Vec<squashd_core::Xattr>> {
        let inode = self.tree.inode(node)?;
        self.tree
            .image()
            .xattrs(&inode)
            .map_err(|e| self.tree.error(e))
    }

    /// Whether `node` may be accessed as `mask` asks: EROFS for writing, else yes (the kernel
    /// checks permissions itself, from the mode bits: `default_permissions`).
    pub fn access(&self, node: INodeNo, mask: AccessFlags) -> FsResult<()> {
        if mask.contains(AccessFlags::W_OK) {
            return Err(Errno::EROFS.into());
        }
        self.tree.inode(node).map(drop)
    }
}

/// The xattr size protocol: size 0 asks how big a buffer must be; a smaller buffer than the
/// data is ERANGE.
fn sized(data: Vec<u8>, size: u32) -> FsResult<XattrReply> {
    if size == 0 {
        Ok(XattrReply::Size(data.len() as u32))
    } else if (size as usize) < data.len() {
        Err(Errno::ERANGE.into())
    } else {
        Ok(XattrReply::Data(data))
    }
}

impl Drop for SquashFs {
    fn drop(&mut self) {
        // Beside the dispatcher's requests by opcode: what the listing requests got.
        let probe = self.tree.probe();
        tracing::debug!(
            "listings: requests={} short={} unlinked={} waited={} bare_entries={} late_lookups={}",
            probe.listings(),
            probe.short_listings(),
            probe.unlinked_listings(),
            probe.waited_listings(),
            probe.bare_entries(),
            probe.late_lookups()
        );
    }
}
