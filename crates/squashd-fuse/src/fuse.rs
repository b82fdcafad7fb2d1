//! The FUSE adapter: turns requests into calls of the file system ([`SquashFs`]) and its
//! results into answers, through squashd's own session ([`crate::server`]). It decides nothing
//! itself, but which optimisations to ask the kernel for at INIT and, for `allow_root`, whom
//! to refuse.
//!
//! Requests that would change the image are answered EROFS by the dispatcher; the other
//! requests this file system does not implement (locks, ioctl, poll, lseek, bmap...) ENOSYS.

use crate::answers::{Attr, Entry, Opened, StatFs, XattrReply};
use crate::error::FsResult;
use crate::files::FileData;
use crate::fs::SquashFs;
use crate::listings::ListingTurn;
use crate::server::{
    abi::init_flags, DirentBuffer, FuseFilesystem, InitSettings, KernelOffer, ReadData,
    RequestContext,
};
use fuser::{AccessFlags, Errno, FileHandle, INodeNo, OpenFlags};
use std::ffi::OsStr;

/// [`SquashFs`] as the session serves it: a [`FuseFilesystem`] (see [`crate::server`]).
pub struct FuseAdapter {
    fs: SquashFs,
    /// `allow_root`: the kernel lets every user in (`allow_other`), and requests of users other
    /// than this one and root are refused here, as libfuse does.
    owner_and_root_only: Option<u32>,
}

impl FuseAdapter {
    /// Serves `fs`; with `owner_and_root_only`, only to that uid and root.
    pub fn new(fs: SquashFs, owner_and_root_only: Option<u32>) -> Self {
        FuseAdapter {
            fs,
            owner_and_root_only,
        }
    }

    /// The file system served.
    pub fn fs(&self) -> &SquashFs {
        &self.fs
    }

    /// Refuses (EACCES) a request of a user other than the owner and root, under
    /// `allow_root`. Checked on every request that names a node or lists a directory, as
    /// libfuse's `allow_root` does, and on `readdir` too: once the kernel stops sending
    /// `opendir` (no-opendir), a listing is the first request another user's `ls` sends.
    fn admit(&self, ctx: &RequestContext) -> FsResult<()> {
        match self.owner_and_root_only {
            Some(owner) if ctx.uid != owner && ctx.uid != 0 => Err(Errno::EACCES.into()),
            _ => Ok(()),
        }
    }
}

impl ReadData for FileData<'_> {
    fn bytes(&self) -> &[u8] {
        FileData::bytes(self)
    }

    fn replied(self) {
        FileData::replied(self)
    }

    fn acts_when_replied(&self) -> bool {
        FileData::acts_when_replied(self)
    }
}

/// The session's largest background queue: read-ahead requests are "background" requests; let
/// many be in flight so that the worker threads (and read-ahead decompression) are kept busy.
const MAX_BACKGROUND: u16 = 256;

impl FuseFilesystem for FuseAdapter {
    type Data<'a> = FileData<'a>;

    fn init(&self, kernel: &KernelOffer) -> InitSettings {
        // Ask for each optimisation the kernel offers; an old kernel just goes without. Not
        // READDIRPLUS_AUTO: with it the kernel asks READDIRPLUS for the first piece of a
        // listing only and READDIR for the rest (until a LOOKUP in the directory), so a `du`
        // of a large directory looked up every entry past its first piece (21k LOOKUPs in a
        // `du` of usr). The daemon chooses which entries to link itself (`listing_attrs`).
        let flags = init_flags::ASYNC_READ
            | init_flags::BIG_WRITES
            | init_flags::DO_READDIRPLUS
            | init_flags::PARALLEL_DIROPS
            | init_flags::CACHE_SYMLINKS
            | init_flags::MAX_PAGES
            | init_flags::NO_OPENDIR_SUPPORT;
        self.fs
            .set_no_opendir(kernel.offers(init_flags::NO_OPENDIR_SUPPORT));
        // Under allow_root the daemon must see each open to refuse other users (the kernel
        // lets every user through), so only other mounts open files without asking.
        self.fs.set_no_open(
            kernel.offers(init_flags::NO_OPEN_SUPPORT) && self.owner_and_root_only.is_none(),
        );
        InitSettings {
            flags,
            max_readahead: kernel.max_readahead,
            max_background: MAX_BACKGROUND,
            congestion_threshold: 192,
        }
    }

    /// A remote image's reads wait for the network; a local one's for a disk at most.
    fn answers_may_wait(&self) -> bool {
        self.fs.may_stall()
    }

    fn lookup(&self, ctx: &RequestContext, parent: INodeNo, name: &OsStr) -> FsResult<Entry> {
        self.admit(ctx)?;
        self.fs.lookup(parent, name)
    }

    fn getattr(
        &self,
        ctx: &RequestContext,
        node: INodeNo,
        _fh: Option<FileHandle>,
    ) -> FsResult<Attr> {
        self.admit(ctx)?;
        self.fs.getattr(node)
    }

    fn readlink(&self, ctx: &RequestContext, node: INodeNo) -> FsResult<Vec<u8>> {
        self.admit(ctx)?;
        self.fs.readlink(node)
    }

    fn open(&self, ctx: &RequestContext, node: INodeNo, flags: OpenFlags) -> FsResult<Opened> {
        self.admit(ctx)?;
        self.fs.open(node, flags)
    }

    fn read(
        &self,
        _ctx: &RequestContext,
        node: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
    ) -> FsResult<FileData<'_>> {
        self.fs.read(node, fh, offset, size)
    }

    fn flush(&self, _ctx: &RequestContext, _node: INodeNo, fh: FileHandle) -> FsResult<()> {
        self.fs.flush(fh)
    }

    fn release(&self, _ctx: &RequestContext, _node: INodeNo, fh: FileHandle) -> FsResult<()> {
        self.fs.release(fh)
    }

    fn opendir(&self, ctx: &RequestContext, node: INodeNo, flags: OpenFlags) -> FsResult<Opened> {
        self.admit(ctx)?;
        self.fs.opendir(node, flags)
    }

    fn readdir<'a>(
        &'a self,
        ctx: &RequestContext,
        node: INodeNo,
        fh: FileHandle,
        offset: u64,
        out: &mut DirentBuffer,
    ) -> FsResult<Option<ListingTurn<'a>>> {
        self.admit(ctx)?;
        // The directory's turn ends once the listing is sent.
        self.fs.readdir(node, fh, offset, out).map(Some)
    }

    fn readdirplus<'a>(
        &'a self,
        ctx: &RequestContext,
        node: INodeNo,
        fh: FileHandle,
        offset: u64,
        out: &mut DirentBuffer,
    ) -> FsResult<Option<ListingTurn<'a>>> {
        self.admit(ctx)?;
        self.fs.readdirplus(node, fh, offset, out).map(Some)
    }

    fn releasedir(&self, _ctx: &RequestContext, _node: INodeNo, fh: FileHandle) -> FsResult<()> {
        self.fs.releasedir(fh)
    }

    fn statfs(&self, ctx: &RequestContext, _node: INodeNo) -> FsResult<StatFs> {
        self.admit(ctx)?;
        self.fs.statfs()
    }

    fn getxattr(
        &self,
        ctx: &RequestContext,
        node: INodeNo,
        name: &OsStr,
        size: u32,
    ) -> FsResult<XattrReply> {
        self.admit(ctx)?;
        self.fs.getxattr(node, name, size)
    }

    fn listxattr(&self, ctx: &RequestContext, node: INodeNo, size: u32) -> FsResult<XattrReply> {
        self.admit(ctx)?;
        self.fs.listxattr(node, size)
    }

    fn access(&self, ctx: &RequestContext, node: INodeNo, mask: AccessFlags) -> FsResult<()> {
        self.admit(ctx)?;
        self.fs.access(node, mask)
    }
}
