//! The `fuser` adapter: turns FUSE requests into calls of the file system ([`SquashFs`]) and
//! its results into replies. It decides nothing itself, but which optimisations to ask the
//! kernel for at `init`.
//!
//! Requests that would change the image are answered EROFS by [`fuse_unsupported!`]; the other
//! requests this file system does not implement (locks, ioctl, poll, lseek, bmap...) keep
//! fuser's default answer, ENOSYS.

use crate::fs::{
    DirectoryEntry, DirectoryEntryPlus, DirectoryPlusReplier, DirectoryReplier, SquashFs,
    XattrReply,
};
use fuser::{
    AccessFlags, Errno, FileHandle, Filesystem, INodeNo, InitFlags, KernelConfig, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};
use std::ffi::OsStr;
use std::path::Path;
use std::time::SystemTime;

/// The file system as `fuser` serves it.
pub(crate) struct FuseAdapter {
    fs: SquashFs,
    /// `allow_root` on a mount made for this user (see owned_mount.rs): the kernel lets every
    /// user in, and requests of users other than this one and root are refused here.
    owner_and_root_only: Option<u32>,
}

impl FuseAdapter {
    /// Serves `fs`; with `owner_and_root_only`, only to that uid and root.
    pub(crate) fn new(fs: SquashFs, owner_and_root_only: Option<u32>) -> Self {
        FuseAdapter {
            fs,
            owner_and_root_only,
        }
    }

    /// Whether a request of `req`'s user is refused (`allow_root` on a user's mount). Checked
    /// on every request that names a node or lists a directory, as libfuse's `allow_root` does,
    /// and on `readdir` too: once the kernel stops sending `opendir` (no-opendir), a listing is
    /// the first request another user's `ls` sends.
    fn refused(&self, req: &Request) -> bool {
        self.owner_and_root_only
            .is_some_and(|owner| req.uid() != owner && req.uid() != 0)
    }
}

/// Answers EACCES and returns from the request handler when [`FuseAdapter::refused`] says so.
macro_rules! refuse_others {
    ($self:ident, $req:ident, $reply:ident) => {
        if $self.refused($req) {
            $reply.error(Errno::EACCES);
            return;
        }
    };
}

impl DirectoryReplier for ReplyDirectory {
    fn add(&mut self, e: DirectoryEntry<'_>) -> bool {
        ReplyDirectory::add(self, e.node, e.offset, e.kind, e.name)
    }
}

impl DirectoryPlusReplier for ReplyDirectoryPlus {
    fn add(&mut self, e: DirectoryEntryPlus<'_>) -> bool {
        ReplyDirectoryPlus::add(
            self,
            e.attr.ino,
            e.offset,
            e.name,
            &e.ttl,
            e.attr,
            e.generation,
        )
    }
}

fn xattr_reply(reply: ReplyXattr, answer: XattrReply) {
    match answer {
        XattrReply::Size(n) => reply.size(n),
        XattrReply::Data(data) => reply.data(&data),
    }
}

/// Implements `fuser::Filesystem` methods that answer `$errno` and do nothing else. Each is
/// written as the trait declares it, with its reply last.
macro_rules! fuse_unsupported {
    ($errno:expr; $(fn $name:ident(&self, $($arg:ident: $ty:ty),* $(,)?) -> $reply:ty;)*) => {
        $(
            fn $name(&self, $($arg: $ty),*, reply: $reply) {
                reply.error($errno);
            }
        )*
    };
}

impl Filesystem for FuseAdapter {
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
        let no_opendir = config
            .add_capabilities(InitFlags::FUSE_NO_OPENDIR_SUPPORT)
            .is_ok();
        self.fs.set_no_opendir(no_opendir);
        // Readahead requests are "background" requests: let many be in flight so that the
        // worker threads (and read-ahead decompression) are kept busy.
        let _ = config.set_max_background(256);
        let _ = config.set_congestion_threshold(192);
        if let Err(max) = config.set_max_readahead(u32::MAX) {
            let _ = config.set_max_readahead(max);
        }
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        refuse_others!(self, req, reply);
        match self.fs.lookup(parent, name) {
            Ok(e) => reply.entry(&e.ttl, &e.attr, e.generation),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        refuse_others!(self, req, reply);
        match self.fs.getattr(ino) {
            Ok(a) => reply.attr(&a.ttl, &a.attr),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        refuse_others!(self, req, reply);
        match self.fs.readlink(ino) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        refuse_others!(self, req, reply);
        match self.fs.open(ino, flags) {
            Ok(o) => reply.opened(o.fh, o.flags),
            Err(e) => reply.error(e.errno()),
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
        match self.fs.read(ino, fh, offset, size) {
            Ok(data) => {
                reply.data(data.bytes());
                data.replied();
            }
            Err(e) => reply.error(e.errno()),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        match self.fs.flush(fh) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e.errno()),
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
        reply: ReplyEmpty,
    ) {
        match self.fs.release(fh) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn opendir(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        refuse_others!(self, req, reply);
        match self.fs.opendir(ino, flags) {
            Ok(o) => reply.opened(o.fh, o.flags),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        refuse_others!(self, req, reply);
        match self.fs.readdir(ino, fh, offset, &mut reply) {
            // The directory's turn ends once the listing is sent.
            Ok(_turn) => reply.ok(),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        refuse_others!(self, req, reply);
        match self.fs.readdirplus(ino, fh, offset, &mut reply) {
            // The directory's turn ends once the listing is sent.
            Ok(_turn) => reply.ok(),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        match self.fs.releasedir(fh) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        refuse_others!(self, req, reply);
        match self.fs.statfs() {
            Ok(s) => reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
            ),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        refuse_others!(self, req, reply);
        match self.fs.getxattr(ino, name, size) {
            Ok(answer) => xattr_reply(reply, answer),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        refuse_others!(self, req, reply);
        match self.fs.listxattr(ino, size) {
            Ok(answer) => xattr_reply(reply, answer),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        refuse_others!(self, req, reply);
        match self.fs.access(ino, mask) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e.errno()),
        }
    }

    // Everything that would change the image: EROFS (the mount is read-only too, so the
    // kernel usually answers these itself).
    fuse_unsupported! { Errno::EROFS;
        fn setattr(&self, _req: &Request, _ino: INodeNo, _mode: Option<u32>, _uid: Option<u32>,
            _gid: Option<u32>, _size: Option<u64>, _atime: Option<TimeOrNow>,
            _mtime: Option<TimeOrNow>, _ctime: Option<SystemTime>, _fh: Option<FileHandle>,
            _crtime: Option<SystemTime>, _chgtime: Option<SystemTime>,
            _bkuptime: Option<SystemTime>, _flags: Option<fuser::BsdFileFlags>) -> ReplyAttr;
        fn mknod(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, _mode: u32, _umask: u32,
            _rdev: u32) -> ReplyEntry;
        fn mkdir(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, _mode: u32, _umask: u32)
            -> ReplyEntry;
        fn unlink(&self, _req: &Request, _parent: INodeNo, _name: &OsStr) -> ReplyEmpty;
        fn rmdir(&self, _req: &Request, _parent: INodeNo, _name: &OsStr) -> ReplyEmpty;
        fn symlink(&self, _req: &Request, _parent: INodeNo, _link_name: &OsStr, _target: &Path)
            -> ReplyEntry;
        fn rename(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, _newparent: INodeNo,
            _newname: &OsStr, _flags: RenameFlags) -> ReplyEmpty;
        fn link(&self, _req: &Request, _ino: INodeNo, _newparent: INodeNo, _newname: &OsStr)
            -> ReplyEntry;
        fn write(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _offset: u64,
            _data: &[u8], _write_flags: WriteFlags, _flags: OpenFlags,
            _lock_owner: Option<LockOwner>) -> ReplyWrite;
        fn create(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, _mode: u32,
            _umask: u32, _flags: i32) -> ReplyCreate;
        fn setxattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, _value: &[u8],
            _flags: i32, _position: u32) -> ReplyEmpty;
        fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr) -> ReplyEmpty;
        fn fallocate(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _offset: u64,
            _length: u64, _mode: i32) -> ReplyEmpty;
    }
}
