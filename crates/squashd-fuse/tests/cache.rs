//! The adapter in-process, on an image made by the real mksquashfs: random 4 KiB readers cost
//! one decompression and about one request per block (the block goes to the kernel's page
//! cache), and sequential readers get blocks decompressed ahead of them. Needs root and
//! /dev/fuse.

use squashd_core::{Image, OpenOptions};
use squashd_fuse::server::UringMode;
use squashd_fuse::{MountConfig, MountedImage};
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

/// `len` bytes that do not compress, the same for the same seed.
fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fastrand::Rng::with_seed(seed).fill(&mut v);
    v
}

#[test]
fn random_reads_decompress_each_block_once_and_sequential_reads_prefetch() {
    if !testkit::can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let random = data(4 << 20, 1);
    let sequential = data(8 << 20, 2);
    let image_path = testkit::image_of_files(
        dir.path(),
        &[("random", &random), ("sequential", &sequential)],
        &["-comp", "zstd", "-b", "128K"],
    );
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    // On both transports: the page stores are notifications on /dev/fuse, also when the reads
    // they follow came over the ring.
    for transport in testkit::uring::transports() {
        served_as_stored_and_read_ahead(&image_path, &mnt, &transport, &random, &sequential);
    }
}

/// A mount of `image` served on a thread of its own, over `transport`.
struct Served {
    probe: squashd_fuse::MountProbe,
    unmounter: squashd_fuse::Unmounter,
    server: std::thread::JoinHandle<std::io::Result<()>>,
    /// A failed assertion must not leave the mount behind: unmounts (lazily) when dropped.
    _guard: Unmount,
}

struct Unmount(squashd_fuse::Unmounter);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = self.0.unmount(true);
    }
}

/// Mounts `image` on `mnt` with `config` over `transport` and serves it.
fn serve(
    image: &Image,
    mnt: &std::path::Path,
    transport: &testkit::uring::Transport,
    config: MountConfig,
) -> Served {
    let config = MountConfig {
        uring: if transport.is_ring() {
            UringMode::On
        } else {
            UringMode::Off
        },
        ..config
    };
    let mounted = MountedImage::mount(image.clone(), mnt, &config).unwrap();
    let probe = mounted.probe();
    let unmounter = mounted.unmounter();
    let _guard = Unmount(unmounter.clone());
    let server = std::thread::spawn(move || mounted.run());
    Served {
        probe,
        unmounter,
        server,
        _guard,
    }
}

fn served_as_stored_and_read_ahead(
    image_path: &std::path::Path,
    mnt: &std::path::Path,
    transport: &testkit::uring::Transport,
    random: &[u8],
    sequential: &[u8],
) {
    // A fresh image (and cache) per mount: the counts below start from nothing.
    let image = Image::open(image_path, &OpenOptions::default()).unwrap();
    let config = MountConfig {
        read_ahead_threads: 2,
        ..MountConfig::default()
    };
    let Served {
        probe,
        unmounter,
        server,
        _guard,
    } = serve(&image, mnt, transport, config);

    // One 4 KiB page of each of the 32 blocks of a 4 MiB file, with the kernel's read-ahead
    // off: 32 small reads, each costing one decompression.
    let file = fs::File::open(mnt.join("random")).unwrap();
    // The ring is registered after INIT's answer, which the first request waits for: wait
    // (boundedly) for the session to say so rather than catch it in between.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while probe.transport().uring != transport.is_ring() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(
        probe.transport().uring,
        transport.is_ring(),
        "{transport:?}"
    );
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    let pages = random.len() / 4096;
    let per_block = 131072 / 4096;
    let read_page = |page: usize| {
        let mut buf = [0u8; 4096];
        file.read_exact_at(&mut buf, (page * 4096) as u64).unwrap();
        assert_eq!(&buf[..], &random[page * 4096..][..4096], "page {page}");
    };
    let before = image.stats().data;
    for block in 0..pages / per_block {
        read_page(block * per_block + 5);
    }
    let after = image.stats().data;
    assert_eq!(
        after.loads - before.loads,
        32,
        "one decompression per block"
    );
    // Each of those reads handed its whole block to the kernel's page cache, from a background
    // thread: once it has finished, every other page of the file is a page-cache hit and none
    // of the 992 reads below reaches the daemon (without the store, all of them would). Wait
    // for that by asking the kernel which pages it holds (mincore reads nothing), not by
    // sleeping a guess, which a loaded machine can outlast.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while resident_pages(&file, random.len()) < pages && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let before = image.stats().data;
    for i in 0..pages {
        let page = (i * 389) % pages;
        if page % per_block != 5 {
            read_page(page);
        }
    }
    let after = image.stats().data;
    let requests = (after.hits + after.misses) - (before.hits + before.misses);
    assert_eq!(
        requests, 0,
        "{transport:?}: reads of stored blocks reached the daemon"
    );
    drop(file);

    // A sequential reader: read-ahead threads load blocks before the reader asks for them,
    // so the reader's own accesses are mostly hits.
    let before = image.stats().data;
    let got = fs::read(mnt.join("sequential")).unwrap();
    assert!(
        got == sequential,
        "{transport:?}: sequential contents differ"
    );
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

/// How many of the first `len` bytes' pages of `file` are in the page cache, from mincore on a
/// read-only mapping (which reads nothing).
fn resident_pages(file: &fs::File, len: usize) -> usize {
    let pages = len.div_ceil(4096);
    let mut present = vec![0u8; pages];
    // SAFETY: a private read-only mapping of `len` bytes of an open file, unmapped before
    // returning; mincore writes one byte per page into `present`, which holds `pages` bytes.
    unsafe {
        let map = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            file.as_raw_fd(),
            0,
        );
        assert_ne!(map, libc::MAP_FAILED, "mmap");
        let rc = libc::mincore(map, len, present.as_mut_ptr());
        libc::munmap(map, len);
        assert_eq!(rc, 0, "mincore");
    }
    present.iter().filter(|b| *b & 1 == 1).count()
}

/// A reader that reads a file at random (one page of each of its 128 blocks, in random order)
/// gets blocks of it decompressed on another core and handed to the page cache beside it (the
/// random sweep): the blocks swept before the reader came cost it no request, and each block
/// is still decompressed once. (The CPU gauge is off: the counts must not depend on what else
/// the machine runs.) Without the sweep, each of the 128 reads would be a request.
#[test]
fn a_random_reader_gets_blocks_swept_into_the_page_cache_beside_it() {
    if !testkit::can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut rng = fastrand::Rng::with_seed(7);
    let contents: Vec<u8> = (0..16 << 20).map(|_| b"acgt"[rng.usize(..4)]).collect();
    let image_path = testkit::image_of_files(
        dir.path(),
        &[("big", &contents)],
        &["-comp", "zstd", "-b", "128K"],
    );
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    for transport in testkit::uring::transports() {
        let image = Image::open(&image_path, &OpenOptions::default()).unwrap();
        let config = MountConfig {
            read_ahead_threads: 2,
            cpu_gauge: squashd_core::read_ahead::CpuGauge::Off,
            ..MountConfig::default()
        };
        let Served {
            probe,
            unmounter,
            server,
            _guard,
        } = serve(&image, &mnt, &transport, config);
        let file = fs::File::open(mnt.join("big")).unwrap();
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        let mut blocks: Vec<usize> = (0..128).collect();
        rng.shuffle(&mut blocks);
        let before = probe.requests();
        for &block in &blocks {
            let at = block * (128 << 10) + rng.usize(..32) * 4096;
            let mut buf = [0u8; 4096];
            file.read_exact_at(&mut buf, at as u64).unwrap();
            assert!(
                buf[..] == contents[at..at + 4096],
                "{transport:?}: block {block}"
            );
        }
        let reads = probe.requests() - before;
        let sweep = probe.sweep_stats();
        assert!(sweep.sweeps >= 16, "{transport:?}: {sweep:?}");
        assert!(
            reads + sweep.sweeps / 2 < 128,
            "{transport:?}: {reads} reads reached the daemon, {sweep:?}"
        );
        assert_eq!(
            image.stats().data.loads,
            128,
            "{transport:?}: each block decompressed once, {sweep:?}"
        );
        drop(file);
        unmounter.unmount(false).unwrap();
        server.join().unwrap().unwrap();
    }
}
