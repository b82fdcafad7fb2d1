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

/// A directory resolved as a parent, and its listing (sorted by name).
#[derive(Clone)]
pub struct Parent {
    /// The directory.
    pub dir: Inode,
    /// Its entries.
    pub listing: Listing,
}

/// A directory's listing, shared.
pub type Listing = Arc<Vec<DirEntry>>;

/// What [`ParentDirs::resolve_in`] found: the inode, the directory it was found in and its
/// name there, and that directory's listing when the path was resolved through it.
pub type Resolved = (Inode, FoundIn, Option<Listing>);

/// Parent directories resolved, by the text of their path.
#[derive(Default)]
pub struct ParentDirs {
    dirs: Mutex<HashMap<Vec<u8>, Parent>>,
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
        let id = match listing.binary_search_by(|e| e.name.as_slice().cmp(name)) {
            Ok(at) => listing[at].id,
            // Listings are sorted; one that is not (a hostile image) is searched as the walk
            // from the root searches it.
            Err(_) => match image.lookup(&dir, name)? {
                Some(entry) => entry.id,
                // As the walk from the root ends: the last name is not in its directory.
                None => return Err(OpError::errno(libc::ENOENT)),
            },
        };
        let inode = image.inode(id)?;
        if follow_last && inode.kind == FileKind::Symlink {
            return Ok(None);
        }
        Ok(Some((inode, Some((dir, name.to_vec())), Some(listing))))
    }

    /// The directory at `parent`, remembered or resolved now; `None` if it is not one (the
    /// walk from the root then says why).
    fn parent(&self, image: &Image, parent: &[u8]) -> Option<Parent> {
        if let Some(found) = self.lock().get(parent) {
            return Some(found.clone());
        }
        let dir = resolve(image, parent, true).ok()?;
        if dir.kind != FileKind::Directory {
            return None;
        }
        let listing = Arc::new(image.read_dir(&dir).ok()?);
        let found = Parent { dir, listing };
        let mut dirs = self.lock();
        if dirs.len() >= PARENT_DIRS {
            dirs.clear();
        }
        dirs.insert(parent.to_vec(), found.clone());
        Some(found)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Parent>> {
        // The map holds no invariant a panic could break.
        self.dirs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
