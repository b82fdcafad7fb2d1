//! The file system's answers, in-process: [`SquashFs`] called as the FUSE adapter calls it,
//! without the kernel, root or /dev/fuse. Images are made by the real mksquashfs from the
//! testkit fixture tree, and every answer is compared with that source tree or with
//! `unsquashfs`, never with something squashd produced.
//!
//! The statements of `doc/SEMANTICS.md` point at these tests.

use fuser::{AccessFlags, FileHandle, FileType, FopenFlags, INodeNo, OpenFlags};
use squashd_core::{Image, OpenOptions};
use squashd_fuse::fs::{
    DirectoryEntry, DirectoryEntryPlus, DirectoryPlusReplier, DirectoryReplier, Entry, XattrReply,
};
use squashd_fuse::{FsError, ListingAttrs, MountConfig, SquashFs};
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;
use testkit::{Built, TreeOptions};

/// The size of a readdir buffer the kernel sends: one page.
const PAGE: usize = 4096;

/// A year: the file system's timeouts must be at least this ("forever").
const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

const ROOT: INodeNo = INodeNo(1);
const NO_HANDLE: FileHandle = FileHandle(0);

struct Fixture {
    built: Built,
    image_path: PathBuf,
}

impl Fixture {
    /// The fixture tree (with a `big/` directory of `many` entries) and its image.
    fn new(many: usize) -> Option<Fixture> {
        if !testkit::have_squashfs_tools() {
            return None;
        }
        let built = Built::new(&TreeOptions {
            many_entries: many,
            ..TreeOptions::default()
        });
        let image_path = built.image("gzip", &["-comp", "gzip"]);
        Some(Fixture { built, image_path })
    }

    fn image(&self) -> Image {
        Image::open(&self.image_path, &OpenOptions::default()).unwrap()
    }

    fn fs(&self) -> SquashFs {
        self.fs_with(&MountConfig::default())
    }

    fn fs_with(&self, config: &MountConfig) -> SquashFs {
        SquashFs::new(self.image(), config).unwrap()
    }

    fn src(&self, path: &str) -> PathBuf {
        self.built.src.join(path)
    }
}

fn errno<T: std::fmt::Debug>(r: Result<T, FsError>) -> i32 {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.code(),
    }
}

/// The entry of `path` (names separated by '/'), looked up from the root one name at a time,
/// as the kernel does.
fn lookup_path(fs: &SquashFs, path: &str) -> Entry {
    let mut node = ROOT;
    let mut entry = None;
    for name in path.split('/') {
        let e = fs.lookup(node, OsStr::new(name)).unwrap();
        assert!(!e.is_negative(), "{path}: {name} not found");
        node = e.attr.ino;
        entry = Some(e);
    }
    entry.expect("a non-empty path")
}

fn node_of(fs: &SquashFs, path: &str) -> INodeNo {
    lookup_path(fs, path).attr.ino
}

/// What a directory holds on disk: names in bytewise order (a SquashFS listing's order) and
/// their file types.
fn source_listing(dir: &Path) -> Vec<(Vec<u8>, FileType)> {
    let mut out: Vec<(Vec<u8>, FileType)> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            let kind = if t.is_dir() {
                FileType::Directory
            } else if t.is_symlink() {
                FileType::Symlink
            } else if t.is_fifo() {
                FileType::NamedPipe
            } else if t.is_socket() {
                FileType::Socket
            } else if t.is_char_device() {
                FileType::CharDevice
            } else if t.is_block_device() {
                FileType::BlockDevice
            } else {
                FileType::RegularFile
            };
            (e.file_name().as_bytes().to_vec(), kind)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// One entry of a readdir reply, as the kernel receives it.
#[derive(Debug, Clone)]
struct Listed {
    node: INodeNo,
    /// Where the next entry is.
    offset: u64,
    kind: FileType,
    name: Vec<u8>,
}

/// A readdir reply buffer of `size` bytes, filled as fuser fills it: each entry takes a
/// 24-byte `fuse_dirent` and its name, padded to 8 bytes.
struct DirBuffer {
    size: usize,
    used: usize,
    entries: Vec<Listed>,
}

impl DirBuffer {
    fn new(size: usize) -> Self {
        DirBuffer {
            size,
            used: 0,
            entries: Vec::new(),
        }
    }
}

impl DirectoryReplier for DirBuffer {
    fn add(&mut self, e: DirectoryEntry<'_>) -> bool {
        let len = (24 + e.name.len()).next_multiple_of(8);
        if self.used + len > self.size {
            return true;
        }
        self.used += len;
        self.entries.push(Listed {
            node: e.node,
            offset: e.offset,
            kind: e.kind,
            name: e.name.as_bytes().to_vec(),
        });
        false
    }
}

/// A readdirplus reply buffer: each entry takes a 152-byte `fuse_direntplus` and its name,
/// padded to 8 bytes.
struct DirPlusBuffer {
    size: usize,
    used: usize,
    entries: Vec<(u64, Vec<u8>, fuser::FileAttr, Duration)>,
    /// Whether each entry is linked (given with its attributes).
    linked: Vec<bool>,
}

impl DirectoryPlusReplier for DirPlusBuffer {
    fn add(&mut self, e: DirectoryEntryPlus<'_>) -> bool {
        let len = (152 + e.name.len()).next_multiple_of(8);
        if self.used + len > self.size {
            return true;
        }
        self.used += len;
        self.entries
            .push((e.offset, e.name.as_bytes().to_vec(), *e.attr, e.ttl));
        self.linked.push(e.link);
        false
    }
}

/// Reads a whole listing as the kernel does: one buffer at a time, each call resuming at the
/// offset of the last entry of the previous one, until a call adds nothing. Returns the
/// entries and the number of calls that added some.
fn list_all(fs: &SquashFs, node: INodeNo, fh: FileHandle) -> (Vec<Listed>, usize) {
    let mut all = Vec::new();
    let mut offset = 0;
    let mut calls = 0;
    loop {
        let mut buf = DirBuffer::new(PAGE);
        drop(fs.readdir(node, fh, offset, &mut buf).unwrap());
        let Some(last) = buf.entries.last() else {
            return (all, calls);
        };
        calls += 1;
        offset = last.offset;
        all.extend(buf.entries);
    }
}

/// Checks a listing against the source directory: ".", "..", then every entry once, in order,
/// with its type; each entry's offset is the position of the next.
fn assert_listing_is_source(
    listing: &[Listed],
    source: &[(Vec<u8>, FileType)],
    own: INodeNo,
    parent: INodeNo,
    context: &str,
) {
    assert_eq!(listing.len(), source.len() + 2, "{context}: entry count");
    assert_eq!(
        (listing[0].node, &listing[0].name[..]),
        (own, &b"."[..]),
        "{context}"
    );
    assert_eq!(
        (listing[1].node, &listing[1].name[..]),
        (parent, &b".."[..]),
        "{context}"
    );
    for (i, entry) in listing.iter().enumerate() {
        assert_eq!(entry.offset, i as u64 + 1, "{context}: offset of entry {i}");
    }
    let names: Vec<(Vec<u8>, FileType)> = listing[2..]
        .iter()
        .map(|e| (e.name.clone(), e.kind))
        .collect();
    assert_eq!(names, source, "{context}: names and types");
}

#[test]
fn readdir_resumed_across_reply_buffers_gives_every_entry_once() {
    let Some(fx) = Fixture::new(3000) else { return };
    let fs = fx.fs();
    let big = node_of(&fs, "big");
    let source = source_listing(&fx.src("big"));
    assert!(source.len() >= 3000);

    // With an opendir handle.
    let opened = fs.opendir(big, OpenFlags(libc::O_RDONLY)).unwrap();
    let (listing, calls) = list_all(&fs, big, opened.fh);
    assert!(calls > 10, "{calls} buffers: the listing must span many");
    assert_listing_is_source(&listing, &source, big, ROOT, "with a handle");

    // Resumed at any offset returned, a listing continues with the entry that followed it.
    for k in (0..listing.len()).step_by(97) {
        let mut buf = DirBuffer::new(PAGE);
        drop(
            fs.readdir(big, opened.fh, listing[k].offset, &mut buf)
                .unwrap(),
        );
        let want = listing.get(k + 1).map(|e| &e.name);
        assert_eq!(
            buf.entries.first().map(|e| &e.name),
            want,
            "resumed at entry {k}"
        );
    }
    fs.releasedir(opened.fh).unwrap();

    // Without a handle (kernels that send no opendir).
    let (listing, _) = list_all(&fs, big, NO_HANDLE);
    assert_listing_is_source(&listing, &source, big, ROOT, "without a handle");

    // An empty directory holds "." and ".." only.
    let empty = node_of(&fs, "empty");
    let (listing, _) = list_all(&fs, empty, NO_HANDLE);
    assert_listing_is_source(&listing, &[], empty, ROOT, "empty/");
}

/// Every entry of `node`'s listing by readdirplus, page by page, and whether each was linked.
type PlusListing = Vec<((u64, Vec<u8>, fuser::FileAttr, Duration), bool)>;

fn list_all_plus(fs: &SquashFs, node: INodeNo) -> PlusListing {
    let mut all = Vec::new();
    let mut offset = 0;
    loop {
        let mut buf = DirPlusBuffer {
            size: PAGE,
            used: 0,
            entries: Vec::new(),
            linked: Vec::new(),
        };
        drop(fs.readdirplus(node, NO_HANDLE, offset, &mut buf).unwrap());
        let Some(last) = buf.entries.last() else {
            break;
        };
        offset = last.0;
        all.extend(buf.entries.into_iter().zip(buf.linked));
    }
    all
}

#[test]
fn readdirplus_gives_each_entry_with_the_source_attributes() {
    let Some(fx) = Fixture::new(500) else { return };
    let fs = fx.fs_with(&MountConfig {
        listing_attrs: ListingAttrs::All,
        ..MountConfig::default()
    });
    let big = node_of(&fs, "big");
    let source = source_listing(&fx.src("big"));
    let all = list_all_plus(&fs, big);
    assert_eq!(all.len(), source.len() + 2);
    assert_eq!(all[0].0 .2.ino, big);
    assert_eq!(all[1].0 .2.ino, ROOT);
    for (((offset, name, attr, ttl), linked), (i, (want_name, want_kind))) in
        all[2..].iter().zip(source.iter().enumerate())
    {
        assert_eq!(name, want_name);
        assert_eq!(*offset, i as u64 + 3, "offset of {}", name.escape_ascii());
        assert!(*ttl >= YEAR);
        assert!(linked, "{} is linked", name.escape_ascii());
        let meta = fs::symlink_metadata(fx.src("big").join(OsStr::from_bytes(name))).unwrap();
        assert_eq!(attr.kind, *want_kind);
        assert_eq!(attr.perm as u32, meta.mode() & 0o7777);
        assert_eq!(attr.nlink, meta.nlink() as u32);
        if !meta.is_dir() {
            assert_eq!(attr.size, meta.size(), "size of {}", name.escape_ascii());
        }
        // The node given with the listing is the one a lookup gives.
        let looked_up = fs.lookup(big, OsStr::from_bytes(name)).unwrap();
        assert_eq!(looked_up.attr.ino, attr.ino);
    }
    assert_eq!(fs.probe().bare_entries(), 0);
}

/// By default a listing links its directories only, until lookups show that walks stat the
/// other entries; from then on listings link every entry.
#[test]
fn readdirplus_links_files_once_walks_stat_them() {
    let Some(fx) = Fixture::new(500) else { return };
    let fs = fx.fs();
    let big = node_of(&fs, "big");
    let source = source_listing(&fx.src("big"));
    let all = list_all_plus(&fs, big);
    assert_eq!(all.len(), source.len() + 2);
    let mut files = 0;
    for (((_, name, attr, _), linked), (want_name, want_kind)) in all[2..].iter().zip(&source) {
        assert_eq!(name, want_name);
        // Bare or not, the name's kind and node are those a lookup gives.
        assert_eq!(attr.kind, *want_kind, "kind of {}", name.escape_ascii());
        let is_dir = *want_kind == FileType::Directory;
        assert_eq!(*linked, is_dir, "{} linked", name.escape_ascii());
        if is_dir {
            let meta = fs::metadata(fx.src("big").join(OsStr::from_bytes(name))).unwrap();
            assert_eq!(attr.nlink, meta.nlink() as u32);
        } else {
            files += 1;
        }
    }
    assert!(files > 400, "the fixture's big/ holds files");
    let probe = fs.probe();
    assert_eq!(probe.bare_entries(), files);
    assert_eq!(probe.late_lookups(), 0);

    // A `du`: each file looked up after the listing. Once 64 were, listings link every
    // entry, and lookups are no longer late.
    for ((_, name, attr, _), _) in all[2..].iter().filter(|e| !e.1) {
        let looked_up = fs.lookup(big, OsStr::from_bytes(name)).unwrap();
        assert_eq!(looked_up.attr.ino, attr.ino);
        let meta = fs::symlink_metadata(fx.src("big").join(OsStr::from_bytes(name))).unwrap();
        assert_eq!(looked_up.attr.size, meta.size());
    }
    assert_eq!(probe.late_lookups(), 64);
    let again = list_all_plus(&fs, big);
    assert!(again[2..].iter().all(|e| e.1), "every entry linked");
    assert_eq!(probe.bare_entries(), files);
}

/// Metadata blocks the image has fetched from its cache (hits and misses alike).
fn metadata_accesses(image: &Image) -> u64 {
    let m = image.stats().metadata;
    m.hits + m.misses
}

#[test]
fn without_opendir_a_listing_is_kept_between_buffers_and_forgotten_at_its_end() {
    let Some(fx) = Fixture::new(3000) else { return };
    let image = fx.image();
    let fs = SquashFs::new(image.clone(), &MountConfig::default()).unwrap();
    fs.set_no_opendir(true);
    let big = node_of(&fs, "big");
    // The kernel agreed to send no opendir: one that comes anyway gets ENOSYS.
    assert_eq!(
        errno(fs.opendir(big, OpenFlags(libc::O_RDONLY))),
        libc::ENOSYS
    );

    // The first buffer reads the whole directory (many metadata blocks) ...
    let before = metadata_accesses(&image);
    let mut buf = DirBuffer::new(PAGE);
    drop(fs.readdir(big, NO_HANDLE, 0, &mut buf).unwrap());
    let first = metadata_accesses(&image) - before;
    let mut offset = buf.entries.last().unwrap().offset;
    let mut listing = buf.entries;
    // ... and the following ones read it no more: only the directory's inode, to check it.
    loop {
        let before = metadata_accesses(&image);
        let mut buf = DirBuffer::new(PAGE);
        drop(fs.readdir(big, NO_HANDLE, offset, &mut buf).unwrap());
        let cost = metadata_accesses(&image) - before;
        assert!(
            cost * 4 < first,
            "a continuation at {offset} cost {cost} metadata blocks, the first buffer {first}"
        );
        let Some(last) = buf.entries.last() else {
            break;
        };
        offset = last.offset;
        listing.extend(buf.entries);
    }
    let source = source_listing(&fx.src("big"));
    assert_listing_is_source(&listing, &source, big, ROOT, "kept listing");

    // The call past the end forgot it: resuming in the middle reads the directory again.
    let before = metadata_accesses(&image);
    let mut buf = DirBuffer::new(PAGE);
    drop(fs.readdir(big, NO_HANDLE, 1000, &mut buf).unwrap());
    assert!(metadata_accesses(&image) - before >= first / 2);
    assert_eq!(
        buf.entries[0].name, source[998].0,
        "resumed at 1000 after it was forgotten"
    );
}

#[test]
fn unknown_nodes_are_stale_and_unknown_handles_bad() {
    let Some(fx) = Fixture::new(10) else { return };
    let fs = fx.fs();
    // The kernel names only nodes it was given: any other is stale (NFS-exported mounts and
    // a daemon restarted under a live mount send such numbers).
    assert_eq!(errno(fs.getattr(INodeNo(999_999))), libc::ESTALE);
    assert_eq!(errno(fs.getattr(INodeNo(u64::MAX))), libc::ESTALE);
    assert_eq!(
        errno(fs.lookup(INodeNo(999_999), OsStr::new("a"))),
        libc::ESTALE
    );
    let mut buf = DirBuffer::new(PAGE);
    assert_eq!(
        errno(fs.readdir(INodeNo(999_999), NO_HANDLE, 0, &mut buf)),
        libc::ESTALE
    );
    // A node that exists in the image but was never handed out is stale too; looked up, it
    // is not.
    let file = lookup_path(&fx.fs(), "one/only").attr.ino;
    assert_eq!(errno(fs.getattr(file)), libc::ESTALE);
    assert_eq!(node_of(&fs, "one/only"), file);
    assert_eq!(
        fs.getattr(file).unwrap().attr.size,
        fs::metadata(fx.src("one/only")).unwrap().len()
    );

    // Handles the file system never gave out.
    assert_eq!(errno(fs.read(file, FileHandle(12345), 0, 10)), libc::EBADF);
    let one = node_of(&fs, "one");
    assert_eq!(
        errno(fs.readdir(one, FileHandle(12345), 0, &mut buf)),
        libc::EBADF
    );
    // A released handle is gone.
    let opened = fs.open(file, OpenFlags(libc::O_RDONLY)).unwrap();
    assert_eq!(
        fs.read(file, opened.fh, 0, 100).unwrap().bytes(),
        fs::read(fx.src("one/only")).unwrap()
    );
    fs.release(opened.fh).unwrap();
    assert_eq!(errno(fs.read(file, opened.fh, 0, 100)), libc::EBADF);
    assert_eq!(fs.open_handles(), 0);
}

#[test]
fn lookups_and_opens_answer_the_errnos_posix_expects() {
    let Some(fx) = Fixture::new(10) else { return };
    let fs = fx.fs();
    // A missing name is a negative entry (ENOENT to the caller), cached like any other.
    for name in ["no-such-name", "A"] {
        assert!(fx.src(name).symlink_metadata().is_err());
        let e = fs.lookup(ROOT, OsStr::new(name)).unwrap();
        assert!(e.is_negative(), "{name}");
        assert!(e.ttl >= YEAR);
    }
    let e = fs.lookup(ROOT, OsStr::new("a")).unwrap();
    assert!(!e.is_negative());
    assert!(e.ttl >= YEAR);
    let meta = fs::metadata(fx.src("a")).unwrap();
    assert_eq!(e.attr.size, meta.len());
    // The image keeps one time per inode, the modification time: all three show it.
    assert_eq!(e.attr.mtime, meta.modified().unwrap());
    assert_eq!((e.attr.atime, e.attr.ctime), (e.attr.mtime, e.attr.mtime));

    let file = node_of(&fs, "one/only");
    let dir = node_of(&fs, "one");
    let link = node_of(&fs, "symlinks/short");
    // A name under a file: ENOTDIR.
    assert_eq!(errno(fs.lookup(file, OsStr::new("x"))), libc::ENOTDIR);
    // Listing a file: ENOTDIR; opening a directory as a file: EISDIR.
    assert_eq!(
        errno(fs.opendir(file, OpenFlags(libc::O_RDONLY))),
        libc::ENOTDIR
    );
    let mut buf = DirBuffer::new(PAGE);
    assert_eq!(
        errno(fs.readdir(file, NO_HANDLE, 0, &mut buf)),
        libc::ENOTDIR
    );
    assert_eq!(errno(fs.open(dir, OpenFlags(libc::O_RDONLY))), libc::EISDIR);
    // Writing: EROFS.
    for flags in [libc::O_WRONLY, libc::O_RDWR] {
        assert_eq!(errno(fs.open(file, OpenFlags(flags))), libc::EROFS);
    }
    assert_eq!(errno(fs.access(file, AccessFlags::W_OK)), libc::EROFS);
    fs.access(file, AccessFlags::R_OK).unwrap();
    // readlink of something that is not a symlink: EINVAL, as readlink(2).
    assert_eq!(errno(fs.readlink(file)), libc::EINVAL);
    assert_eq!(fs.readlink(link).unwrap(), b"a");
}

#[test]
fn opens_tell_the_kernel_to_keep_its_caches() {
    let Some(fx) = Fixture::new(10) else { return };
    let fs = fx.fs();
    let file = node_of(&fs, "one/only");
    let opened = fs.open(file, OpenFlags(libc::O_RDONLY)).unwrap();
    assert_eq!(opened.flags, FopenFlags::FOPEN_KEEP_CACHE);
    let opened_dir = fs.opendir(ROOT, OpenFlags(libc::O_RDONLY)).unwrap();
    assert_eq!(
        opened_dir.flags,
        FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE
    );
    assert_eq!(fs.open_handles(), 2);
    assert_eq!(fs.probe().open_handles(), 2);
    fs.release(opened.fh).unwrap();
    fs.releasedir(opened_dir.fh).unwrap();
    assert_eq!(fs.probe().open_handles(), 0);
    assert!(fs.getattr(ROOT).unwrap().ttl >= YEAR);
}

fn read_all_ways(fs: &SquashFs, path: &str, source: &[u8], block: u64) {
    let node = node_of(fs, path);
    let fh = fs.open(node, OpenFlags(libc::O_RDONLY)).unwrap().fh;
    let size = source.len() as u64;
    let read = |offset: u64, len: u32| -> Vec<u8> {
        let data = fs.read(node, fh, offset, len).unwrap();
        let bytes = data.bytes().to_vec();
        data.replied();
        bytes
    };
    let want = |offset: u64, len: u64| -> &[u8] {
        let start = offset.min(size) as usize;
        let end = (offset + len).min(size) as usize;
        &source[start..end]
    };
    let mut cases = vec![
        (0, 4096),
        (0, 0),
        (size, 4096),
        (size + 1000, 4096),
        (size.saturating_sub(10), 4096),
        (size.saturating_sub(1), 1),
    ];
    // Within one block, and across a block's end (two blocks, and many).
    cases.extend([
        (block + 100, 500),
        (block - 100, 200),
        (100, 3 * block as u32),
    ]);
    for (offset, len) in cases {
        assert_eq!(
            read(offset, len),
            want(offset, len as u64),
            "{path}: {len} bytes at {offset}"
        );
    }
    fs.release(fh).unwrap();
}

#[test]
fn reads_give_the_source_bytes_short_at_the_end_and_none_past_it() {
    let Some(fx) = Fixture::new(10) else { return };
    let fs = fx.fs();
    let block = 131072;
    for path in [
        "files/rand-131073",
        "files/text-2500000",
        "files/rand-4095",
        "files/text-0",
        "sparse/middle",
        "sparse/all-hole",
        "dup/two",
    ] {
        let source = fs::read(fx.src(path)).unwrap();
        read_all_ways(&fs, path, &source, block);
    }
}

#[test]
fn readlink_gives_each_target_of_the_source() {
    let Some(fx) = Fixture::new(10) else { return };
    let fs = fx.fs();
    let mut seen = 0;
    for entry in fs::read_dir(fx.src("symlinks")).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        let want = fs::read_link(entry.path()).unwrap();
        let node = node_of(&fs, &format!("symlinks/{}", name.to_str().unwrap()));
        let e = fs.getattr(node).unwrap();
        assert_eq!(e.attr.kind, FileType::Symlink);
        assert_eq!(e.attr.size, want.as_os_str().len() as u64);
        assert_eq!(fs.readlink(node).unwrap(), want.as_os_str().as_bytes());
        seen += 1;
    }
    assert!(seen >= 6);
}

/// The names of `xattrs` as listxattr gives them: each followed by a NUL.
fn name_list(xattrs: &[(Vec<u8>, Vec<u8>)]) -> usize {
    xattrs.iter().map(|(n, _)| n.len() + 1).sum()
}

#[test]
fn xattr_size_probe_erange_and_values_match_the_source() {
    let Some(fx) = Fixture::new(10) else { return };
    let fs = fx.fs();
    let mut checked_values = 0;
    for path in [
        "xattr",
        "xattr/basic",
        "xattr/large",
        "xattr/many",
        "xattr/shared-2",
        "a",
    ] {
        let node = node_of(&fs, path.trim_start_matches('/'));
        let source = testkit::read_xattrs(&fx.src(path));
        let need = name_list(&source);
        // Size 0 asks the size a buffer needs.
        assert_eq!(
            fs.listxattr(node, 0).unwrap(),
            XattrReply::Size(need as u32),
            "{path}"
        );
        if need > 1 {
            // One byte short: ERANGE.
            assert_eq!(errno(fs.listxattr(node, need as u32 - 1)), libc::ERANGE);
        }
        let XattrReply::Data(list) = fs.listxattr(node, need as u32 + 100).unwrap() else {
            panic!("{path}: listxattr gave no data");
        };
        let mut names: Vec<&[u8]> = list.split(|b| *b == 0).filter(|n| !n.is_empty()).collect();
        names.sort();
        let want: Vec<&[u8]> = source.iter().map(|(n, _)| &n[..]).collect();
        assert_eq!(names, want, "{path}: names");
        assert_eq!(list.len(), need);

        for (name, value) in &source {
            let name = OsStr::from_bytes(name);
            let len = value.len() as u32;
            assert_eq!(fs.getxattr(node, name, 0).unwrap(), XattrReply::Size(len));
            // One byte short: ERANGE (for a value of 1 byte, that is size 0, the probe).
            if len > 1 {
                assert_eq!(errno(fs.getxattr(node, name, len - 1)), libc::ERANGE);
            }
            assert_eq!(
                fs.getxattr(node, name, len.max(1)).unwrap(),
                XattrReply::Data(value.clone()),
                "{path}: {name:?}"
            );
            checked_values += 1;
        }
        // A name the file does not have: ENODATA.
        assert_eq!(
            errno(fs.getxattr(node, OsStr::new("user.no-such"), 100)),
            libc::ENODATA
        );
    }
    assert!(checked_values >= 45, "{checked_values} values checked");
}

#[test]
fn hard_links_share_a_node_and_st_blocks_counts_the_data() {
    let Some(fx) = Fixture::new(10) else { return };
    let fs = fx.fs();
    for group in [
        &["links/pair-a", "links/sub/pair-b"][..],
        &["links/trio-a", "links/sub/trio-b", "links2/trio-c"][..],
    ] {
        let attrs: Vec<_> = group.iter().map(|p| lookup_path(&fs, p).attr).collect();
        let meta = fs::metadata(fx.src(group[0])).unwrap();
        for (path, attr) in group.iter().zip(&attrs) {
            assert_eq!(attr.ino, attrs[0].ino, "{path}: one node for every name");
            assert_eq!(attr.nlink, meta.nlink() as u32, "{path}: link count");
        }
        assert_eq!(meta.nlink() as usize, group.len());
    }
    // st_blocks, as the kernel's squashfs: the size less the holes, in 512-byte units.
    for path in ["files/rand-131073", "files/text-1", "links/trio-a"] {
        let size = fs::metadata(fx.src(path)).unwrap().len();
        assert_eq!(
            lookup_path(&fs, path).attr.blocks,
            size.div_ceil(512),
            "{path}"
        );
    }
    let hole = lookup_path(&fs, "sparse/all-hole").attr;
    assert_eq!(
        hole.size,
        fs::metadata(fx.src("sparse/all-hole")).unwrap().len()
    );
    // Holes are not counted: a file of holes only shows (almost) nothing, as mksquashfs
    // records at most its size less one byte as holes.
    assert!(
        hole.blocks <= 1,
        "{} blocks for a file of holes",
        hole.blocks
    );
    // Every file system's root is node 1 (st_ino 1).
    assert_eq!(fs.getattr(ROOT).unwrap().attr.ino, ROOT);
}

/// A number from `unsquashfs -s`'s report: the first word after `prefix`.
fn stat_number(report: &str, prefix: &str) -> u64 {
    let line = report
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} in\n{report}"));
    line[prefix.len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn statfs_gives_the_image_size_in_blocks_and_nothing_free() {
    let Some(fx) = Fixture::new(10) else { return };
    let fs = fx.fs();
    let report = testkit::unsquashfs_stat(&fx.image_path);
    let bytes = stat_number(&report, "Filesystem size ");
    let block = stat_number(&report, "Block size ");
    let inodes = stat_number(&report, "Number of inodes ");
    let s = fs.statfs().unwrap();
    assert_eq!(s.blocks, bytes.div_ceil(block));
    assert_eq!((s.bsize as u64, s.frsize as u64), (block, block));
    assert_eq!(s.files, inodes);
    assert_eq!((s.bfree, s.bavail, s.ffree), (0, 0, 0));
    assert_eq!(s.namelen, 256);
    // st_blksize is the image's block size too.
    assert_eq!(fs.getattr(ROOT).unwrap().attr.blksize as u64, block);
}

#[test]
fn owner_overrides_and_subdir_roots() {
    let Some(fx) = Fixture::new(10) else { return };
    let config = MountConfig {
        uid: Some(4321),
        gid: Some(8765),
        subdir: Some("links".into()),
        ..MountConfig::default()
    };
    let fs = fx.fs_with(&config);
    let root = fs.getattr(ROOT).unwrap().attr;
    assert_eq!((root.uid, root.gid), (4321, 8765));
    // The root is the image's links/.
    let (listing, _) = list_all(&fs, ROOT, NO_HANDLE);
    let source = source_listing(&fx.src("links"));
    assert_listing_is_source(&listing, &source, ROOT, ROOT, "subdir links/");
    let pair = lookup_path(&fs, "sub/pair-b").attr;
    assert_eq!((pair.uid, pair.gid), (4321, 8765));
    assert_eq!(
        pair.size,
        fs::metadata(fx.src("links/sub/pair-b")).unwrap().len()
    );
    // A subdir that is a file, or missing, is refused before anything is served.
    for bad in ["links/pair-a", "no-such-dir"] {
        let config = MountConfig {
            subdir: Some(bad.into()),
            ..MountConfig::default()
        };
        assert!(SquashFs::new(fx.image(), &config).is_err(), "{bad}");
    }
    // Without overrides, owners are the source's.
    let fs = fx.fs();
    let meta = fs::metadata(fx.src("a")).unwrap();
    let a = lookup_path(&fs, "a").attr;
    assert_eq!((a.uid, a.gid), (meta.uid(), meta.gid()));
}

#[test]
fn a_damaged_block_answers_eio_and_is_counted() {
    let Some(fx) = Fixture::new(10) else { return };
    // The image with the first bytes of one file's first data block overwritten: it opens
    // and lists, but that block does not decompress.
    let path = "files/text-2500000";
    let image = fx.image();
    let inode = image.resolve_path(path.as_bytes()).unwrap();
    let position = image.data_position(&inode).unwrap() as usize;
    let mut bytes = fs::read(&fx.image_path).unwrap();
    bytes[position..position + 64].fill(0x55);
    let damaged = fx.built.scratch("damaged.sqfs");
    fs::write(&damaged, &bytes).unwrap();
    let fs = SquashFs::new(
        Image::open(&damaged, &OpenOptions::default()).unwrap(),
        &MountConfig::default(),
    )
    .unwrap();
    let node = node_of(&fs, path);
    let fh = fs.open(node, OpenFlags(libc::O_RDONLY)).unwrap().fh;
    assert_eq!(fs.probe().failed_requests(), 0);
    let error = fs.read(node, fh, 0, 4096).unwrap_err();
    assert_eq!(error.code(), libc::EIO);
    // The library error is kept as the source, naming the image.
    let source = std::error::Error::source(&error)
        .expect("a source")
        .to_string();
    assert!(source.contains("damaged.sqfs"), "{source}");
    assert_eq!(fs.probe().failed_requests(), 1);
    // Another file of the image still reads.
    let other = node_of(&fs, "one/only");
    let fh = fs.open(other, OpenFlags(libc::O_RDONLY)).unwrap().fh;
    let data = fs.read(other, fh, 0, 4096).unwrap();
    assert_eq!(data.bytes(), fs::read(fx.src("one/only")).unwrap());
}
