//! The served tree: the image (or one directory of it) as the kernel names it, by node ids.
//!
//! Every operation starts here: a node id from the kernel becomes an inode of the image, an
//! inode becomes the attributes the kernel is shown, and a library error becomes an errno
//! (counted in the mount's probe when it is EIO).

use crate::attr::{file_attr, Owner};
use crate::config::MountConfig;
use crate::error::{FsError, FsResult};
use crate::nodes::NodeMap;
use crate::probe::MountProbe;
use fuser::{Errno, FileAttr, INodeNo};
use squashd_core::{Image, Inode, InodeId};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The image as the kernel sees it: the root, the nodes handed out, the owner overrides.
pub(crate) struct ServedTree {
    image: Image,
    root: Inode,
    nodes: NodeMap,
    owner: Owner,
    probe: MountProbe,
}

impl ServedTree {
    /// The tree of `image`, rooted at `config.subdir` if given. Fails when the image's root
    /// or that directory cannot be read, or is not a directory.
    pub(crate) fn new(image: Image, config: &MountConfig) -> squashd_core::Result<Self> {
        let root = match &config.subdir {
            Some(dir) => image.resolve_path(dir.as_os_str().as_bytes())?,
            None => image.root()?,
        };
        if !root.is_dir() {
            return Err(squashd_core::Error::NotADirectory {
                image: image.name().into(),
                path: config
                    .subdir
                    .as_deref()
                    .unwrap_or(Path::new("/"))
                    .display()
                    .to_string(),
            });
        }
        Ok(ServedTree {
            nodes: NodeMap::new(root.number, root.id, image.inode_count()),
            owner: Owner {
                uid: config.uid,
                gid: config.gid,
            },
            probe: MountProbe::default(),
            root,
            image,
        })
    }

    pub(crate) fn image(&self) -> &Image {
        &self.image
    }

    pub(crate) fn probe(&self) -> &MountProbe {
        &self.probe
    }

    /// The error for a library error, counting the requests that fail with EIO.
    pub(crate) fn error(&self, e: squashd_core::Error) -> FsError {
        if matches!(
            e.kind(),
            squashd_core::ErrorKind::Io | squashd_core::ErrorKind::Corrupt
        ) {
            self.probe.failed(&e);
        }
        FsError::from_image(e)
    }

    /// The inode the kernel calls `node`.
    pub(crate) fn inode(&self, node: INodeNo) -> FsResult<Inode> {
        if node.0 == 1 {
            return Ok(self.root.clone());
        }
        // The kernel names only nodes it was given; anything else is a stale handle.
        let id = self.nodes.id(node.0).ok_or(Errno::from_i32(libc::ESTALE))?;
        self.load(id)
    }

    /// The inode `id` of the image.
    pub(crate) fn load(&self, id: InodeId) -> FsResult<Inode> {
        self.image.inode(id).map_err(|e| self.error(e))
    }

    /// The attributes of `inode`, remembering its node so that the kernel may name it later.
    pub(crate) fn attr(&self, inode: &Inode) -> FileAttr {
        let node = self.nodes.remember(inode.number, inode.id);
        file_attr(node, inode, self.owner, self.image.block_size())
    }

    /// The node of inode number `number` (without remembering it: readdir's entries are only
    /// named, the kernel looks them up before using them).
    pub(crate) fn node(&self, number: u32) -> u64 {
        self.nodes.node(number)
    }

    /// Node of a directory's "..", as readdir shows it.
    pub(crate) fn parent_node(&self, dir: &Inode) -> u64 {
        if dir.number == self.root.number {
            return 1;
        }
        dir.parent.map_or(1, |p| self.nodes.node(p))
    }
}
