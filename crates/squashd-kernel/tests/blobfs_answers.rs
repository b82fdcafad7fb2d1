//! The blob file system's answers, in-process: [`BlobFs`] called as the session calls it,
//! without the kernel, root or /dev/fuse. The image is made by the real mksquashfs from the
//! testkit fixture tree; the blob's bytes are checked against the source files at the offsets
//! the translation placed them, and the metadata file's against the translation's bytes.

use fuser::{FileHandle, FileType, FopenFlags, INodeNo, OpenFlags};
use squashd_core::{Image, OpenOptions};
use squashd_fuse::fs::{DirectoryEntry, DirectoryReplier};
use squashd_fuse::server::{abi, DirentBuffer, FuseFilesystem, ReadData, RequestContext};
use squashd_fuse::FsError;
use squashd_kernel::{
    translate, Blob, BlobFiles, BlobFs, BlobFsContent, KernelMountOptions, MetaFile, ReadAhead,
    BLOB_BLOCK,
};
use std::ffi::OsStr;
use std::sync::Arc;
use testkit::{Built, TreeOptions};
use zerocopy::FromBytes;

const ROOT: INodeNo = INodeNo(1);
const CTX: RequestContext = RequestContext {
    uid: 0,
    gid: 0,
    pid: 1,
};

struct Fixture {
    built: Built,
    image: Image,
    metadata: Vec<u8>,
    blob: Arc<Blob>,
    files: BlobFiles,
    fs: BlobFs,
}

fn fixture() -> Option<Fixture> {
    if !testkit::have_squashfs_tools() {
        testkit::skip("blobfs_answers: no mksquashfs");
        return None;
    }
    let built = Built::new(&TreeOptions::default());
    let path = built.image("gzip", &["-comp", "gzip"]);
    let image = Image::open(&path, &OpenOptions::default()).unwrap();
    let translation = translate(&image, &KernelMountOptions::default()).unwrap();
    let metadata = translation.metadata.clone();
    let read_ahead = ReadAhead {
        threads: 0,
        bytes: 0,
    };
    let blob = Arc::new(Blob::new(image.clone(), translation.layout, read_ahead));
    let files = BlobFiles::new();
    files.add(
        "1-img.meta",
        BlobFsContent::Metadata(Arc::new(MetaFile::new(translation.metadata))),
    );
    files.add("1-img.blob", BlobFsContent::Blob(blob.clone()));
    let fs = BlobFs::new(files.clone(), 2);
    Some(Fixture {
        built,
        image,
        metadata,
        blob,
        files,
        fs,
    })
}

fn errno<T: std::fmt::Debug>(r: Result<T, FsError>) -> i32 {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.code(),
    }
}

fn node(fs: &BlobFs, name: &str) -> INodeNo {
    fs.lookup(&CTX, ROOT, OsStr::new(name)).unwrap().attr.ino
}

/// Reads `size` bytes at `offset` of `node` open as `fh`, as the session answers.
fn read(fs: &BlobFs, node: INodeNo, fh: FileHandle, offset: u64, size: u32) -> Vec<u8> {
    let data = fs.read(&CTX, node, fh, offset, size).unwrap();
    let bytes = data.bytes().to_vec();
    data.replied();
    bytes
}

#[test]
fn lookup_and_getattr_give_each_file_its_size_and_nothing_else() {
    let Some(f) = fixture() else { return };
    let meta = f.fs.lookup(&CTX, ROOT, OsStr::new("1-img.meta")).unwrap();
    assert_eq!(meta.attr.size, f.metadata.len() as u64);
    assert_eq!(meta.attr.kind, FileType::RegularFile);
    assert_eq!(meta.attr.perm, 0o400, "root's alone");
    let blob = f.fs.lookup(&CTX, ROOT, OsStr::new("1-img.blob")).unwrap();
    assert_eq!(blob.attr.size, f.blob.layout().len_bytes());
    assert_eq!(
        f.fs.getattr(&CTX, blob.attr.ino, None).unwrap().attr.size,
        blob.attr.size
    );
    let root = f.fs.getattr(&CTX, ROOT, None).unwrap();
    assert_eq!(root.attr.kind, FileType::Directory);
    // Names come and go: a missing one is an error, not a negative entry kept for ever.
    assert_eq!(
        errno(f.fs.lookup(&CTX, ROOT, OsStr::new("2-img.blob"))),
        libc::ENOENT
    );
    assert_eq!(
        errno(f.fs.lookup(&CTX, blob.attr.ino, OsStr::new("x"))),
        libc::ENOENT
    );
    f.files.remove("1-img.blob");
    assert_eq!(errno(f.fs.getattr(&CTX, blob.attr.ino, None)), libc::ENOENT);
}

#[test]
fn opens_say_how_the_kernel_caches_each_file_and_count_the_opens() {
    let Some(f) = fixture() else { return };
    let (meta, blob) = (node(&f.fs, "1-img.meta"), node(&f.fs, "1-img.blob"));
    let ro = OpenFlags(libc::O_RDONLY);
    let m = f.fs.open(&CTX, meta, ro).unwrap();
    assert_eq!(m.flags, FopenFlags::FOPEN_KEEP_CACHE);
    let b = f.fs.open(&CTX, blob, ro).unwrap();
    assert_eq!(
        b.flags,
        FopenFlags::FOPEN_DIRECT_IO,
        "cached once, by EROFS"
    );
    assert_eq!(f.files.open_count("1-img.blob"), 1);
    assert_eq!(f.fs.open_handles(), 2);
    assert_eq!(
        errno(f.fs.open(&CTX, blob, OpenFlags(libc::O_RDWR))),
        libc::EROFS
    );
    assert_eq!(errno(f.fs.open(&CTX, INodeNo(999), ro)), libc::ENOENT);
    // A name removed while open stays readable through its handle until released.
    f.files.remove("1-img.meta");
    assert_eq!(read(&f.fs, meta, m.fh, 0, 16), f.metadata[..16]);
    f.fs.release(&CTX, meta, m.fh).unwrap();
    f.fs.release(&CTX, blob, b.fh).unwrap();
    assert_eq!(f.fs.open_handles(), 0);
    assert_eq!(f.files.open_count("1-img.blob"), 0);
    assert!(f.files.wait_released(&["1-img.blob"]));
    assert_eq!(
        errno(f.fs.read(&CTX, blob, b.fh, 0, 16)),
        libc::EBADF,
        "a released handle"
    );
}

#[test]
fn reads_give_the_metadata_bytes_and_each_file_at_its_place_in_the_blob() {
    let Some(f) = fixture() else { return };
    let ro = OpenFlags(libc::O_RDONLY);
    let meta = node(&f.fs, "1-img.meta");
    let m = f.fs.open(&CTX, meta, ro).unwrap();
    assert_eq!(read(&f.fs, meta, m.fh, 4096, 8192), f.metadata[4096..12288]);
    let end = f.metadata.len() as u64;
    assert!(read(&f.fs, meta, m.fh, end, 4096).is_empty());

    let blob = node(&f.fs, "1-img.blob");
    let b = f.fs.open(&CTX, blob, ro).unwrap();
    let mut checked = 0;
    for file in f.blob.layout().files().iter().filter(|file| file.size > 0) {
        let inode = f.image.inode(file.inode).unwrap();
        let reader = f.image.open_file(&inode).unwrap();
        let mut want = vec![0; file.size as usize];
        reader.read_at(0, &mut want).unwrap();
        let start = file.start_block * BLOB_BLOCK;
        // The whole file, then a piece inside it, and the gap after it reads as zeros.
        let size = u32::try_from(file.size.min(1 << 20)).unwrap();
        assert_eq!(read(&f.fs, blob, b.fh, start, size), want[..size as usize]);
        if file.size > 10 {
            assert_eq!(read(&f.fs, blob, b.fh, start + 3, 7), want[3..10]);
        }
        let tail = file.size % BLOB_BLOCK;
        if tail != 0 && file.size < 1 << 20 {
            let gap = read(
                &f.fs,
                blob,
                b.fh,
                start + file.size,
                (BLOB_BLOCK - tail) as u32,
            );
            assert!(gap.iter().all(|&x| x == 0));
        }
        checked += 1;
    }
    assert!(checked > 5, "the fixture has files: {checked}");
    // Past the end: nothing.
    assert!(read(&f.fs, blob, b.fh, f.blob.layout().len_bytes(), 4096).is_empty());
    // Files of the source tree, by content: `one/only` is somewhere in the blob.
    let only = std::fs::read(f.built.src.join("one/only")).unwrap();
    let mut all = Vec::new();
    while (all.len() as u64) < f.blob.layout().len_bytes() {
        let piece = read(&f.fs, blob, b.fh, all.len() as u64, 1 << 20);
        assert!(!piece.is_empty());
        all.extend_from_slice(&piece);
    }
    assert_eq!(all.len() as u64, f.blob.layout().len_bytes());
    assert!(all.windows(only.len()).any(|w| w == only));
    assert_eq!(f.blob.failed_reads(), 0);
}

/// Entries of a listing, as the session's buffer holds them.
fn listing(fs: &BlobFs, offset: u64, size: u32) -> Vec<(String, u64, u32)> {
    let mut out = DirentBuffer::new(size);
    let turn = fs
        .readdir(&CTX, ROOT, FileHandle(0), offset, &mut out)
        .unwrap();
    drop(turn);
    let bytes = out.into_bytes();
    let mut rest = &bytes[..];
    let mut entries = Vec::new();
    while !rest.is_empty() {
        let (d, after) = abi::Dirent::read_from_prefix(rest).unwrap();
        let name = String::from_utf8(after[..d.namelen as usize].to_vec()).unwrap();
        entries.push((name, d.off, d.typ));
        rest = &rest[abi::dirent_align(24 + d.namelen as usize)..];
    }
    entries
}

#[test]
fn readdir_lists_the_files_and_resumes_where_asked() {
    let Some(f) = fixture() else { return };
    let all = listing(&f.fs, 0, 4096);
    let names: Vec<&str> = all.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, [".", "..", "1-img.blob", "1-img.meta"]);
    assert_eq!(all[2].2, libc::DT_REG as u32);
    assert_eq!(all[0].2, libc::DT_DIR as u32);
    // A small buffer takes two entries; resuming at the last offset gives the rest.
    let first = listing(&f.fs, 0, 64);
    assert_eq!(first.len(), 2);
    let rest = listing(&f.fs, first[1].1, 4096);
    assert_eq!(
        rest.iter().map(|(n, _, _)| n.as_str()).collect::<Vec<_>>(),
        ["1-img.blob", "1-img.meta"]
    );
    assert!(listing(&f.fs, 4, 4096).is_empty());
    let mut probe = DirentBuffer::new(4096);
    assert_eq!(
        errno(f.fs.readdir(&CTX, INodeNo(2), FileHandle(0), 0, &mut probe)),
        libc::ENOTDIR
    );
    // The trait the session's buffer implements is the FUSE path's.
    assert!(!DirectoryReplier::add(
        &mut probe,
        DirectoryEntry {
            node: ROOT,
            offset: 1,
            kind: FileType::Directory,
            name: OsStr::new("."),
        }
    ));
}

#[test]
fn a_damaged_block_is_eio_and_counted_for_status() {
    let Some(f) = fixture() else { return };
    // A blob whose image lies: its file data is zeroed on disk (the tables are intact).
    let path = f.built.image("gzip", &["-comp", "gzip"]);
    let mut bytes = std::fs::read(&path).unwrap();
    // File data and fragments lie between the superblock (96 bytes, no compressor options
    // for default gzip) and the inode table, whose start the superblock gives at byte 64.
    let inode_table = u64::from_le_bytes(bytes[64..72].try_into().unwrap()) as usize;
    bytes[96..inode_table].fill(0xff);
    let damaged = f.built.dir.path().join("damaged.sqfs");
    std::fs::write(&damaged, &bytes).unwrap();
    let image = Image::open(&damaged, &OpenOptions::default()).unwrap();
    let translation = translate(&f.image, &KernelMountOptions::default()).unwrap();
    let blob = Arc::new(Blob::new(
        image,
        translation.layout,
        ReadAhead {
            threads: 0,
            bytes: 0,
        },
    ));
    let files = BlobFiles::new();
    files.add("d.blob", BlobFsContent::Blob(blob.clone()));
    let fs = BlobFs::new(files, 2);
    let node = node(&fs, "d.blob");
    let b = fs.open(&CTX, node, OpenFlags(libc::O_RDONLY)).unwrap();
    let mut failed = 0;
    for file in blob.layout().files().iter().filter(|x| x.size > 0) {
        let start = file.start_block * BLOB_BLOCK;
        if let Err(e) = fs.read(&CTX, node, b.fh, start, 4096) {
            assert_eq!(e.code(), libc::EIO);
            failed += 1;
        }
    }
    assert!(failed > 0, "some read met the damage");
    assert_eq!(blob.failed_reads(), failed);
    assert!(blob
        .last_error()
        .is_some_and(|e| e.contains("damaged.sqfs")));
}
