//! Walking an image through the library into `testkit::Record`s, checking on the way what only
//! the library can show (entry/inode agreement, listing order, lookups, hard-link ids).

#![allow(dead_code)]

use squashd_core::{FileKind, Image, Inode, InodeId};
use std::collections::HashMap;
use testkit::{ContentHash, ContentHasher, Kind, Record};

pub fn kind_of(k: FileKind) -> Kind {
    match k {
        FileKind::Directory => Kind::Dir,
        FileKind::File => Kind::File,
        FileKind::Symlink => Kind::Symlink,
        FileKind::BlockDevice => Kind::BlockDev,
        FileKind::CharDevice => Kind::CharDev,
        FileKind::Fifo => Kind::Fifo,
        FileKind::Socket => Kind::Socket,
    }
}

/// Hashes a file's contents chunk by chunk (the zero-copy path readers use).
pub fn hash_inode(image: &Image, inode: &Inode) -> ContentHash {
    let reader = image.open_file(inode).unwrap();
    assert_eq!(reader.size(), inode.size);
    let mut h = ContentHasher::new();
    let zeros = vec![0u8; reader.block_size() as usize];
    for i in 0..reader.chunk_count() {
        let chunk = reader.chunk(i).unwrap();
        if chunk.is_hole() {
            h.update(&zeros[..chunk.len()]);
        } else {
            assert_eq!(chunk.bytes().len(), chunk.len());
            h.update(chunk.bytes());
        }
    }
    h.finish()
}

/// One walked entry: its record and the library's view of it.
pub struct Walked {
    pub records: Vec<Record>,
    /// The inode of each record, in the same order.
    pub inodes: Vec<Inode>,
}

/// Records every entry of `image`, depth first in listing order. Checks along the way that each
/// directory entry agrees with its inode, that listings are strictly sorted bytewise, and that
/// entries sharing an inode number share one `InodeId`. With `check_lookups`, also that
/// `lookup` and `resolve_path` find every entry.
pub fn walk_image(image: &Image, check_lookups: bool) -> Walked {
    let root = image.root().unwrap();
    assert_eq!(root.id, image.root_id());
    let mut w = Walked {
        records: Vec::new(),
        inodes: Vec::new(),
    };
    visit(image, root, Vec::new(), &mut w, check_lookups);
    let mut ids: HashMap<u32, InodeId> = HashMap::new();
    for inode in &w.inodes {
        let id = *ids.entry(inode.number).or_insert(inode.id);
        assert_eq!(
            id,
            inode.id,
            "inode number {} has two ids in {}",
            inode.number,
            image.name()
        );
    }
    // A non-directory's link count is the number of names it has.
    let mut names: HashMap<u32, u32> = HashMap::new();
    for inode in w.inodes.iter().filter(|i| !i.is_dir()) {
        *names.entry(inode.number).or_default() += 1;
    }
    for inode in w.inodes.iter().filter(|i| !i.is_dir()) {
        assert_eq!(
            inode.nlink,
            names[&inode.number],
            "link count of inode {} in {}",
            inode.number,
            image.name()
        );
    }
    let keys: Vec<u64> = w.inodes.iter().map(|i| i.number as u64).collect();
    testkit::set_link_leaders(&mut w.records, &keys);
    w
}

fn visit(image: &Image, inode: Inode, path: Vec<u8>, w: &mut Walked, check_lookups: bool) {
    let kind = kind_of(inode.kind);
    let mut xattrs: Vec<(Vec<u8>, Vec<u8>)> = image
        .xattrs(&inode)
        .unwrap()
        .into_iter()
        .map(|x| (x.name, x.value))
        .collect();
    xattrs.sort();
    assert_eq!(inode.mode() & 0o7777, inode.permissions as u32);
    w.records.push(Record {
        path: path.clone(),
        kind,
        permissions: inode.permissions as u32,
        uid: inode.uid,
        gid: inode.gid,
        size: if kind == Kind::Dir { 0 } else { inode.size },
        mtime: inode.mtime as i64,
        nlink: inode.nlink as u64,
        rdev: matches!(kind, Kind::BlockDev | Kind::CharDev).then(|| inode.device()),
        target: (kind == Kind::Symlink).then(|| image.read_link(&inode).unwrap()),
        content: (kind == Kind::File).then(|| hash_inode(image, &inode)),
        xattrs,
        link_leader: None,
    });
    if kind == Kind::Symlink {
        assert_eq!(inode.symlink_target().unwrap().len() as u64, inode.size);
    } else {
        assert!(image.read_link(&inode).is_err());
    }
    let is_dir = inode.is_dir();
    let dir = inode.clone();
    w.inodes.push(inode);
    if !is_dir {
        assert!(image.read_dir(&dir).is_err(), "read_dir of a non-directory");
        return;
    }
    let entries = image.read_dir(&dir).unwrap();
    for pair in entries.windows(2) {
        assert!(
            pair[0].name < pair[1].name,
            "listing of {:?} not strictly sorted",
            path.escape_ascii().to_string()
        );
    }
    for e in entries {
        let child = image.inode(e.id).unwrap();
        assert_eq!(
            (child.id, child.number, child.kind),
            (e.id, e.number, e.kind)
        );
        let mut child_path = path.clone();
        if !child_path.is_empty() {
            child_path.push(b'/');
        }
        child_path.extend_from_slice(&e.name);
        if check_lookups {
            assert_eq!(image.lookup(&dir, &e.name).unwrap().as_ref(), Some(&e));
            assert_eq!(image.resolve_path(&child_path).unwrap(), child);
        }
        visit(image, child, child_path, w, check_lookups);
    }
}
