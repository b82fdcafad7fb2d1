//! The adapter in-process, on an image made by the real mksquashfs: random 4 KiB readers cost
//! one decompression and about one request per block (the block goes to the kernel's page
//! cache), and sequential readers get blocks decompressed ahead of them. Needs root and
//! /dev/fuse.

use squashd_core::{Image, OpenOptions};
use squashd_fuse::{MountConfig, MountedImage};
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as u8
        })
        .collect()
}

#[test]
fn random_reads_decompress_each_block_once_and_sequential_reads_prefetch() {
    if !Path::new("/dev/fuse").exists() || !testkit::is_root() {
        testkit::skip("needs root and /dev/fuse");
        return;
    }
    if !testkit::have_squashfs_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir(&src).unwrap();
    let random = data(4 << 20, 1);
    let sequential = data(8 << 20, 2);
    fs::write(src.join("random"), &random).unwrap();
    fs::write(src.join("sequential"), &sequential).unwrap();
    let image_path = dir.path().join("i.sqfs");
    testkit::mksquashfs(&src, &image_path, &["-comp", "zstd", "-b", "128K"]);
    let image = Image::open(&image_path, &OpenOptions::default()).unwrap();
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let config = MountConfig {
        prefetch_threads: 2,
        ..MountConfig::default()
    };
    let mounted = MountedImage::mount(image.clone(), &mnt, &config).unwrap();
    let unmounter = mounted.unmounter();
    let server = std::thread::spawn(move || mounted.run());

    // Every 4 KiB page of a 4 MiB file (32 blocks), in a scrambled order, with the kernel's
    // read-ahead off: 1024 reads reach the daemon.
    let file = fs::File::open(mnt.join("random")).unwrap();
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    let before = image.stats().data;
    let pages = random.len() / 4096;
    let mut buf = [0u8; 4096];
    for i in 0..pages {
        let page = (i * 389) % pages;
        file.read_exact_at(&mut buf, (page * 4096) as u64).unwrap();
        assert_eq!(&buf[..], &random[page * 4096..][..4096], "page {page}");
    }
    let after = image.stats().data;
    let loads = after.loads - before.loads;
    assert!(
        loads <= 32,
        "{loads} decompressions for 32 blocks read 4 KiB at a time"
    );
    // The first small read of a block hands the whole block to the kernel's page cache (in
    // the background), so later reads of it are page-cache hits that never reach the daemon:
    // about one request per block, not one per page.
    let requests = (after.hits + after.misses) - (before.hits + before.misses);
    assert!(
        (32..=128).contains(&requests),
        "{requests} requests reached the daemon for {pages} reads of 32 blocks"
    );
    drop(file);

    // A sequential reader: read-ahead threads load blocks before the reader asks for them,
    // so the reader's own accesses are mostly hits.
    let before = image.stats().data;
    let got = fs::read(mnt.join("sequential")).unwrap();
    assert!(got == sequential, "sequential contents differ");
    let after = image.stats().data;
    assert_eq!(
        after.loads - before.loads,
        64,
        "each of 64 blocks decompressed once"
    );
    assert!(
        after.hits > before.hits,
        "no block was ready (prefetched) when the reader came"
    );

    unmounter.unmount(false).unwrap();
    server.join().unwrap().unwrap();
}
