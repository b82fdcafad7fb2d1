//! The directory a walk that reads every file enters after the one it is in, for read-ahead
//! across directories (`siblings`). Walks that read a tree's files visit each directory before
//! its subdirectories (`os.walk`, and a stack of `scandir` calls, as most programs write them);
//! they differ in the order they take a directory's subdirectories in: `os.walk` in the
//! listing's order, a stack last pushed first, i.e. backwards. Which one a reader follows is
//! learned from its step into a new directory.
//!
//! Directories are named by the text of their path, as the reader names its files' parents
//! (`ParentDirs` remembers their listings by that text): a child's path is its parent's joined
//! with its name, and its parent's path is its own without the last name. A walk through
//! symlinks or `..` is followed as far as those texts name its directories; where they do not,
//! the prediction misses and costs only the files read ahead for nothing.

use crate::parents::{Listing, ParentDirs};
use squashd_core::{DirEntry, FileKind, Image, InodeId};

/// The order a walk takes a directory's subdirectories in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// The listing's order (`os.walk`).
    Forward,
    /// The listing's order backwards (a stack of directories, the last pushed taken first).
    Backward,
}

/// A directory on the walk's way: its path text, inode and listing.
#[derive(Clone)]
pub struct WalkDir {
    /// Its path, as the reader names it.
    pub path: Vec<u8>,
    /// Its inode.
    pub id: InodeId,
    /// Its entries, sorted by name.
    pub listing: Listing,
}

/// Steps a walk may take through directories without files between two with files: a walk's
/// next directory read from is found within as many steps (or not looked for).
pub const STEPS: usize = 8;

/// The directory a walk in `order` enters after `dir`: its first subdirectory in that order or,
/// if it has none, the next one (in that order) of its own or its nearest ancestor's siblings.
/// `None` at the walk's end, or where a directory on the way cannot be read or is too large to
/// be remembered.
pub fn next_dir(
    image: &Image,
    parents: &ParentDirs,
    dir: &WalkDir,
    order: Order,
) -> Option<WalkDir> {
    if let Some(sub) = first_subdir(&dir.listing, order) {
        return enter(image, parents, &dir.path, &sub.name);
    }
    let mut child = dir.path.as_slice();
    loop {
        let (parent_path, name) = split(child)?;
        let parent = parents.parent(image, parent_path)?;
        let listing = parent.listing?;
        let at = listing
            .binary_search_by(|e| e.name.as_slice().cmp(name))
            .ok()?;
        let sibling = match order {
            Order::Forward => listing[at + 1..]
                .iter()
                .find(|e| e.kind == FileKind::Directory),
            Order::Backward => listing[..at]
                .iter()
                .rev()
                .find(|e| e.kind == FileKind::Directory),
        };
        if let Some(sibling) = sibling {
            return enter(image, parents, parent_path, &sibling.name);
        }
        child = parent_path;
    }
}

/// The order in which a walk that was in `from` and now reads in directory `to` took its
/// step: the one whose next directories (within [`STEPS`]) reach `to`. `None` if neither does.
pub fn learn(image: &Image, parents: &ParentDirs, from: &WalkDir, to: InodeId) -> Option<Order> {
    [Order::Backward, Order::Forward]
        .into_iter()
        .find(|&order| {
            let mut at = from.clone();
            (0..STEPS).any(|_| match next_dir(image, parents, &at, order) {
                Some(next) => {
                    let found = next.id == to;
                    at = next;
                    found
                }
                None => false,
            })
        })
}

/// `dir`'s first subdirectory in `order`.
fn first_subdir(listing: &[DirEntry], order: Order) -> Option<&DirEntry> {
    let is_dir = |e: &&DirEntry| e.kind == FileKind::Directory;
    match order {
        Order::Forward => listing.iter().find(is_dir),
        Order::Backward => listing.iter().rev().find(is_dir),
    }
}

/// The subdirectory `name` of the directory at `parent_path`, as a [`WalkDir`].
fn enter(image: &Image, parents: &ParentDirs, parent_path: &[u8], name: &[u8]) -> Option<WalkDir> {
    let path = join(parent_path, name);
    let found = parents.parent(image, &path)?;
    Some(WalkDir {
        id: found.dir.id,
        listing: found.listing?,
        path,
    })
}

/// The path of `name` in the directory at `parent` (the root's path is empty, as a path's
/// parent text is for a file of the root: `/a` has the parent text "").
pub fn join(parent: &[u8], name: &[u8]) -> Vec<u8> {
    let mut path = Vec::with_capacity(parent.len() + 1 + name.len());
    path.extend_from_slice(parent);
    if !path.ends_with(b"/") {
        path.push(b'/');
    }
    path.extend_from_slice(name);
    path
}

/// `path` split into its parent's path and its last name; `None` for the root (an empty path,
/// or `/`).
pub fn split(path: &[u8]) -> Option<(&[u8], &[u8])> {
    let path = path.strip_suffix(b"/").unwrap_or(path);
    let at = path.iter().rposition(|&b| b == b'/');
    let (parent, name) = match at {
        Some(at) => (&path[..at], &path[at + 1..]),
        None => (&path[..0], path),
    };
    (!name.is_empty()).then_some((parent, name))
}
