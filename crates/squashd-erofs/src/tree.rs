//! The tree description the writer takes: nodes, directory entries, metadata, xattrs, file chunks.
//!
//! The tree is built top-down: a node is created under an existing directory, so directories
//! always form a tree rooted at [`Tree::root`] (no cycles, nothing unreachable), and only
//! non-directories can gain more names through [`Tree::link`] (hard links). Names and xattrs are
//! checked when they are added; what depends on the write options (chunk counts, blob bounds)
//! and duplicate names (found after sorting, to keep insertion O(1)) is checked by the writer.

use std::collections::HashMap;

use crate::error::{lossy, Error, Result};
use crate::xattr::Xattr;

/// A node of a [`Tree`]: an index handed out by the tree that made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub(crate) u32);

impl NodeId {
    /// The node's index in its tree (0 is the root).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A modification time, exact to the nanosecond.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Timestamp {
    /// Seconds since the epoch (may be negative).
    pub sec: i64,
    /// Nanoseconds, below 1_000_000_000.
    pub nsec: u32,
}

/// Owner, permissions and time of a node; the file type comes from the node's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Metadata {
    /// Permission bits including setuid, setgid and sticky (`0o7777` at most).
    pub mode: u16,
    /// Owner. 4294967295 is written as given, but it is `(uid_t)-1`, which Linux cannot hold:
    /// the kernel shows it as the overflow id (65534), as it does for SquashFS.
    pub uid: u32,
    /// Group (the same note as for `uid`).
    pub gid: u32,
    /// Modification time.
    pub mtime: Timestamp,
}

/// A device number in the 32-bit encoding EROFS (and SquashFS) store: the kernel's
/// `new_encode_dev`, minor bits 0-7 and 20-31, major bits 8-19.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rdev(pub(crate) u32);

impl Rdev {
    /// From major and minor numbers (major below 4096, minor below 2^20).
    pub fn new(major: u32, minor: u32) -> Result<Self> {
        if major >= 1 << 12 || minor >= 1 << 20 {
            return Err(Error::InvalidRdev { major, minor });
        }
        Ok(Rdev(
            (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12),
        ))
    }

    /// From the 32-bit encoded form (as SquashFS stores it); every value is valid.
    pub fn from_encoded(raw: u32) -> Self {
        Rdev(raw)
    }

    /// The encoded form.
    pub fn encoded(self) -> u32 {
        self.0
    }

    /// Major number.
    pub fn major(self) -> u32 {
        (self.0 & 0xfff00) >> 8
    }

    /// Minor number.
    pub fn minor(self) -> u32 {
        (self.0 & 0xff) | ((self.0 >> 12) & 0xfff00)
    }
}

/// One chunk of a regular file: `chunk_size` bytes of it (the last one shorter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chunk {
    /// Reads as zeros; takes no blob space.
    Hole,
    /// Stored in the blob device from this block (in units of the block size) on.
    Blob {
        /// First blob block of the chunk.
        block: u32,
    },
}

/// Where a regular file's bytes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileData {
    /// All `size` bytes contiguous in the blob from `start_block` on (no holes); the writer cuts
    /// it into chunks. Ignored (no chunks) when `size` is 0.
    Contiguous {
        /// File size in bytes.
        size: u64,
        /// First blob block.
        start_block: u32,
    },
    /// One entry per chunk: `size.div_ceil(chunk_size)` of them.
    Chunks {
        /// File size in bytes.
        size: u64,
        /// The chunks in file order.
        chunks: Vec<Chunk>,
    },
}

impl FileData {
    /// An empty file.
    pub fn empty() -> Self {
        FileData::Chunks {
            size: 0,
            chunks: Vec::new(),
        }
    }

    /// The file's size.
    pub fn size(&self) -> u64 {
        match self {
            FileData::Contiguous { size, .. } | FileData::Chunks { size, .. } => *size,
        }
    }
}

/// What a new node is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A directory (entries are added under it afterwards).
    Directory,
    /// A regular file.
    File(FileData),
    /// A symbolic link to these bytes (1..=4095 of them, no NUL).
    Symlink(Vec<u8>),
    /// A character device.
    CharDevice(Rdev),
    /// A block device.
    BlockDevice(Rdev),
    /// A named pipe.
    Fifo,
    /// A Unix socket.
    Socket,
}

/// A directory entry: a name (in the tree's name bytes) and the node it names. 12 bytes, where a
/// boxed name took 24 and an allocation of its own (on /usr, 181k entries).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    /// Where the name starts in [`Tree::name_bytes`].
    name_at: u32,
    /// Its length (names are at most 255 bytes).
    name_len: u8,
    /// The node it names.
    pub node: NodeId,
}

/// A node's content as the tree stores it.
pub(crate) enum Body {
    Directory { entries: Vec<Entry>, parent: NodeId },
    File(FileData),
    Symlink(Box<[u8]>),
    CharDevice(Rdev),
    BlockDevice(Rdev),
    Fifo,
    Socket,
}

pub(crate) struct Node {
    pub body: Body,
    pub meta: Metadata,
    /// Indexes into the tree's xattr pool.
    pub xattrs: Box<[u32]>,
    /// Directory entries naming this node (for a directory: 1, its entry in the parent).
    pub names: u32,
}

/// A file system tree to write: see the crate documentation for an example.
pub struct Tree {
    pub(crate) nodes: Vec<Node>,
    /// Every distinct xattr once: nodes refer to them by index, so a label that 100k files share
    /// is held once, and sharing on disk falls out of the reference counts.
    pub(crate) xattr_pool: Vec<Xattr>,
    xattr_ids: HashMap<Xattr, u32>,
    /// Every entry's name, end to end.
    name_bytes: Vec<u8>,
}

impl Tree {
    /// A tree holding only a root directory with this metadata.
    pub fn new(root: Metadata) -> Result<Self> {
        check_meta(&root)?;
        let root_id = NodeId(0);
        Ok(Tree {
            nodes: vec![Node {
                body: Body::Directory {
                    entries: Vec::new(),
                    parent: root_id,
                },
                meta: root,
                xattrs: Box::default(),
                names: 1,
            }],
            xattr_pool: Vec::new(),
            xattr_ids: HashMap::new(),
            name_bytes: Vec::new(),
        })
    }

    /// The root directory.
    pub fn root(&self) -> NodeId {
        NodeId(0)
    }

    /// Number of nodes (inodes), the root included.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false: a tree has at least its root.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Creates a node named `name` in directory `parent`.
    pub fn add(
        &mut self,
        parent: NodeId,
        name: &[u8],
        meta: Metadata,
        kind: Kind,
    ) -> Result<NodeId> {
        check_name(name)?;
        check_meta(&meta)?;
        self.dir_entries(parent)?;
        let id =
            NodeId(u32::try_from(self.nodes.len()).map_err(|_| Error::TooLarge("node count"))?);
        let body = match kind {
            Kind::Directory => Body::Directory {
                entries: Vec::new(),
                parent,
            },
            Kind::File(data) => Body::File(data),
            Kind::Symlink(target) => {
                check_symlink(&target)?;
                Body::Symlink(target.into())
            }
            Kind::CharDevice(r) => Body::CharDevice(r),
            Kind::BlockDevice(r) => Body::BlockDevice(r),
            Kind::Fifo => Body::Fifo,
            Kind::Socket => Body::Socket,
        };
        self.nodes.push(Node {
            body,
            meta,
            xattrs: Box::default(),
            names: 1,
        });
        self.push_entry(parent, name, id)?;
        Ok(id)
    }

    /// Adds another name for an existing non-directory node (a hard link).
    pub fn link(&mut self, parent: NodeId, name: &[u8], target: NodeId) -> Result<()> {
        check_name(name)?;
        let node = self
            .nodes
            .get(target.index())
            .ok_or(Error::NoSuchNode(target))?;
        if matches!(node.body, Body::Directory { .. }) {
            return Err(Error::LinkToDirectory(target));
        }
        if node.names == u32::MAX {
            return Err(Error::TooLarge("link count"));
        }
        self.push_entry(parent, name, target)?;
        self.nodes[target.index()].names += 1;
        Ok(())
    }

    /// Sets an xattr of a node, by full name (`security.capability`, `user.foo`...).
    pub fn set_xattr(&mut self, node: NodeId, name: &[u8], value: &[u8]) -> Result<()> {
        let x = Xattr::new(name, value)?;
        if node.index() >= self.nodes.len() {
            return Err(Error::NoSuchNode(node));
        }
        // A name set twice is refused by the writer, after sorting: a check here would be
        // quadratic in a node's xattr count.
        let id = match self.xattr_ids.get(&x) {
            Some(&id) => id,
            None => {
                let id = u32::try_from(self.xattr_pool.len())
                    .map_err(|_| Error::TooLarge("xattr count"))?;
                self.xattr_pool.push(x.clone());
                self.xattr_ids.insert(x, id);
                id
            }
        };
        let xattrs = &mut self.nodes[node.index()].xattrs;
        *xattrs = xattrs.iter().copied().chain([id]).collect();
        Ok(())
    }

    /// The name of an entry.
    pub(crate) fn name(&self, entry: &Entry) -> &[u8] {
        &self.name_bytes[entry.name_at as usize..][..usize::from(entry.name_len)]
    }

    /// Adds the entry `name` for `node` to directory `dir` (a checked name).
    fn push_entry(&mut self, dir: NodeId, name: &[u8], node: NodeId) -> Result<()> {
        let name_at = u32::try_from(self.name_bytes.len()).map_err(|_| Error::TooLarge("names"))?;
        let name_len = u8::try_from(name.len()).map_err(|_| Error::TooLarge("name"))?;
        self.dir_entries(dir)?.push(Entry {
            name_at,
            name_len,
            node,
        });
        self.name_bytes.extend_from_slice(name);
        Ok(())
    }

    fn dir_entries(&mut self, dir: NodeId) -> Result<&mut Vec<Entry>> {
        match self.nodes.get_mut(dir.index()) {
            None => Err(Error::NoSuchNode(dir)),
            Some(Node {
                body: Body::Directory { entries, .. },
                ..
            }) => Ok(entries),
            Some(_) => Err(Error::NotADirectory(dir)),
        }
    }
}

/// Names are what a Linux directory can hold, except "." and ".." which the writer adds itself.
pub(crate) fn check_name(name: &[u8]) -> Result<()> {
    let reason = if name.is_empty() {
        "empty"
    } else if name.len() > 255 {
        "longer than 255 bytes"
    } else if name.contains(&b'/') {
        "contains '/'"
    } else if name.contains(&0) {
        "contains a NUL byte"
    } else if name == b"." || name == b".." {
        "\".\" and \"..\" are implicit"
    } else {
        return Ok(());
    };
    Err(Error::InvalidName {
        name: lossy(name),
        reason,
    })
}

fn check_meta(meta: &Metadata) -> Result<()> {
    if meta.mode > 0o7777 {
        return Err(Error::InvalidMode(meta.mode.into()));
    }
    if meta.mtime.nsec >= 1_000_000_000 {
        return Err(Error::InvalidNsec(meta.mtime.nsec));
    }
    Ok(())
}

fn check_symlink(target: &[u8]) -> Result<()> {
    if target.is_empty() {
        Err(Error::InvalidSymlinkTarget("empty"))
    } else if target.contains(&0) {
        Err(Error::InvalidSymlinkTarget("contains a NUL byte"))
    } else if target.len() >= 4096 {
        // PATH_MAX counts the NUL: readlink can return at most 4095 bytes.
        Err(Error::InvalidSymlinkTarget("4096 bytes or longer"))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdev_round_trips() {
        let r = Rdev::new(259, 0x12345).unwrap();
        assert_eq!((r.major(), r.minor()), (259, 0x12345));
        assert_eq!(Rdev::new(1, 3).unwrap().encoded(), 0x103);
        assert!(Rdev::new(4096, 0).is_err());
        assert!(Rdev::new(0, 1 << 20).is_err());
    }

    #[test]
    fn refuses_bad_names_and_links() {
        let mut t = Tree::new(Metadata::default()).unwrap();
        let root = t.root();
        for bad in [&b""[..], b".", b"..", b"a/b", b"a\0", &[b'x'; 256]] {
            assert!(matches!(
                t.add(root, bad, Metadata::default(), Kind::Fifo),
                Err(Error::InvalidName { .. })
            ));
        }
        let d = t
            .add(root, b"d", Metadata::default(), Kind::Directory)
            .unwrap();
        assert!(matches!(
            t.link(root, b"e", d),
            Err(Error::LinkToDirectory(_))
        ));
        let f = t.add(root, b"f", Metadata::default(), Kind::Fifo).unwrap();
        assert!(matches!(
            t.add(f, b"x", Metadata::default(), Kind::Fifo),
            Err(Error::NotADirectory(_))
        ));
        t.link(d, b"g", f).unwrap();
        assert_eq!(t.nodes[f.index()].names, 2);
        let bad = Metadata {
            mode: 0o10000,
            ..Default::default()
        };
        assert!(matches!(
            t.add(root, b"m", bad, Kind::Fifo),
            Err(Error::InvalidMode(_))
        ));
        t.set_xattr(f, b"user.a", b"1").unwrap();
        t.set_xattr(d, b"user.a", b"1").unwrap();
        assert_eq!(t.xattr_pool.len(), 1);
    }
}
