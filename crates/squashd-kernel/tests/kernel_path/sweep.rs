//! The random sweep on the kernel path: blocks beside a random reader decompressed by the
//! sweep's workers (off the blob file system's request threads), and handed to EROFS's page
//! cache at the reader's next miss.

use super::*;
use squashd_core::read_ahead::{CpuGauge, RandomSweep, AFTER_MISSES};
use std::time::{Duration, Instant};

const BLOCK: usize = 128 << 10;

/// A data mount of a 16 MiB file (128 blocks of 128 KiB) with the sweep's CPU gauge off (the
/// figures must not depend on what else the machine runs), the fill attached, and the file
/// open for random reads (FADV_RANDOM, as fio opens it).
fn random_reader(dir: &Path) -> (DataMount, Vec<u8>, fs::File, fastrand::Rng) {
    let mut rng = fastrand::Rng::with_seed(11);
    let data: Vec<u8> = (0..128 * BLOCK).map(|_| b"acgt"[rng.usize(..4)]).collect();
    let read_ahead = KernelMountOptions::default().read_ahead;
    let sweep = RandomSweep::with_gauge(true, CpuGauge::Off);
    let m = data_mount_with(dir, &data, read_ahead, 4, Some(sweep), UringMode::Auto);
    m.blob
        .block_fill()
        .attach(&m.mnt, &m.blobs.path("data.meta"));
    let file = fs::File::open(m.mnt.join("big")).unwrap();
    rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::Random).unwrap();
    (m, data, file, rng)
}

/// Reads page `page` of block `block` and checks it against the file's bytes.
fn read_page(file: &fs::File, data: &[u8], block: usize, page: usize) {
    let at = block * BLOCK + page * 4096;
    let mut buf = vec![0u8; 4096];
    std::os::unix::fs::FileExt::read_exact_at(file, &mut buf, at as u64).unwrap();
    assert!(
        buf == data[at..at + 4096],
        "block {block} page {page} differs"
    );
}

/// Waits (10 s at most) until the sweep's workers have decompressed `n` blocks.
fn wait_for_sweeps(m: &DataMount, n: u64) {
    let start = Instant::now();
    while m.blob.swept_stats().decompressed < n {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the sweep's workers decompressed {:?}",
            m.blob.swept_stats()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Misses blocks far apart until the sweep starts (the first read of the file is taken for the
/// start of a stream, the others are seeks): the last miss (of `block`) sweeps the blocks after
/// it (one less than the cores), which the workers then decompress. Returns how many.
fn miss_until_swept(m: &DataMount, data: &[u8], file: &fs::File, block: usize) -> u64 {
    for i in 0..=AFTER_MISSES as usize {
        read_page(file, data, 10 * i + 3, 0);
    }
    assert_eq!(m.blob.sweep_stats().sweeps, 0, "swept before its misses");
    read_page(file, data, block, 0);
    let swept = m.blob.sweep_stats().sweeps;
    assert!(swept >= 1, "{:?}", m.blob.sweep_stats());
    wait_for_sweeps(m, swept);
    swept
}

/// The reader's misses: blob reads that were not a fill's.
fn reader_misses(m: &DataMount) -> u64 {
    m.blob.reads() - m.blob.fill_reads()
}

/// A block swept beside a random reader is decompressed by the sweep's workers and given to
/// EROFS whole at the reader's next miss: the reader then reads its 32 pages without reaching
/// squashd, and it was decompressed once. (Before the workers, the sweep asked EROFS at once,
/// and the blob file system's request threads decompressed it while the reader's next miss
/// waited behind them.)
#[test]
fn a_swept_block_is_given_to_erofs_at_the_next_miss() {
    if !testkit::can_mount_erofs() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (m, data, file, mut rng) = random_reader(dir.path());
    let swept = miss_until_swept(&m, &data, &file, 80);
    let loads = m.image.stats().data.loads;
    assert_eq!(
        loads,
        AFTER_MISSES + 2 + swept,
        "the misses' blocks and the swept ones"
    );
    // The next miss, far away, gives block 81 to EROFS.
    read_page(&file, &data, 110, 5);
    let misses = reader_misses(&m);
    let mut pages: Vec<usize> = (0..32).collect();
    rng.shuffle(&mut pages);
    for page in pages {
        read_page(&file, &data, 81, page);
    }
    assert_eq!(
        reader_misses(&m),
        misses,
        "the reader's reads of the swept block reached squashd: {:?}",
        m.blob.swept_stats()
    );
    assert_eq!(m.blob.swept_stats().reached, 0);
    // Block 81 was not decompressed again (110 and, perhaps, the blocks swept beside it were).
    assert!(
        m.image.stats().data.loads <= loads + 1 + swept,
        "{:?}",
        m.image.stats().data
    );
    drop(file);
    nix::mount::umount2(&m.mnt, MntFlags::empty()).expect("umount right after random reads");
}

/// A reader that comes to a swept block before EROFS was given it finds it decompressed: no
/// decompression of its own, and the sweep is counted as used, not wasted.
#[test]
fn a_reader_that_comes_to_a_swept_block_first_finds_it_decompressed() {
    if !testkit::can_mount_erofs() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (m, data, file, _) = random_reader(dir.path());
    // A miss of the last block sweeps the first (the candidates wrap around): a read of it
    // next is a seek, not the next read of a stream.
    let swept = miss_until_swept(&m, &data, &file, 127);
    let loads = m.image.stats().data.loads;
    read_page(&file, &data, 0, 7);
    let stats = m.blob.swept_stats();
    assert_eq!(stats.reached, 1, "{stats:?}");
    // Its other pages came with the fill of its rest: the block's first miss was the last.
    let misses = reader_misses(&m);
    for page in 0..32 {
        read_page(&file, &data, 0, page);
    }
    assert_eq!(reader_misses(&m), misses);
    let stats = m.image.stats().data;
    // Reading block 0 decompressed nothing; its miss may have swept the blocks after it.
    assert!(stats.loads <= loads + swept, "{stats:?}");
    assert_eq!(m.blob.sweep_stats().wasted, 0, "{:?}", m.blob.sweep_stats());
    drop(file);
    nix::mount::umount2(&m.mnt, MntFlags::empty()).expect("umount right after random reads");
}

/// A reader that reads a file at random gets blocks brought in beside it (the random sweep): of
/// the file's 128 blocks, read once each at one page in random order, those swept before the
/// reader came cost it no miss, every block is still decompressed once, and the bytes are the
/// file's. Without the sweep, the reader would miss all 128. (The sweep's CPU gauge is off here: the figures must not depend on what else the
/// machine runs.)
#[test]
fn a_random_reader_gets_blocks_swept_beside_it() {
    if !testkit::can_mount_erofs() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (m, data, file, mut rng) = random_reader(dir.path());
    let mut blocks: Vec<usize> = (0..128).collect();
    rng.shuffle(&mut blocks);
    for &block in &blocks {
        read_page(&file, &data, block, rng.usize(..32));
    }
    let sweep = m.blob.sweep_stats();
    let misses = m.blob.reads() - m.blob.fill_reads();
    assert!(sweep.sweeps >= 20, "{sweep:?}");
    // Each block reached squashd once, as the reader's miss or as a sweep (a few more: a
    // reader's read may land while the blocks swept beside it are still being asked for); a
    // reader that came to a swept block before EROFS was given it reached it twice.
    let reached = misses + sweep.sweeps - sweep.wasted - m.blob.swept_stats().reached;
    assert!(
        (128..=132).contains(&reached),
        "{misses} reader misses, {sweep:?}, {:?}, {} fills",
        m.blob.swept_stats(),
        m.blob.block_fill().stats().fills
    );
    let loads = m.image.stats().data.loads;
    assert_eq!(loads, 128, "each block decompressed once: {sweep:?}");
    drop(file);
    nix::mount::umount2(&m.mnt, MntFlags::empty()).expect("umount right after random reads");
}
