//! Directory listings: opendir, readdir and readdirplus, releasedir, with or without an
//! opendir handle.
//!
//! With FUSE_NO_OPENDIR_SUPPORT the kernel sends no OPENDIR/RELEASEDIR and caches every
//! listing as if opened with FOPEN_CACHE_DIR, so a directory costs no round trip once listed;
//! readdir then comes without a handle (0), and a listing is kept by node between the calls
//! that read it ([`KeptListings`]). Positions 0 and 1 are "." and ".."; entry i is at i + 2, and
//! the offset given with an entry is the position of the next one, where the kernel resumes.
//!
//! Entries go straight into the caller's [`DirectoryReplier`] (the FUSE reply buffer), one at
//! a time, until it is full: nothing is collected in between.

use crate::answers::Opened;
use crate::attr::{file_type, negative_attr, FOREVER, GENERATION};
use crate::error::FsResult;
use crate::handles::HandleTable;
use crate::listing_attrs::AttrPolicy;
use crate::listings::{CachedListing, KeptListings, ListingTurn, ListingTurns};
use crate::tree::ServedTree;
use fuser::{Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo};
use squashd_core::{DirEntry, FileKind, Inode};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// One entry of a readdir reply.
#[derive(Debug, Clone, Copy)]
pub struct DirectoryEntry<'a> {
    /// The entry's node (its `st_ino`).
    pub node: INodeNo,
    /// Where the next entry is: the offset of the readdir that continues after this one.
    pub offset: u64,
    /// The entry's file type.
    pub kind: FileType,
    /// The entry's name.
    pub name: &'a OsStr,
}

/// One entry of a readdirplus reply: the entry and its attributes.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct DirectoryEntryPlus<'a> {
    /// Where the next entry is: the offset of the readdirplus that continues after this one.
    pub offset: u64,
    /// The entry's name.
    pub name: &'a OsStr,
    /// The entry's attributes; `attr.ino` is its node.
    pub attr: &'a FileAttr,
    /// How long the kernel may keep the entry and its attributes.
    pub ttl: Duration,
    /// The node's generation.
    pub generation: Generation,
    /// Whether the kernel links the entry (makes its dentry and inode, with these attributes).
    /// False: only its name, node and type reach the kernel, as in a READDIR answer (a zero
    /// `entry_out`, which the kernel skips), and `attr` holds only `ino` and `kind`: for a
    /// listing that another opener's answer is linking already, and for the entries that are
    /// not directories while walks do not stat them ([`crate::listing_attrs`]).
    pub link: bool,
}

/// Where readdir puts its entries (the FUSE reply buffer, or a test's list).
pub trait DirectoryReplier {
    /// Adds an entry; returns true when it did not fit (the buffer is full), and the listing
    /// stops there.
    fn add(&mut self, entry: DirectoryEntry<'_>) -> bool;
}

/// Where readdirplus puts its entries (the FUSE reply buffer, or a test's list).
pub trait DirectoryPlusReplier {
    /// Adds an entry; returns true when it did not fit (the buffer is full), and the listing
    /// stops there.
    fn add(&mut self, entry: DirectoryEntryPlus<'_>) -> bool;
}

/// An opened directory (kernels that send OPENDIR), or one readdir's view of it.
struct OpenDir {
    inode: Inode,
    /// The listing, read on the first readdir and kept so that offsets stay stable.
    entries: OnceLock<Arc<[DirEntry]>>,
}

/// The directories open through the mount, and what listing them shares.
pub(crate) struct Directories {
    handles: HandleTable<OpenDir>,
    kept: KeptListings,
    turns: ListingTurns,
    /// The kernel skips OPENDIR/RELEASEDIR (FUSE_NO_OPENDIR_SUPPORT): a walk costs no round
    /// trips for directories it has listed before, and readdir comes with no handle.
    no_opendir: AtomicBool,
    /// Which entries readdirplus gives with their attributes.
    attrs: AttrPolicy,
}

impl Directories {
    /// `bare_listings`: readdirplus gives files' attributes only while walks stat them (see
    /// [`crate::listing_attrs`]); false: always.
    pub(crate) fn new(bare_listings: bool) -> Self {
        Directories {
            handles: HandleTable::new(),
            kept: KeptListings::default(),
            turns: ListingTurns::default(),
            no_opendir: AtomicBool::new(false),
            attrs: AttrPolicy::new(bare_listings),
        }
    }

    /// A LOOKUP found `kind`: a stat of a non-directory tells the listings that walks want
    /// attributes.
    pub(crate) fn looked_up(&self, tree: &ServedTree, kind: FileKind) {
        if kind != FileKind::Directory {
            if !self.attrs.all() {
                tree.probe().late_lookup();
            }
            self.attrs.looked_up();
        }
    }

    pub(crate) fn set_no_opendir(&self, no_opendir: bool) {
        // Set at INIT, before the kernel sends any other request.
        self.no_opendir.store(no_opendir, Ordering::Relaxed);
    }

    /// Directories open now.
    pub(crate) fn open_count(&self) -> usize {
        self.handles.len()
    }

    pub(crate) fn open(&self, tree: &ServedTree, node: INodeNo) -> FsResult<Opened> {
        if self.no_opendir.load(Ordering::Relaxed) {
            // ENOSYS tells the kernel to stop sending OPENDIR and RELEASEDIR; it then treats
            // every directory as opened with FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR.
            return Err(Errno::ENOSYS.into());
        }
        let inode = tree.inode(node)?;
        if !inode.is_dir() {
            return Err(Errno::ENOTDIR.into());
        }
        tree.probe().opened();
        let fh = self.handles.insert(OpenDir {
            inode,
            entries: OnceLock::new(),
        });
        // CACHE_DIR: the kernel keeps the listing in its page cache; KEEP_CACHE: opening the
        // directory again does not throw that cache away.
        Ok(Opened {
            fh: FileHandle(fh),
            flags: FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
        })
    }

    pub(crate) fn release(&self, tree: &ServedTree, fh: FileHandle) {
        self.handles.remove(fh.0);
        tree.probe().closed();
    }

    /// The directory and its listing for a readdir: from the handle of an opendir, or (with
    /// no opendir) read anew at offset 0 and kept while a large listing is read in pieces.
    fn listing(
        &self,
        tree: &ServedTree,
        node: INodeNo,
        fh: FileHandle,
        offset: u64,
    ) -> FsResult<Arc<OpenDir>> {
        if fh.0 != 0 {
            return Ok(self.handles.get(fh.0).ok_or(Errno::EBADF)?);
        }
        let inode = tree.inode(node)?;
        if !inode.is_dir() {
            return Err(Errno::ENOTDIR.into());
        }
        let dir = OpenDir {
            inode,
            entries: OnceLock::new(),
        };
        if offset > 0 {
            if let Some(entries) = self.kept.get(node) {
                let _ = dir.entries.set(entries);
            }
        }
        Ok(Arc::new(dir))
    }

    fn entries(&self, tree: &ServedTree, dir: &OpenDir) -> FsResult<Arc<[DirEntry]>> {
        if let Some(e) = dir.entries.get() {
            return Ok(e.clone());
        }
        let entries: Arc<[DirEntry]> = tree
            .image()
            .read_dir(&dir.inode)
            .map_err(|e| tree.error(e))?
            .into();
        Ok(dir.entries.get_or_init(|| entries).clone())
    }

    /// Without a handle, keeps the listing for the next call, or forgets it at the call past
    /// its end, so that no piece re-reads the whole directory.
    fn keep(&self, node: INodeNo, fh: FileHandle, entries: &Arc<[DirEntry]>, done: bool) {
        if fh.0 == 0 {
            self.kept.keep(node, entries, done);
        }
    }

    /// Lists directory `node` (opened as `fh`, or 0 without opendir) from position `offset`
    /// into `reply`, until it is full.
    pub(crate) fn readdir(
        &self,
        tree: &ServedTree,
        node: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: &mut impl DirectoryReplier,
    ) -> FsResult<ListingTurn<'_>> {
        let mut turn = self
            .turns
            .take(node, offset, || tree.probe().waited_listing());
        tree.probe().listing();
        let dir = self.listing(tree, node, fh, offset)?;
        let own = tree.node(dir.inode.number);
        let parent = tree.parent_node(&dir.inode);
        if short_answer(&mut turn, node, offset) {
            tree.probe().short_listing();
            let _ = reply.add(match offset {
                0 => DirectoryEntry {
                    node: INodeNo(own),
                    offset: 1,
                    kind: FileType::Directory,
                    name: OsStr::new("."),
                },
                _ => DirectoryEntry {
                    node: INodeNo(parent),
                    offset: 2,
                    kind: FileType::Directory,
                    name: OsStr::new(".."),
                },
            });
            return Ok(turn);
        }
        let entries = self.entries(tree, &dir)?;
        let mut done = true;
        let mut added = 0;
        for pos in offset..entries.len() as u64 + 2 {
            let entry = match pos {
                0 => DirectoryEntry {
                    node: INodeNo(own),
                    offset: 1,
                    kind: FileType::Directory,
                    name: OsStr::new("."),
                },
                1 => DirectoryEntry {
                    node: INodeNo(parent),
                    offset: 2,
                    kind: FileType::Directory,
                    name: OsStr::new(".."),
                },
                _ => {
                    let e = &entries[pos as usize - 2];
                    DirectoryEntry {
                        node: INodeNo(tree.node(e.number)),
                        offset: pos + 1,
                        kind: file_type(e.kind),
                        name: OsStr::from_bytes(&e.name),
                    }
                }
            };
            if reply.add(entry) {
                done = false;
                break;
            }
            added += 1;
        }
        learn(&mut turn, node, offset, added, entries.len());
        self.keep(
            node,
            fh,
            &entries,
            done && offset >= entries.len() as u64 + 2,
        );
        Ok(turn)
    }

    /// Lists directory `node` with each entry's attributes, as [`Directories::readdir`].
    pub(crate) fn readdirplus(
        &self,
        tree: &ServedTree,
        node: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: &mut impl DirectoryPlusReplier,
    ) -> FsResult<ListingTurn<'_>> {
        let mut turn = self
            .turns
            .take(node, offset, || tree.probe().waited_listing());
        tree.probe().listing();
        let dir = self.listing(tree, node, fh, offset)?;
        let own = tree.attr(&dir.inode);
        if short_answer(&mut turn, node, offset) {
            tree.probe().short_listing();
            // The kernel ignores the attributes of ".." (it only shows its number).
            let mut up = own;
            up.ino = INodeNo(tree.parent_node(&dir.inode));
            let (offset, name, attr) = match offset {
                0 => (1, ".", &own),
                _ => (2, "..", &up),
            };
            let _ = reply.add(DirectoryEntryPlus {
                offset,
                name: OsStr::new(name),
                attr,
                ttl: FOREVER,
                generation: GENERATION,
                link: true,
            });
            return Ok(turn);
        }
        let entries = self.entries(tree, &dir)?;
        // From 0 while another opener's fill is under way: that opener's answer links every
        // entry, so this one gives names, nodes and types only, and loads no inode.
        let link = !(offset == 0 && turn.known().get(node) == Some(CachedListing::Filling));
        if !link {
            tree.probe().unlinked_listing();
        }
        // Files and other non-directories get their attributes while walks stat them.
        let all = self.attrs.all();
        let mut files = 0;
        let mut file = false;
        let mut done = true;
        let mut answered = 0;
        for (added, pos) in (offset..entries.len() as u64 + 2).enumerate() {
            let full = match pos {
                0 => reply.add(DirectoryEntryPlus {
                    offset: 1,
                    name: OsStr::new("."),
                    attr: &own,
                    ttl: FOREVER,
                    generation: GENERATION,
                    link: true,
                }),
                1 => {
                    // The kernel ignores the attributes of ".." (it only shows its number).
                    let mut up = own;
                    up.ino = INodeNo(tree.parent_node(&dir.inode));
                    reply.add(DirectoryEntryPlus {
                        offset: 2,
                        name: OsStr::new(".."),
                        attr: &up,
                        ttl: FOREVER,
                        generation: GENERATION,
                        link: true,
                    })
                }
                _ => {
                    let e = &entries[pos as usize - 2];
                    let is_dir = e.kind == FileKind::Directory;
                    file = !is_dir;
                    let link = link && (all || is_dir);
                    let attr = if link {
                        match tree.load(e.id) {
                            Ok(inode) => tree.attr(&inode),
                            // Entries already added stay valid; the error comes on the next call.
                            Err(err) if added == 0 => return Err(err),
                            Err(_) => {
                                done = false;
                                break;
                            }
                        }
                    } else {
                        FileAttr {
                            ino: INodeNo(tree.node(e.number)),
                            kind: file_type(e.kind),
                            ..negative_attr()
                        }
                    };
                    reply.add(DirectoryEntryPlus {
                        offset: pos + 1,
                        name: OsStr::from_bytes(&e.name),
                        attr: &attr,
                        ttl: FOREVER,
                        generation: GENERATION,
                        link,
                    })
                }
            };
            if full {
                done = false;
                break;
            }
            files += u64::from(std::mem::take(&mut file));
            answered = added + 1;
        }
        learn(&mut turn, node, offset, answered, entries.len());
        if link {
            self.attrs.listed(files, !all);
            if !all {
                tree.probe().listed_bare(files);
            }
        }
        self.keep(
            node,
            fh,
            &entries,
            done && offset >= entries.len() as u64 + 2,
        );
        Ok(turn)
    }
}

/// Whether a listing request at `offset` gets the short answer: one entry, "." at 0 or ".."
/// at 1, because the kernel's cache of the listing is known complete (see
/// [`crate::listings`]). The request was on its way before the cache was; with the one entry
/// answered, the caller's next `getdents` finds its position in the cache and reads the rest
/// from there. (A short answer at 1 follows one at 0 when the requester's next `getdents` came
/// just before the cache was complete.)
fn short_answer(turn: &mut ListingTurn<'_>, node: INodeNo, offset: u64) -> bool {
    offset < 2 && turn.known().get(node) == Some(CachedListing::Complete)
}

/// What an answer of `added` entries from `offset`, of a directory of `len` entries (and "."
/// and ".."), tells of the kernel's cache of its listing: entries from 0 start filling it, the
/// end completes a fill; a request inside a listing known complete means the kernel no longer
/// has it (a complete cache answers every `getdents` inside it), so the next listing from 0
/// fills it again.
fn learn(turn: &mut ListingTurn<'_>, node: INodeNo, offset: u64, added: usize, len: usize) {
    let end = len as u64 + 2;
    if offset >= end {
        turn.ended(node);
        return;
    }
    let known = turn.known();
    if offset == 0 {
        if added > 0 {
            known.filling(node);
        }
    } else if known.get(node) == Some(CachedListing::Complete) {
        known.forget(node);
    }
}
