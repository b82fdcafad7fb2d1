//! The kernel path end to end: images made by the real mksquashfs are translated, their blobs
//! served by the blob file system, the kernel's EROFS mounted on the two, and what the mount
//! shows compared path by path with the kernel's own squashfs mount of the same image (or an
//! `unsquashfs -d` extraction where the kernel cannot mount it). Needs root, /dev/fuse and
//! EROFS; skipped with a printed reason otherwise.

use nix::mount::{MntFlags, MsFlags};
use squashd_core::read_ahead::RandomSweep;
use squashd_core::{Image, OpenOptions};
use squashd_fuse::server::UringMode;
use squashd_kernel::{
    mount_erofs, translate, Blob, BlobFsContent, BlobMount, KernelMountOptions, MetaFile,
};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use testkit::{Built, TreeOptions};

#[path = "kernel_path/sweep.rs"]
mod sweep;

#[path = "kernel_path/ring_fill.rs"]
mod ring_fill;

/// Unmounts on drop, lazily, whatever happens to the test.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, MntFlags::MNT_DETACH);
    }
}

/// The reference view of `image` (see [`Built::reference`]), unmounted on drop.
fn reference(built: &Built, image: &Path, name: &str) -> (PathBuf, Option<Unmount>) {
    let (root, kernel) = built.reference(image, name);
    (root, kernel.map(Unmount))
}

/// Translates `image`, serves it on `blobs` as `name`, mounts EROFS on `mnt`.
fn kernel_mount(blobs: &BlobMount, image: &Path, name: &str, mnt: &Path) -> Unmount {
    kernel_mount_at(blobs, image, 0, name, mnt)
}

/// [`kernel_mount`] of an image `offset` bytes into its file.
fn kernel_mount_at(
    blobs: &BlobMount,
    image: &Path,
    offset: u64,
    name: &str,
    mnt: &Path,
) -> Unmount {
    let options = OpenOptions::default().with_offset(offset);
    let image = Image::open(image, &options).unwrap();
    let t = translate(&image, &KernelMountOptions::default()).unwrap();
    let meta_name = format!("{name}.meta");
    let blob_name = format!("{name}.blob");
    blobs.files().add(
        &meta_name,
        BlobFsContent::Metadata(Arc::new(MetaFile::new(t.metadata))),
    );
    blobs.files().add(
        &blob_name,
        BlobFsContent::Blob(Arc::new(Blob::new(
            image,
            t.layout,
            KernelMountOptions::default().read_ahead,
        ))),
    );
    fs::create_dir_all(mnt).unwrap();
    mount_erofs(
        &blobs.path(&meta_name),
        &blobs.path(&blob_name),
        mnt,
        MsFlags::MS_NODEV | MsFlags::MS_NOSUID,
    )
    .unwrap_or_else(|e| panic!("EROFS mount of {name}: {e}"));
    fsck(&blobs.path(&meta_name), &blobs.path(&blob_name));
    Unmount(mnt.to_path_buf())
}

/// `fsck.erofs --device=BLOB META` must pass: the kernel parses what the translation writes.
fn fsck(meta: &Path, blob: &Path) {
    let mut dev = std::ffi::OsString::from("--device=");
    dev.push(blob);
    let out = match Command::new("fsck.erofs").arg(dev).arg(meta).output() {
        Ok(out) => out,
        Err(e) => {
            eprintln!("note: fsck.erofs not runnable ({e}): scripts/setup.sh installs erofs-utils");
            return;
        }
    };
    assert!(
        out.status.success(),
        "fsck.erofs failed on {}:\n{}{}",
        meta.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_fixture_variant_matches_the_kernels_squashfs() {
    if !testkit::can_mount_erofs() {
        return;
    }
    let built = Built::new(&TreeOptions::default());
    let blob_dir = built.scratch("blobs");
    fs::create_dir_all(&blob_dir).unwrap();
    let blobs = BlobMount::mount(&blob_dir, 2).unwrap();
    for (name, extra) in [
        ("zstd", &["-comp", "zstd"][..]),
        ("gzip4k", &["-comp", "gzip", "-b", "4096"][..]),
        ("xz1m", &["-comp", "xz", "-b", "1M"][..]),
        ("lz4nofrag", &["-comp", "lz4", "-no-fragments"][..]),
        ("lzo", &["-comp", "lzo"][..]),
        ("lzma", &["-comp", "lzma"][..]),
    ] {
        let image = built.image(name, extra);
        let (reference_root, _kernel) = reference(&built, &image, name);
        let mnt = built.scratch(&format!("erofs-{name}"));
        let _mounted = kernel_mount(&blobs, &image, name, &mnt);
        let expected = testkit::walk_disk(&reference_root);
        let actual = testkit::walk_disk(&mnt);
        testkit::assert_records_eq(&expected, &actual, &format!("kernel path of {name}"));
    }
}

/// A file over 4 GiB with holes, in an image embedded 1 MiB + 17 bytes into a larger file.
#[test]
fn huge_sparse_file_in_an_embedded_image() {
    if !testkit::can_mount_erofs() {
        return;
    }
    let built = Built::new(&TreeOptions {
        huge_sparse: true,
        many_entries: 10,
    });
    let image = built.image("huge", &["-comp", "zstd"]);
    let offset = (1 << 20) + 17;
    let embedded = built.scratch("embedded.bin");
    let mut bytes = vec![0x5a; offset as usize];
    bytes.extend(fs::read(&image).unwrap());
    fs::write(&embedded, bytes).unwrap();
    let (reference_root, _kernel) = reference(&built, &image, "huge");
    let blob_dir = built.scratch("blobs");
    fs::create_dir_all(&blob_dir).unwrap();
    let blobs = BlobMount::mount(&blob_dir, 2).unwrap();
    let mnt = built.scratch("erofs-huge");
    let _mounted = kernel_mount_at(&blobs, &embedded, offset, "huge", &mnt);
    let expected = testkit::walk_disk(&reference_root);
    let actual = testkit::walk_disk(&mnt);
    testkit::assert_records_eq(&expected, &actual, "kernel path of huge, embedded");
}

/// A file `big` holding `data` (zstd, 128 KiB blocks) mounted through the kernel path with
/// `read_ahead`, its blob served by `threads` FUSE threads. Fields drop in order: the EROFS
/// mount goes before the blob file system under it.
struct DataMount {
    image: Image,
    blob: Arc<Blob>,
    mnt: PathBuf,
    _mounted: Unmount,
    blobs: BlobMount,
}

fn data_mount(
    dir: &Path,
    data: &[u8],
    read_ahead: squashd_kernel::ReadAhead,
    threads: usize,
) -> DataMount {
    data_mount_with(dir, data, read_ahead, threads, None, UringMode::Auto)
}

/// [`data_mount`] with the blob's random sweep `sweep` in place of its default.
fn data_mount_with(
    dir: &Path,
    data: &[u8],
    read_ahead: squashd_kernel::ReadAhead,
    threads: usize,
    sweep: Option<RandomSweep>,
    uring: UringMode,
) -> DataMount {
    let image_path =
        testkit::image_of_files(dir, &[("big", data)], &["-comp", "zstd", "-b", "128K"]);
    let image = Image::open(&image_path, &OpenOptions::default()).unwrap();
    let options = KernelMountOptions {
        read_ahead,
        ..KernelMountOptions::default()
    };
    let t = translate(&image, &options).unwrap();
    let mut blob = Blob::new(image.clone(), t.layout, options.read_ahead);
    if let Some(sweep) = sweep {
        blob = blob.with_sweep(sweep);
    }
    let blob = Arc::new(blob);
    let blob_dir = dir.join("blobs");
    fs::create_dir_all(&blob_dir).unwrap();
    let blobs = BlobMount::mount_with_uring(&blob_dir, threads, uring).unwrap();
    blobs.files().add(
        "data.meta",
        BlobFsContent::Metadata(Arc::new(MetaFile::new(t.metadata))),
    );
    blobs
        .files()
        .add("data.blob", BlobFsContent::Blob(blob.clone()));
    let mnt = dir.join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    mount_erofs(
        &blobs.path("data.meta"),
        &blobs.path("data.blob"),
        &mnt,
        MsFlags::MS_NODEV | MsFlags::MS_NOSUID,
    )
    .unwrap();
    DataMount {
        image,
        blob,
        mnt: mnt.clone(),
        _mounted: Unmount(mnt),
        blobs,
    }
}

/// Data is cached once, in EROFS's page cache: reading an 8 MiB file through the kernel path
/// decompresses each of its blocks once and leaves (nearly) none in squashd's data cache (with
/// read-ahead off, which hands blocks over through that cache); a second read is answered by
/// the page cache without reaching squashd.
#[test]
fn data_read_through_the_kernel_is_cached_once() {
    if !testkit::can_mount_erofs() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut rng = fastrand::Rng::with_seed(7);
    let data: Vec<u8> = (0..8 << 20).map(|_| b"acgt"[rng.usize(..4)]).collect();
    let off = squashd_kernel::ReadAhead {
        threads: 0,
        bytes: 0,
    };
    let DataMount {
        image, blob, mnt, ..
    } = &data_mount(dir.path(), &data, off, 2);
    assert!(fs::read(mnt.join("big")).unwrap() == data);
    let stats = image.stats();
    assert_eq!(
        stats.data.loads, 64,
        "each 128 KiB block decompressed once: {stats:?}"
    );
    // A block that EROFS's reads happen to split stays in squashd's cache (a partly read block
    // is kept for the rest of it); the blocks read whole, nearly all, do not.
    assert!(
        stats.data.resident_bytes <= 1 << 20,
        "blocks read through the kernel stay in squashd's cache: {stats:?}"
    );
    let reads = blob.reads();
    assert!(fs::read(mnt.join("big")).unwrap() == data);
    assert_eq!(blob.reads(), reads, "a second read reached squashd");
}

/// With read-ahead on, a block that read-ahead is decompressing when EROFS asks for it is
/// waited for, not decompressed a second time by the reader (in `./demo.sh`, 1,097
/// decompressions became 841, the FUSE path's 818 or so).
#[test]
fn read_ahead_and_readers_decompress_each_block_once() {
    if !testkit::can_mount_erofs() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut rng = fastrand::Rng::with_seed(11);
    let data: Vec<u8> = (0..16 << 20).map(|_| b"acgt"[rng.usize(..4)]).collect();
    let on = squashd_kernel::ReadAhead {
        threads: 2,
        bytes: 2 << 20,
    };
    let DataMount { image, mnt, .. } = &data_mount(dir.path(), &data, on, 4);
    assert!(fs::read(mnt.join("big")).unwrap() == data);
    let stats = image.stats();
    assert_eq!(
        stats.data.loads, 128,
        "each 128 KiB block decompressed once: {stats:?}"
    );
}

/// A random 4 KiB read of a block brings the whole block into EROFS's page cache, as the
/// kernel's squashfs does: squashd decompresses the block once, and the block's other 31 pages
/// then cost no read of the blob from the reader (only the fill's own reads, a few large ones,
/// asked for before the first read was answered). Without the fill, each page read at random
/// is a blob read of its own: 32 for the block.
#[test]
fn a_random_read_fills_its_whole_block() {
    if !testkit::can_mount_erofs() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut rng = fastrand::Rng::with_seed(5);
    let data: Vec<u8> = (0..16 << 20).map(|_| b"acgt"[rng.usize(..4)]).collect();
    let m = data_mount(
        dir.path(),
        &data,
        KernelMountOptions::default().read_ahead,
        2,
    );
    let source = m.blobs.path("data.meta");
    m.blob.block_fill().attach(&m.mnt, &source);
    let file = fs::File::open(m.mnt.join("big")).unwrap();
    // As fio does for random reads: no read-ahead of the kernel's own to help.
    rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::Random).unwrap();
    let block = 37 * (128 << 10);
    let read_page = |page: usize| {
        let mut buf = vec![0u8; 4096];
        let at = block + page * 4096;
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut buf, at as u64).unwrap();
        assert!(
            buf == data[at..at + 4096],
            "page {page} of the block differs"
        );
    };
    read_page(3);
    let mut rest: Vec<usize> = (0..32).filter(|&p| p != 3).collect();
    rng.shuffle(&mut rest);
    for page in rest {
        read_page(page);
    }
    let (reads, fill_reads) = (m.blob.reads(), m.blob.fill_reads());
    assert_eq!(
        reads - fill_reads,
        1,
        "the reader's reads of the block's pages reached squashd {} times ({reads} blob reads)",
        reads - fill_reads
    );
    // The fill reads the 31 other pages in pieces of at most 16 pages (EROFS's bios), on
    // either side of the page read first.
    assert!(reads <= 4, "{reads} blob reads for one block");
    let stats = m.image.stats();
    assert_eq!(
        stats.data.loads, 1,
        "the block decompressed once: {stats:?}"
    );
    assert_eq!(m.blob.block_fill().stats().fills, 1);
    // A fill holds a file of the mount open only while the read that asked for it is in
    // flight: once the reads are done, a plain umount (not lazy) finds the mount idle.
    for _ in 0..32 {
        let at = rng.usize(..data.len() / 4096) * 4096;
        let mut buf = vec![0u8; 4096];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut buf, at as u64).unwrap();
        assert!(buf == data[at..at + 4096]);
    }
    assert!(m.blob.block_fill().stats().fills > 1);
    drop(file);
    nix::mount::umount2(&m.mnt, MntFlags::empty()).expect("umount right after random reads");
}

/// A cold walk (page cache dropped) asks squashd for the metadata image a window at a time,
/// not a 4 KiB page at a time: a miss in a 1 MiB window stores the whole window in the kernel's
/// page cache (FUSE_NOTIFY_STORE). (On /usr, 1,483 requests per cold walk became about 120;
/// bench/results/2026-11-23-kernel-path.md. Here the bound is loose: how many misses land before
/// a store does depends on timing.)
#[test]
fn a_cold_walk_reads_the_metadata_image_a_window_at_a_time() {
    if !testkit::can_mount_erofs() {
        return;
    }
    // A directory of 30,000 entries: some 300 blocks of directory entries to walk.
    let built = Built::new(&TreeOptions {
        huge_sparse: false,
        many_entries: 30_000,
    });
    let image_path = built.image("zstd", &["-comp", "zstd"]);
    let image = Image::open(&image_path, &OpenOptions::default()).unwrap();
    let options = KernelMountOptions::default();
    let t = translate(&image, &options).unwrap();
    let pages = t.metadata.len() / 4096;
    assert!(
        pages > 16,
        "a metadata image of {pages} pages shows nothing"
    );
    let meta = Arc::new(MetaFile::new(t.metadata));
    let blob = Arc::new(Blob::new(image, t.layout, options.read_ahead));
    let blob_dir = built.scratch("blobs");
    fs::create_dir_all(&blob_dir).unwrap();
    let blobs = BlobMount::mount(&blob_dir, 2).unwrap();
    blobs
        .files()
        .add("w.meta", BlobFsContent::Metadata(meta.clone()));
    blobs.files().add("w.blob", BlobFsContent::Blob(blob));
    let mnt = built.scratch("erofs-windows");
    fs::create_dir_all(&mnt).unwrap();
    mount_erofs(
        &blobs.path("w.meta"),
        &blobs.path("w.blob"),
        &mnt,
        MsFlags::MS_NODEV | MsFlags::MS_NOSUID,
    )
    .unwrap();
    let _mounted = Unmount(mnt.clone());
    // The first window was stored when EROFS opened the image: the mount (superblock, root
    // inode) read nothing through squashd.
    assert_eq!(meta.reads(), 0, "the mount read its metadata image");
    let walk = || {
        let mut stack = vec![mnt.clone()];
        let mut seen = 0;
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir).unwrap() {
                let entry = entry.unwrap();
                seen += 1;
                if entry.file_type().unwrap().is_dir() {
                    stack.push(entry.path());
                }
            }
        }
        seen
    };
    let entries = walk();
    // Drop the page cache: the next walk is cold, and every metadata page must come back.
    fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
    let before = meta.reads();
    assert_eq!(walk(), entries);
    let reads = meta.reads() - before;
    assert!(
        reads * 8 <= pages as u64,
        "a cold walk of {entries} entries read the {pages}-page metadata image {reads} times"
    );
}
