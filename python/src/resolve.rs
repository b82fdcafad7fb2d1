//! Paths resolved as the kernel resolves them in a mounted image: components looked up one by
//! one, `.` and `..` honoured (`..` of the root is the root), symbolic links followed within the
//! image (an absolute target starts again at the image's root), at most [`MAX_SYMLINKS`] of them.

use crate::errors::{OpError, OpResult};
use squashd_core::{FileKind, Image, Inode};
use std::collections::VecDeque;

/// Links followed in one resolution before it fails with ELOOP, as Linux's limit.
pub const MAX_SYMLINKS: usize = 40;

/// The longest name a directory entry may have, as the kernel's `NAME_MAX`.
pub const NAME_MAX: usize = 255;

/// The inode at `path` (relative to the image's root, with or without a leading '/'). Symbolic
/// links in the middle of the path are always followed; the last one only if `follow_last`. A
/// path ending in '/' must name a directory.
pub fn resolve(image: &Image, path: &[u8], follow_last: bool) -> OpResult<Inode> {
    Ok(resolve_in(image, path, follow_last)?.0)
}

/// The directory an inode was found in, and its name there.
pub type FoundIn = Option<(Inode, Vec<u8>)>;

/// As [`resolve`], with the directory the inode was found in and its name there (`None` for
/// the root).
pub fn resolve_in(image: &Image, path: &[u8], follow_last: bool) -> OpResult<(Inode, FoundIn)> {
    let must_be_dir = path.ends_with(b"/");
    let follow_last = follow_last || must_be_dir;
    let mut pending: VecDeque<Vec<u8>> = components(path).map(<[u8]>::to_vec).collect();
    // The directories from the root to where the walk stands, for `..`.
    let mut stack = vec![image.root()?];
    // The name of each inode of the stack but the root, in the directory below it.
    let mut names: Vec<Vec<u8>> = Vec::new();
    let mut links = 0;
    while let Some(name) = pending.pop_front() {
        if name == b".." {
            if stack.len() > 1 {
                stack.pop();
                names.pop();
            }
            continue;
        }
        let Some(dir) = stack.last() else {
            return Err(OpError::errno(libc::ENOENT));
        };
        if dir.kind != FileKind::Directory {
            return Err(OpError::errno(libc::ENOTDIR));
        }
        if name.len() > NAME_MAX {
            return Err(OpError::errno(libc::ENAMETOOLONG));
        }
        let entry = image
            .lookup(dir, &name)?
            .ok_or_else(|| OpError::errno(libc::ENOENT))?;
        let inode = image.inode(entry.id)?;
        let last = pending.is_empty();
        if let Some(target) = inode.symlink_target().filter(|_| !last || follow_last) {
            links += 1;
            if links > MAX_SYMLINKS {
                return Err(OpError::errno(libc::ELOOP));
            }
            if target.is_empty() {
                return Err(OpError::errno(libc::ENOENT));
            }
            if target.starts_with(b"/") {
                stack.truncate(1);
                names.clear();
            }
            for component in components(target).collect::<Vec<_>>().into_iter().rev() {
                pending.push_front(component.to_vec());
            }
            continue;
        }
        stack.push(inode);
        names.push(name);
    }
    let found = stack.pop().ok_or_else(|| OpError::errno(libc::ENOENT))?;
    if must_be_dir && found.kind != FileKind::Directory {
        return Err(OpError::errno(libc::ENOTDIR));
    }
    let parent = stack.pop().zip(names.pop());
    Ok((found, parent))
}

/// The components of `path` that name something: empty ones and `.` left out.
pub fn components(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
}
