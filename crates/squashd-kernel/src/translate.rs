//! Translation: one walk of an open SquashFS [`Image`] gives the EROFS metadata image of its
//! tree and the [`BlobLayout`] of its file data.
//!
//! Every node keeps its type, permissions, owner, mtime, xattrs and device number; hard links
//! share one node (SquashFS gives them one inode number); symlink targets are copied. Regular
//! files become chunk-based inodes pointing into the blob, where each file's bytes lie
//! contiguous from a block boundary; an EROFS chunk whose SquashFS blocks are all sparse is a
//! hole. The walk is depth-first in directory order, the order mksquashfs stores data in, so a
//! sequential read of the blob reads the image nearly front to back.
//!
//! The image is untrusted: a directory reached twice (a cycle, or a directory hard link) fails
//! the translation, as does anything EROFS cannot hold; nothing is mounted then.

use crate::blob::{BlobLayout, BLOB_BLOCK};
use crate::kernel_mount::KernelMountOptions;
use squashd_core::{FileKind, Image, Inode};
use squashd_erofs::{
    Chunk, CompactMtime, FileData, Kind, Metadata, NodeId, Rdev, Timestamp, Tree, WriteOptions,
};
use std::collections::HashMap;

/// Why an image could not be translated.
#[derive(Debug, thiserror::Error)]
pub enum TranslateError {
    /// The image could not be read (corrupt, I/O error).
    #[error(transparent)]
    Image(#[from] squashd_core::Error),
    /// The image holds something EROFS cannot (or the writer refused it).
    #[error("{image}: cannot translate {path:?} for the kernel: {source}")]
    Erofs {
        /// The image's name.
        image: String,
        /// Where in the image.
        path: String,
        /// What EROFS refused.
        #[source]
        source: squashd_erofs::Error,
    },
    /// A directory appears twice in the tree.
    #[error("{image}: corrupt image: directory {path:?} is reached twice (a cycle or a directory hard link)")]
    DirectoryTwice {
        /// The image's name.
        image: String,
        /// The second path to it.
        path: String,
    },
    /// The blob would exceed what EROFS can address.
    #[error(
        "{image}: the file data ({blocks} blocks of 4 KiB) is too large for one EROFS blob device"
    )]
    BlobTooLarge {
        /// The image's name.
        image: String,
        /// Blocks needed.
        blocks: u64,
    },
}

/// Owner overrides applied to every node (the `uid=` / `gid=` mount options).
#[derive(Debug, Clone, Copy, Default)]
pub struct OwnerOverride {
    /// Show every node as owned by this user.
    pub uid: Option<u32>,
    /// Show every node as owned by this group.
    pub gid: Option<u32>,
}

/// The result of a translation.
#[derive(Debug)]
pub struct Translation {
    /// The EROFS metadata image.
    pub metadata: Vec<u8>,
    /// Where each file's data lies in the blob.
    pub layout: BlobLayout,
    /// Nodes written (inodes of the EROFS image).
    pub nodes: usize,
}

/// EROFS chunk size used for files: 1 MiB, the size mkfs.erofs's `--chunksize` examples use.
/// Larger chunks would make the chunk index smaller, but holes are found at this granularity.
const CHUNK_SIZE: u64 = 1 << 20;

/// Translates `image` (from its directory `options.subdir`, or the image's root).
pub fn translate(
    image: &Image,
    options: &KernelMountOptions,
) -> Result<Translation, TranslateError> {
    let (root, owner) = (options.subdir.as_ref(), options.owner);
    let mut walk = Walk {
        image,
        owner,
        tree: None,
        layout: BlobLayout::new(),
        by_number: HashMap::new(),
        dirs_seen: std::collections::HashSet::new(),
        file_nodes: Vec::new(),
    };
    let root = match root {
        Some(r) => r.clone(),
        None => image.root()?,
    };
    walk.run(&root)?;
    let Walk {
        tree,
        mut layout,
        file_nodes,
        ..
    } = walk;
    // Every inode and directory was read once and will not be read again through this image
    // (the kernel serves them from the EROFS image): their blocks would hold memory, as much as
    // the metadata image itself (10.9 MiB on usr), through the write and for the mount's life.
    image.forget_metadata();
    let tree = tree.expect("run sets the tree");
    let large = tree.len() >= LARGE_TREE_NODES;
    if large {
        release_freed_memory();
    }
    let blob_blocks = u32::try_from(layout.blocks()).map_err(|_| TranslateError::BlobTooLarge {
        image: image.name().to_string(),
        blocks: layout.blocks(),
    })?;
    let write_options = WriteOptions {
        chunk_size: CHUNK_SIZE as u32,
        blob_blocks,
        compact_mtime: if options.relative_mtimes {
            CompactMtime::Relative
        } else {
            CompactMtime::BuildTime
        },
        ..WriteOptions::default()
    };
    let nodes = tree.len();
    let (metadata, nids) =
        write_metadata(tree, &write_options, large, &file_nodes).map_err(|source| {
            TranslateError::Erofs {
                image: image.name().to_string(),
                path: "/".into(),
                source,
            }
        })?;
    layout.set_nids(&nids);
    Ok(Translation {
        metadata,
        layout,
        nodes,
    })
}

/// Where the metadata image is spilled while it is written: `$TMPDIR`, else `/var/tmp` (a
/// disk, where /tmp may be memory).
fn spill_dir() -> std::path::PathBuf {
    std::env::var_os("TMPDIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/var/tmp".into())
}

/// Writes the metadata image of `tree` and returns it, consuming the tree, with the nids of
/// the nodes `files`.
///
/// A `large` tree's image goes to an unnamed temporary file first and is read back once the
/// tree is freed (and the freed heap handed back): written straight into memory, it would be
/// held beside the tree and the writer's plan, the translation's peak (on usr: a 17 MB image
/// on top of some 50 MB of tree and plan). A small tree's image, or one where no temporary
/// file can be made or written, is written in memory.
fn write_metadata(
    tree: Tree,
    options: &WriteOptions,
    large: bool,
    files: &[NodeId],
) -> squashd_erofs::Result<(Vec<u8>, Vec<u64>)> {
    if !large {
        return squashd_erofs::write_with_nids(&tree, options, files);
    }
    write_metadata_via(tree, options, &spill_dir(), files)
}

/// [`write_metadata`] of a large tree, spilling into `dir`.
fn write_metadata_via(
    tree: Tree,
    options: &WriteOptions,
    dir: &std::path::Path,
    files: &[NodeId],
) -> squashd_erofs::Result<(Vec<u8>, Vec<u64>)> {
    let Ok(mut spill) = tempfile::tempfile_in(dir) else {
        return squashd_erofs::write_with_nids(&tree, options, files);
    };
    let out = std::io::BufWriter::new(&mut spill);
    let (info, nids) = match squashd_erofs::write_to_with_nids(&tree, options, out, files) {
        Ok(written) => written,
        // The temporary file could not take it (a full disk): in memory, as without one.
        Err(squashd_erofs::Error::Io(_)) => {
            return squashd_erofs::write_with_nids(&tree, options, files)
        }
        Err(e) => return Err(e),
    };
    drop(tree);
    release_freed_memory();
    let image = read_back(&mut spill, info.bytes).map_err(|e| {
        squashd_erofs::Error::Io(std::io::Error::new(
            e.kind(),
            format!(
                "reading back the metadata image from {}: {e}",
                dir.display()
            ),
        ))
    })?;
    Ok((image, nids))
}

/// The `len` bytes written to `spill`.
fn read_back(spill: &mut std::fs::File, len: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek};
    let mut image = Vec::new();
    let len = usize::try_from(len).map_err(|_| std::io::ErrorKind::OutOfMemory)?;
    image
        .try_reserve_exact(len)
        .map_err(|_| std::io::ErrorKind::OutOfMemory)?;
    spill.rewind()?;
    spill.read_to_end(&mut image)?;
    if image.len() != len {
        return Err(std::io::Error::other(format!(
            "it holds {} bytes of {len}",
            image.len()
        )));
    }
    Ok(image)
}

/// Trees of this many nodes and more are worth spilling their image to disk while it is
/// written, and a `malloc_trim` once freed. Below, the heap they leave is small, and the trim
/// is not free: it advises away the free pages of every arena, and each advice flushes the
/// TLBs of the daemon's CPUs. Three trims per image took an eighth of a serve daemon's CPU
/// time while 69 small images attached (perf).
const LARGE_TREE_NODES: usize = 8192;

/// Gives the pages of freed heap memory back to the system. The metadata blocks just forgotten
/// are small allocations in the middle of the heap, which the writer's large buffers (mapped on
/// their own) cannot reuse: without this they stay resident through the write, the peak of a
/// translation.
fn release_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks glibc's own heap and has no precondition.
    unsafe {
        libc::malloc_trim(0);
    }
}

struct Walk<'a> {
    image: &'a Image,
    owner: OwnerOverride,
    tree: Option<Tree>,
    layout: BlobLayout,
    /// Non-directories already added, by SquashFS inode number: further names are hard links.
    by_number: HashMap<u32, NodeId>,
    dirs_seen: std::collections::HashSet<u32>,
    /// The node of each file placed in the blob, in layout order (for their nids).
    file_nodes: Vec<NodeId>,
}

impl Walk<'_> {
    fn erofs(&self, path: &[u8], source: squashd_erofs::Error) -> TranslateError {
        TranslateError::Erofs {
            image: self.image.name().to_string(),
            path: String::from_utf8_lossy(path).into_owned(),
            source,
        }
    }

    fn metadata(&self, inode: &Inode) -> Metadata {
        Metadata {
            mode: inode.permissions & 0o7777,
            uid: self.owner.uid.unwrap_or(inode.uid),
            gid: self.owner.gid.unwrap_or(inode.gid),
            mtime: Timestamp {
                sec: i64::from(inode.mtime),
                nsec: 0,
            },
        }
    }

    fn run(&mut self, root: &Inode) -> Result<(), TranslateError> {
        let tree = Tree::new(self.metadata(root)).map_err(|e| self.erofs(b"/", e))?;
        let root_node = tree.root();
        self.tree = Some(tree);
        self.dirs_seen.insert(root.number);
        self.xattrs(root, root_node, b"/")?;
        // Depth-first with an explicit stack: a hostile image cannot overflow ours.
        let mut stack: Vec<(Inode, NodeId, Vec<u8>)> = vec![(root.clone(), root_node, Vec::new())];
        while let Some((dir, node, path)) = stack.pop() {
            let entries = self.image.read_dir_plus(&dir)?;
            let mut subdirs = Vec::new();
            for (entry, inode) in entries {
                let mut child_path = path.clone();
                child_path.push(b'/');
                child_path.extend_from_slice(&entry.name);
                if inode.is_dir() {
                    if !self.dirs_seen.insert(inode.number) {
                        return Err(TranslateError::DirectoryTwice {
                            image: self.image.name().to_string(),
                            path: String::from_utf8_lossy(&child_path).into_owned(),
                        });
                    }
                    let meta = self.metadata(&inode);
                    let child = self
                        .tree_mut()
                        .add(node, &entry.name, meta, Kind::Directory)
                        .map_err(|e| self.erofs(&child_path, e))?;
                    self.xattrs(&inode, child, &child_path)?;
                    subdirs.push((inode, child, child_path));
                    continue;
                }
                if let Some(&existing) = self.by_number.get(&inode.number) {
                    self.tree_mut()
                        .link(node, &entry.name, existing)
                        .map_err(|e| self.erofs(&child_path, e))?;
                    continue;
                }
                let placed_before = self.layout.files().len();
                let kind = self.kind(&inode)?;
                let meta = self.metadata(&inode);
                let child = self
                    .tree_mut()
                    .add(node, &entry.name, meta, kind)
                    .map_err(|e| self.erofs(&child_path, e))?;
                if self.layout.files().len() > placed_before {
                    self.file_nodes.push(child);
                }
                self.xattrs(&inode, child, &child_path)?;
                if inode.nlink > 1 {
                    self.by_number.insert(inode.number, child);
                }
            }
            // Reversed onto the stack, so the first subdirectory is walked first.
            stack.extend(subdirs.into_iter().rev());
        }
        Ok(())
    }

    fn tree_mut(&mut self) -> &mut Tree {
        self.tree.as_mut().expect("run sets the tree first")
    }

    fn xattrs(&mut self, inode: &Inode, node: NodeId, path: &[u8]) -> Result<(), TranslateError> {
        if inode.xattr_index.is_none() {
            return Ok(());
        }
        for x in self.image.xattrs(inode)? {
            let result = self.tree_mut().set_xattr(node, &x.name, &x.value);
            result.map_err(|e| self.erofs(path, e))?;
        }
        Ok(())
    }

    fn kind(&mut self, inode: &Inode) -> Result<Kind, TranslateError> {
        Ok(match inode.kind {
            FileKind::Directory => Kind::Directory,
            FileKind::File => Kind::File(self.file_data(inode)?),
            FileKind::Symlink => Kind::Symlink(self.image.read_link(inode)?),
            FileKind::CharDevice => Kind::CharDevice(Rdev::from_encoded(inode.rdev)),
            FileKind::BlockDevice => Kind::BlockDevice(Rdev::from_encoded(inode.rdev)),
            FileKind::Fifo => Kind::Fifo,
            FileKind::Socket => Kind::Socket,
        })
    }

    /// Places the file in the blob; chunks whose SquashFS blocks are all sparse become holes.
    fn file_data(&mut self, inode: &Inode) -> Result<FileData, TranslateError> {
        let size = inode.size;
        let Some(start) = self.layout.place(inode.id, size) else {
            return Ok(FileData::empty());
        };
        let too_large = || TranslateError::BlobTooLarge {
            image: self.image.name().to_string(),
            blocks: self.layout.blocks(),
        };
        let start_block = u32::try_from(start).map_err(|_| too_large())?;
        let reader = self.image.open_file(inode)?;
        let block = u64::from(reader.block_size().max(1));
        let blocks = reader.chunk_count();
        let any_hole =
            (0..blocks).any(|i| reader.chunk_position(i).is_none() && !reader.is_tail_end(i));
        if !any_hole {
            return Ok(FileData::Contiguous { size, start_block });
        }
        let per_chunk = (CHUNK_SIZE / block).max(1);
        let chunk_blocks = CHUNK_SIZE / BLOB_BLOCK;
        let chunks = size.div_ceil(CHUNK_SIZE);
        let mut list = Vec::with_capacity(usize::try_from(chunks).unwrap_or(0).min(1 << 20));
        for c in 0..chunks {
            let first = c * per_chunk;
            let last = (first + per_chunk).min(blocks);
            let hole =
                (first..last).all(|i| reader.chunk_position(i).is_none() && !reader.is_tail_end(i));
            list.push(if hole {
                Chunk::Hole
            } else {
                let b = start.saturating_add(c.saturating_mul(chunk_blocks));
                Chunk::Blob {
                    block: u32::try_from(b).map_err(|_| too_large())?,
                }
            });
        }
        Ok(FileData::Chunks { size, chunks: list })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use squashd_erofs::{FileData, Kind, Metadata, Timestamp};

    fn tree() -> Tree {
        let meta = |mode| Metadata {
            mode,
            uid: 0,
            gid: 0,
            mtime: Timestamp {
                sec: 1_700_000_000,
                nsec: 0,
            },
        };
        let mut tree = Tree::new(meta(0o755)).unwrap();
        let dir = tree
            .add(tree.root(), b"d", meta(0o755), Kind::Directory)
            .unwrap();
        for i in 0..500u32 {
            let data = FileData::Contiguous {
                size: 5000,
                start_block: i * 2,
            };
            let name = format!("file-{i}");
            tree.add(dir, name.as_bytes(), meta(0o644), Kind::File(data))
                .unwrap();
        }
        tree
    }

    #[test]
    fn the_spilled_image_is_the_image_and_no_spill_dir_writes_it_in_memory() {
        let options = WriteOptions {
            blob_blocks: 1000,
            ..WriteOptions::default()
        };
        let expected = squashd_erofs::write(&tree(), &options).unwrap();
        assert!(expected.len() > 4096);
        let dir = tempfile::tempdir().unwrap();
        let root = [tree().root()];
        let (spilled, nids) = write_metadata_via(tree(), &options, dir.path(), &root).unwrap();
        assert!(spilled == expected, "the spilled image differs");
        let (_, expected_nids) = squashd_erofs::write_with_nids(&tree(), &options, &root).unwrap();
        assert_eq!(nids, expected_nids);
        // The spill file is unnamed: nothing is left in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let missing = dir.path().join("no-such-dir");
        let (in_memory, _) = write_metadata_via(tree(), &options, &missing, &[]).unwrap();
        assert!(in_memory == expected, "the in-memory image differs");
    }

    #[test]
    fn a_full_spill_dir_writes_the_image_in_memory() {
        if !nix::unistd::geteuid().is_root() {
            println!("SKIPPED: a full file system to spill into needs root (a tmpfs mount)");
            return;
        }
        let options = WriteOptions {
            blob_blocks: 1000,
            ..WriteOptions::default()
        };
        let expected = squashd_erofs::write(&tree(), &options).unwrap();
        let dir = tempfile::tempdir().unwrap();
        // Room for one page: the image is larger.
        nix::mount::mount(
            Some("tmpfs"),
            dir.path(),
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some("size=4k"),
        )
        .unwrap();
        let written = write_metadata_via(tree(), &options, dir.path(), &[]);
        nix::mount::umount2(dir.path(), nix::mount::MntFlags::MNT_DETACH).unwrap();
        assert!(written.unwrap().0 == expected, "the image differs");
    }
}
