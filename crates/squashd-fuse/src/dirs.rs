//! Directory listings: readdir and readdirplus, with or without an opendir handle.
//!
//! With FUSE_NO_OPENDIR_SUPPORT the kernel sends no OPENDIR/RELEASEDIR and caches every
//! listing as if opened with FOPEN_CACHE_DIR, so a directory costs no round trip once listed;
//! readdir then comes without a handle, and a listing is kept by node between the calls that
//! read it. Positions 0 and 1 are "." and ".."; entry i is at i + 2, and the offset given with
//! an entry is the position of the next one.

use crate::attr::{file_type, FOREVER};
use crate::fs::{SquashFs, GENERATION};
use fuser::{Errno, FileHandle, INodeNo, ReplyDirectory, ReplyDirectoryPlus};
use squashd_core::{DirEntry, Inode};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, MutexGuard, OnceLock};

/// Listings kept between readdir calls without a handle (one per directory being read).
const MAX_LISTINGS: usize = 256;

/// An opened directory (kernels that send OPENDIR), or one readdir's view of it.
pub(crate) struct OpenDir {
    pub(crate) inode: Inode,
    /// The listing, read on the first readdir and kept so that offsets stay stable.
    pub(crate) entries: OnceLock<Arc<[DirEntry]>>,
}

type Result<T> = std::result::Result<T, Errno>;

impl SquashFs {
    /// The directory and its listing for a readdir: from the handle of an opendir, or (with
    /// no opendir) read anew at offset 0 and kept while a large listing is read in pieces.
    pub(crate) fn listing(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
    ) -> Result<Arc<OpenDir>> {
        if fh.0 != 0 {
            return self.dirs.get(fh.0).ok_or(Errno::EBADF);
        }
        let inode = self.inode(ino)?;
        if !inode.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let dir = OpenDir {
            inode,
            entries: OnceLock::new(),
        };
        if offset > 0 {
            let kept = self.lock_listings().get(&ino.0).cloned();
            if let Some(entries) = kept {
                let _ = dir.entries.set(entries);
            }
        }
        Ok(Arc::new(dir))
    }

    pub(crate) fn dir_request(&self) {
        self.touch();
        self.metadata_read_ahead
            .call_once(|| self.image.read_ahead_metadata());
    }

    fn lock_listings(&self) -> MutexGuard<'_, HashMap<u64, Arc<[DirEntry]>>> {
        self.listings.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Without handles, remembers a listing between the readdir calls that read it (the
    /// kernel comes back at least once, to find the end), and forgets it at the call past
    /// its end, so that no piece re-reads the whole directory.
    fn keep_listing(&self, fh: FileHandle, ino: INodeNo, entries: &Arc<[DirEntry]>, done: bool) {
        if fh.0 != 0 {
            return;
        }
        if done && !self.lock_listings().contains_key(&ino.0) {
            return;
        }
        let mut kept = self.lock_listings();
        if done {
            kept.remove(&ino.0);
        } else {
            if kept.len() >= MAX_LISTINGS {
                kept.clear();
            }
            kept.insert(ino.0, entries.clone());
        }
    }

    pub(crate) fn dir_entries(&self, dir: &OpenDir) -> Result<Arc<[DirEntry]>> {
        if let Some(e) = dir.entries.get() {
            return Ok(e.clone());
        }
        let entries: Arc<[DirEntry]> = self
            .image
            .read_dir(&dir.inode)
            .map_err(|e| self.errno(&e))?
            .into();
        Ok(dir.entries.get_or_init(|| entries).clone())
    }

    /// Node of a directory's "..", as readdir shows it.
    fn parent_node(&self, dir: &Inode) -> u64 {
        if dir.number == self.root.number {
            return 1;
        }
        dir.parent.map_or(1, |p| self.nodes.node(p))
    }

    pub(crate) fn fill_readdir(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let dir = match self.listing(ino, fh, offset) {
            Ok(d) => d,
            Err(e) => return reply.error(e),
        };
        let entries = match self.dir_entries(&dir) {
            Ok(e) => e,
            Err(e) => return reply.error(e),
        };
        let own = self.nodes.node(dir.inode.number);
        let parent = self.parent_node(&dir.inode);
        // Positions 0 and 1 are "." and ".."; entry i is at i + 2. The offset of an entry is
        // the position of the next one.
        let mut done = true;
        for pos in offset..entries.len() as u64 + 2 {
            let full = match pos {
                0 => reply.add(INodeNo(own), 1, fuser::FileType::Directory, "."),
                1 => reply.add(INodeNo(parent), 2, fuser::FileType::Directory, ".."),
                _ => {
                    let e = &entries[pos as usize - 2];
                    reply.add(
                        INodeNo(self.nodes.node(e.number)),
                        pos + 1,
                        file_type(e.kind),
                        OsStr::from_bytes(&e.name),
                    )
                }
            };
            if full {
                done = false;
                break;
            }
        }
        self.keep_listing(
            fh,
            ino,
            &entries,
            done && offset >= entries.len() as u64 + 2,
        );
        reply.ok();
    }

    pub(crate) fn fill_readdirplus(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let dir = match self.listing(ino, fh, offset) {
            Ok(d) => d,
            Err(e) => return reply.error(e),
        };
        let entries = match self.dir_entries(&dir) {
            Ok(e) => e,
            Err(e) => return reply.error(e),
        };
        let own = self.attr(&dir.inode);
        let mut done = true;
        for (added, pos) in (offset..entries.len() as u64 + 2).enumerate() {
            let full = match pos {
                0 => reply.add(INodeNo(own.ino.0), 1, ".", &FOREVER, &own, GENERATION),
                1 => {
                    // The kernel ignores the attributes of ".." (it only shows its number).
                    let mut up = own;
                    up.ino = INodeNo(self.parent_node(&dir.inode));
                    reply.add(up.ino, 2, "..", &FOREVER, &up, GENERATION)
                }
                _ => {
                    let e = &entries[pos as usize - 2];
                    let inode = match self.load(e.id) {
                        Ok(i) => i,
                        // Entries already added stay valid; the error comes on the next call.
                        Err(err) if added == 0 => return reply.error(err),
                        Err(_) => {
                            done = false;
                            break;
                        }
                    };
                    let attr = self.attr(&inode);
                    reply.add(
                        attr.ino,
                        pos + 1,
                        OsStr::from_bytes(&e.name),
                        &FOREVER,
                        &attr,
                        GENERATION,
                    )
                }
            };
            if full {
                done = false;
                break;
            }
        }
        self.keep_listing(
            fh,
            ino,
            &entries,
            done && offset >= entries.len() as u64 + 2,
        );
        reply.ok();
    }
}
