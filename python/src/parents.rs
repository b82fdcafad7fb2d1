//! Directories recently resolved as the parent of a path, by the text of the parent's path. A
//! program that reads or stats a directory's files one path after another (`pkg/a.py`,
//! `pkg/b.py`, ...: a walk that reads every file, an import system) has each path resolved with
//! a binary search of the parent's listing, read once, instead of a walk from the image's root,
//! which costs a directory lookup (a scan of part of a listing) per component. The image is
//! immutable, so an entry never goes stale. The listing is also what the read-ahead across
//! files needs.
//!
//! A path is resolved here only when the walk would end the same way: its parent's text is
//! resolved as [`resolve`] resolves any path (symlinks followed, `..` honoured), and its last
//! component, a plain name, is looked up there. Anything else (a path ending in `/`, `.` or
//! `..`, a last component that is a symlink to follow, an error) is resolved from the root by
//! [`resolve_in`], so answers and errors are the same either way.

use crate::errors::{OpError, OpResult};
use crate::resolve::{resolve, resolve_in, FoundIn, NAME_MAX};
use squashd_core::{DirEntry, FileKind, Image, Inode};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Parent directories remembered at most; all are forgotten when there would be more (a walk
/// moves on from directories it has read).
const PARENT_DIRS: usize = 256;
/// Bytes of listings (as directories' sizes count them) remembered at most; a directory with a
/// longer listing is remembered without it (names are looked up in it as a walk does). Held in
/// memory, a listing takes two or three times its size.
const LISTED_BYTES: u64 = 4 << 20;

/// A directory resolved as a parent, and its listing (sorted by name).
#[derive(Clone)]
pub struct Parent {
    /// The directory.
    pub dir: Inode,
    /// Its entries, unless it has too many to keep.
    pub listing: Option<Listing>,
}

/// A directory's listing, shared.
pub type Listing = Arc<Vec<DirEntry>>;

/// What [`ParentDirs::resolve_in`] found: the inode, the directory it was found in and its
/// name there, and that directory's listing when the path was resolved through it.
pub type Resolved = (Inode, FoundIn, Option<Listing>);

/// Parent directories resolved, by the text of their path.
#[derive(Default)]
pub struct ParentDirs {
    dirs: Mutex<Remembered>,
}

/// The directories remembered, and the bytes of their listings together.
#[derive(Default)]
struct Remembered {
    by_path: HashMap<Vec<u8>, Parent>,
    bytes: u64,
}

impl ParentDirs {
    /// As [`resolve_in`]: the inode at `path`, the directory it was found in and its name
    /// there; and that directory's listing when it was resolved through it.
    pub fn resolve_in(&self, image: &Image, path: &[u8], follow_last: bool) -> OpResult<Resolved> {
        if let Some(found) = self.through_parent(image, path, follow_last)? {
            return Ok(found);
        }
        let (inode, found_in) = resolve_in(image, path, follow_last)?;
        Ok((inode, found_in, None))
    }

    /// `path` resolved as a name in its parent directory, or `None` when it must be resolved
    /// from the root.
    fn through_parent(
        &self,
        image: &Image,
        path: &[u8],
        follow_last: bool,
    ) -> OpResult<Option<Resolved>> {
        let (parent, name) = match path.iter().rposition(|&b| b == b'/') {
            Some(at) => (&path[..at], &path[at + 1..]),
            None => (&path[..0], path),
        };
        if name.is_empty() || name == b"." || name == b".." || name.len() > NAME_MAX {
            return Ok(None);
        }
        let Some(Parent { dir, listing }) = self.parent(image, parent) else {
            return Ok(None);
        };
        let found = listing.as_ref().and_then(|listing| {
            let at = listing.binary_search_by(|e| e.name.as_slice().cmp(name));
            at.ok().map(|at| listing[at].id)
        });
        let id = match found {
            Some(id) => id,
            // Not kept, or not in it: listings are sorted, but one that is not (a hostile image)
            // is searched as the walk from the root searches it.
            None => match image.lookup(&dir, name)? {
                Some(entry) => entry.id,
                // As the walk from the root ends: the last name is not in its directory.
                None => return Err(OpError::errno(libc::ENOENT)),
            },
        };
        let inode = image.inode(id)?;
        if follow_last && inode.kind == FileKind::Symlink {
            return Ok(None);
        }
        Ok(Some((inode, Some((dir, name.to_vec())), listing)))
    }

    /// The directory at `parent`, remembered or resolved now; `None` if it is not one (the
    /// walk from the root then says why).
    pub fn parent(&self, image: &Image, parent: &[u8]) -> Option<Parent> {
        if let Some(found) = self.lock().by_path.get(parent) {
            return Some(found.clone());
        }
        let dir = resolve(image, parent, true).ok()?;
        if dir.kind != FileKind::Directory {
            return None;
        }
        let listing = if dir.size <= LISTED_BYTES {
            Some(Arc::new(image.read_dir(&dir).ok()?))
        } else {
            None
        };
        let found = Parent { dir, listing };
        let bytes = |p: &Parent| p.listing.as_ref().map_or(0, |_| p.dir.size);
        let mut dirs = self.lock();
        if dirs.by_path.len() >= PARENT_DIRS || dirs.bytes + bytes(&found) > LISTED_BYTES {
            *dirs = Remembered::default();
        }
        dirs.bytes += bytes(&found);
        if let Some(was) = dirs.by_path.insert(parent.to_vec(), found.clone()) {
            // Another thread remembered it meanwhile: counted once.
            dirs.bytes -= bytes(&was);
        }
        Some(found)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Remembered> {
        // The map holds no invariant a panic could break.
        self.dirs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
