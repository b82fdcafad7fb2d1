//! Walks and reads everything an image offers, within fixed bounds, collecting the errors.
//!
//! Used by the `open_walk_read` fuzz target and by `crates/squashd-core/tests/hostile.rs` (which
//! includes this file by path), so that the fuzzer and the regression tests run the same walk.
//! The walker keeps a visited set of inode ids, so a directory that lists itself or an ancestor
//! ends the descent; the library itself must terminate every call on any input.
//!
//! Invariants checked here (a violation panics, which the fuzzer reports as a finding): every
//! error is one line that starts with the image's name.

#![allow(dead_code)]

use squashd_core::source::MemorySource;
use squashd_core::{CacheBudgets, ChunkRead, Error, FileKind, Image, Inode, InodeId, OpenOptions};
use std::collections::HashSet;
use std::sync::Arc;

/// The name the exerciser gives the images it opens from bytes.
pub const IMAGE_NAME: &str = "fuzz.sqfs";

/// Bounds that keep one input fast however much the image claims.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Inodes visited at most.
    pub max_inodes: usize,
    /// Bytes read at each end of a file.
    pub file_edge: u64,
    /// Chunks read from the middle of a file.
    pub middle_chunks: u64,
    /// Errors kept (all are counted).
    pub max_errors: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_inodes: 20_000,
            file_edge: 64 * 1024,
            middle_chunks: 3,
            max_errors: 16,
        }
    }
}

/// What a walk saw.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Inodes loaded and visited.
    pub inodes: u64,
    /// Directory entries listed.
    pub entries: u64,
    /// Entries that lead to a directory already visited (a cycle, or a shared listing).
    pub revisited_dirs: u64,
    /// Bytes of file contents read.
    pub file_bytes: u64,
    /// Extended attributes read.
    pub xattrs: u64,
    /// Symlink targets read.
    pub symlinks: u64,
    /// Every error met (the walk goes on past each).
    pub error_count: u64,
    /// The first [`Limits::max_errors`] errors.
    pub errors: Vec<Error>,
}

impl Outcome {
    fn note<T>(&mut self, limits: &Limits, r: Result<T, Error>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                check_error(&e, IMAGE_NAME);
                self.error_count += 1;
                if self.errors.len() < limits.max_errors {
                    self.errors.push(e);
                }
                None
            }
        }
    }
}

/// Panics unless `e` is one line naming the image `name`.
pub fn check_error(e: &Error, name: &str) {
    let text = e.to_string();
    assert!(
        text.starts_with(name) && !text.contains('\n'),
        "error does not name the image on one line: {text:?}"
    );
}

/// Small caches, so that the fuzzer exercises loads and evictions, with the compressed tier on.
pub fn small_caches() -> OpenOptions {
    OpenOptions {
        budgets: CacheBudgets {
            metadata_bytes: 64 * 1024,
            data_bytes: 2 << 20,
            compressed_bytes: 1 << 20,
        },
        ..OpenOptions::default()
    }
}

/// Opens `data` as an image (small caches) and exercises it. Errors only if it cannot be opened.
pub fn exercise_bytes(data: &[u8]) -> Result<Outcome, Error> {
    let source = MemorySource::new(data.to_vec());
    let image = Image::from_source(Box::new(source), Arc::from(IMAGE_NAME), &small_caches())
        .inspect_err(|e| check_error(e, IMAGE_NAME))?;
    Ok(exercise_image(&image, &Limits::default()))
}

/// Walks the whole tree of `image` from its root, stats every inode, reads every symlink, every
/// xattr and the edges and a few middle chunks of every file, looks up names, and tries the
/// export table. Errors are collected; the walk goes on past each.
pub fn exercise_image(image: &Image, limits: &Limits) -> Outcome {
    let mut out = Outcome::default();
    let mut visited: HashSet<InodeId> = HashSet::new();
    let mut stack = vec![image.root_id()];
    let sb = image.superblock().clone();
    for number in [1, sb.inode_count / 2, sb.inode_count] {
        // Only exportable images have the table; others give Unsupported, which is fine.
        match image.inode_by_number(number) {
            Err(e) if e.kind() == squashd_core::ErrorKind::Unsupported => {
                check_error(&e, IMAGE_NAME)
            }
            r => {
                out.note(limits, r);
            }
        }
    }
    while let Some(id) = stack.pop() {
        if out.inodes as usize >= limits.max_inodes {
            break;
        }
        if !visited.insert(id) {
            continue;
        }
        let Some(inode) = out.note(limits, image.inode(id)) else {
            continue;
        };
        out.inodes += 1;
        stat(&inode);
        if let Some(xattrs) = out.note(limits, image.xattrs(&inode)) {
            out.xattrs += xattrs.len() as u64;
        }
        match inode.kind {
            FileKind::Directory => walk_dir(image, &inode, limits, &visited, &mut stack, &mut out),
            FileKind::File => read_file(image, &inode, limits, &mut out),
            FileKind::Symlink if out.note(limits, image.read_link(&inode)).is_some() => {
                out.symlinks += 1;
            }
            _ => {}
        }
    }
    out
}

/// Everything `stat` would compute; must not panic whatever the fields hold.
fn stat(inode: &Inode) {
    let _ = (
        inode.mode(),
        inode.is_dir(),
        inode.device(),
        inode.rdev_linux(),
        inode.blocks_512(),
        inode.sparse_bytes(),
        inode.symlink_target().map(<[u8]>::len),
    );
}

fn walk_dir(
    image: &Image,
    dir: &Inode,
    limits: &Limits,
    visited: &HashSet<InodeId>,
    stack: &mut Vec<InodeId>,
    out: &mut Outcome,
) {
    let Some(entries) = out.note(limits, image.read_dir(dir)) else {
        // Lookup takes another path (the directory index): try it on a broken listing too.
        let _ = out.note(limits, image.lookup(dir, b"a"));
        return;
    };
    out.entries += entries.len() as u64;
    // Lookups of the first, middle and last names, and of names that are not there.
    let picks = [0, entries.len() / 2, entries.len().saturating_sub(1)];
    for &i in picks.iter().filter(|&&i| i < entries.len()) {
        let _ = out.note(limits, image.lookup(dir, &entries[i].name));
    }
    for missing in [&b"\x01"[..], b"zzzz-not-there", b"\xff\xff"] {
        let _ = out.note(limits, image.lookup(dir, missing));
    }
    if dir.id == image.root_id() {
        if let Some(first) = entries.first() {
            let _ = out.note(limits, image.resolve_path(&first.name));
        }
    }
    for entry in entries {
        if visited.contains(&entry.id) {
            if entry.kind == FileKind::Directory {
                out.revisited_dirs += 1;
            }
            continue;
        }
        stack.push(entry.id);
    }
}

fn read_file(image: &Image, inode: &Inode, limits: &Limits, out: &mut Outcome) {
    let Some(file) = out.note(limits, image.open_file(inode)) else {
        return;
    };
    let size = file.size();
    let edge = size.min(limits.file_edge);
    let mut buf = vec![0u8; edge as usize];
    for offset in [0, size - edge] {
        if let Some(n) = out.note(limits, file.read_at(offset, &mut buf)) {
            assert!(
                n <= buf.len(),
                "read_at returned {n} for {} bytes",
                buf.len()
            );
            out.file_bytes += n as u64;
        }
    }
    let chunks = file.chunk_count();
    let mut streamed = Vec::new();
    for k in 1..=limits.middle_chunks {
        let index = chunks / (limits.middle_chunks + 1) * k;
        if index < chunks {
            // The streaming path (extraction's) first, while the block is not cached, then the
            // cached one: where both succeed, they give the same bytes.
            let stream = out.note(limits, file.read_chunk_into(index, &mut streamed));
            if let Some(chunk) = out.note(limits, file.chunk(index)) {
                assert!(chunk.len() <= file.block_size() as usize);
                out.file_bytes += chunk.len() as u64;
                match stream {
                    Some(ChunkRead::Hole(len)) => assert!(chunk.is_hole() && chunk.len() == len),
                    Some(ChunkRead::Data) => assert_eq!(chunk.bytes(), &streamed[..]),
                    Some(ChunkRead::Cached(lent)) => assert_eq!(chunk.bytes(), lent.bytes()),
                    None => {}
                }
            }
        }
    }
    // Past the end: the caller's mistake, not the image's; an error or nothing, never a panic.
    if let Err(e) = file.chunk(chunks) {
        check_error(&e, IMAGE_NAME);
    }
    for offset in [size, u64::MAX - 1] {
        match file.read_at(offset, &mut buf) {
            Ok(n) => assert_eq!(n, 0, "read_at({offset}) past the end of {size} bytes"),
            Err(e) => check_error(&e, IMAGE_NAME),
        }
    }
}
