//! Directories recently resolved as the parent of a path, by the text of the parent's path. A
//! program that reads or stats a directory's files one path after another (`pkg/a.py`,
//! `pkg/b.py`, ...: a walk that reads every file, an import system) has each path resolved with
//! one lookup in the parent instead of a walk from the image's root, which costs a directory
//! lookup per component. The image is immutable, so an entry never goes stale.
//!
//! A path is resolved here only when the walk would end the same way: its parent's text is
//! resolved as [`resolve`] resolves any path (symlinks followed, `..` honoured), and its last
//! component, a plain name, is looked up there. Anything else (a path ending in `/`, `.` or
//! `..`, a last component that is a symlink to follow, an error) is resolved from the root by
//! [`resolve_in`], so answers and errors are the same either way.

use crate::errors::{OpError, OpResult};
use crate::resolve::{resolve, resolve_in, FoundIn, NAME_MAX};
use squashd_core::{FileKind, Image, Inode};
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// Parent directories remembered at most; all are forgotten when there would be more (a walk
/// moves on from directories it has read).
const PARENT_DIRS: usize = 256;

/// Parent directories resolved, by the text of their path.
#[derive(Default)]
pub struct ParentDirs {
    dirs: Mutex<HashMap<Vec<u8>, Inode>>,
}

impl ParentDirs {
    /// As [`resolve_in`]: the inode at `path`, the directory it was found in and its name
    /// there.
    pub fn resolve_in(
        &self,
        image: &Image,
        path: &[u8],
        follow_last: bool,
    ) -> OpResult<(Inode, FoundIn)> {
        if let Some(found) = self.through_parent(image, path, follow_last)? {
            return Ok(found);
        }
        resolve_in(image, path, follow_last)
    }

    /// `path` resolved as a name in its parent directory, or `None` when it must be resolved
    /// from the root.
    fn through_parent(
        &self,
        image: &Image,
        path: &[u8],
        follow_last: bool,
    ) -> OpResult<Option<(Inode, FoundIn)>> {
        let (parent, name) = match path.iter().rposition(|&b| b == b'/') {
            Some(at) => (&path[..at], &path[at + 1..]),
            None => (&path[..0], path),
        };
        if name.is_empty() || name == b"." || name == b".." || name.len() > NAME_MAX {
            return Ok(None);
        }
        let Some(dir) = self.parent(image, parent) else {
            return Ok(None);
        };
        let Some(entry) = image.lookup(&dir, name)? else {
            // As the walk from the root ends: the last name is not in its directory.
            return Err(OpError::errno(libc::ENOENT));
        };
        let inode = image.inode(entry.id)?;
        if follow_last && inode.kind == FileKind::Symlink {
            return Ok(None);
        }
        Ok(Some((inode, Some((dir, name.to_vec())))))
    }

    /// The directory at `parent`, remembered or resolved now; `None` if it is not one (the
    /// walk from the root then says why).
    fn parent(&self, image: &Image, parent: &[u8]) -> Option<Inode> {
        if let Some(dir) = self.lock().get(parent) {
            return Some(dir.clone());
        }
        let dir = resolve(image, parent, true).ok()?;
        if dir.kind != FileKind::Directory {
            return None;
        }
        let mut dirs = self.lock();
        if dirs.len() >= PARENT_DIRS {
            dirs.clear();
        }
        dirs.insert(parent.to_vec(), dir.clone());
        Some(dir)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Inode>> {
        // The map holds no invariant a panic could break.
        self.dirs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
