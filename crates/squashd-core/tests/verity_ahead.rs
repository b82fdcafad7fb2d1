//! The hints a verified source gives its hash source, seen where they land: the page cache of
//! a real tree file, dropped first, as `cachestat(2)` counts it (a read with `RWF_NOWAIT`
//! would not do: it starts the readahead it does not wait for). Where the page cache cannot be
//! dropped (a tmpfs temporary directory) or the kernel has no `cachestat` (before 6.5), the
//! test says SKIPPED.

use squashd_core::source::{FileSource, Source};
use squashd_core::verity::{
    build_tree, first_tree_block, read_tree_location, Geometry, TreeLocation, TreeParams,
    VerityOptions, VeritySource, TREE_HEAD_AHEAD,
};
use squashd_core::{CacheBudgets, Caches};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// 512-byte blocks (16 digests to a hash block): 8 MiB of data make a tree of 557 KiB, longer
/// than the head asked for at open, whose bottom level checks 8 KiB of data per block.
const BLOCK: u32 = 512;
const DATA_BLOCKS: u64 = 16384;

/// A data file and its tree file (superblock at 0), written, synced and dropped from the page
/// cache; `None` when the page cache keeps them (then the caller skips).
fn cold_files(dir: &Path) -> Option<(File, File, TreeLocation)> {
    let (data, tree, location) = written_files(dir);
    for file in [&data, &tree] {
        file.sync_all().unwrap();
        rustix::fs::fadvise(file, 0, None, rustix::fs::Advice::DontNeed).unwrap();
        let len = file.metadata().unwrap().len();
        if cached(file, len - 4096) != Some(false) {
            return None;
        }
    }
    Some((data, tree, location))
}

/// A data file of [`DATA_BLOCKS`] blocks and its tree file (superblock at 0), written.
fn written_files(dir: &Path) -> (File, File, TreeLocation) {
    let data: Vec<u8> = (0..DATA_BLOCKS as usize * BLOCK as usize)
        .map(|i| (i * 13 + i / 512) as u8)
        .collect();
    let params = TreeParams {
        data_block_size: BLOCK,
        hash_block_size: BLOCK,
        ..TreeParams::new(DATA_BLOCKS, b"ahead".to_vec())
    };
    let (tree, root) = build_tree(&params, &data, 0, true).unwrap();
    let mut files = Vec::new();
    for (name, bytes) in [("data", &data), ("tree", &tree)] {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        files.push(File::open(&path).unwrap());
    }
    let location = TreeLocation {
        params,
        hash_offset: 0,
        superblock: true,
        root_hash: root.as_bytes().to_vec(),
    };
    let tree = files.pop().unwrap();
    (files.pop().unwrap(), tree, location)
}

/// Whether the page holding byte `pos` of `file` is in the page cache; `None` if the kernel
/// cannot say.
fn cached(file: &File, pos: u64) -> Option<bool> {
    /// `struct cachestat_range` and `struct cachestat` of <linux/mman.h>.
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Counts {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    /// cachestat's number on every architecture (Linux 6.5's unified table).
    const SYS_CACHESTAT: libc::c_long = 451;
    let range = Range {
        off: pos / 4096 * 4096,
        len: 4096,
    };
    let mut counts = Counts::default();
    // SAFETY: cachestat reads `range` and writes one `struct cachestat` into `counts`, both
    // live, correctly laid out (repr(C), the kernel's field order and widths) and exclusively
    // borrowed for the call; the fd is open for its duration; flags must be 0.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const Range,
            &mut counts as *mut Counts,
            0u32,
        )
    };
    (rc == 0).then_some(counts.nr_cache > 0)
}

/// Whether the page holding byte `pos` of `file` is in the page cache.
fn resident(file: &File, pos: u64) -> bool {
    cached(file, pos) == Some(true)
}

/// Whether byte `pos` of `file` comes into the page cache within a few seconds (a hint's
/// reads run in the background).
fn becomes_resident(file: &File, pos: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        if resident(file, pos) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// The byte position in the tree file of the bottom-level hash block checking `data_block`.
fn bottom_hash_position(location: &TreeLocation, data_block: u64) -> u64 {
    let geometry = Geometry::new(
        &location.params,
        first_tree_block(0, location.params.hash_block_size, true),
    )
    .unwrap();
    let (start, _) = geometry.levels[0];
    (start + (data_block >> geometry.per_block_bits)) * u64::from(BLOCK)
}

#[test]
fn opening_asks_for_the_trees_head_and_a_hint_for_data_asks_for_its_hash_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let Some((data, tree, given)) = cold_files(dir.path()) else {
        println!(
            "SKIPPED: the page cache of {} cannot be dropped or counted (cachestat)",
            dir.path().display()
        );
        return;
    };
    let data = Arc::new(FileSource::from_file(data));
    let tree_file = tree.try_clone().unwrap();
    let hash: Arc<dyn Source> = Arc::new(FileSource::from_file(tree));
    let location = read_tree_location(
        hash.as_ref(),
        0,
        given.root_hash.clone(),
        &VerityOptions::default(),
        DATA_BLOCKS * u64::from(BLOCK),
    )
    .unwrap();
    assert_eq!(location.params.data_blocks, DATA_BLOCKS);
    // The head of the tree, past what the superblock's own read brings in.
    assert!(
        becomes_resident(&tree_file, TREE_HEAD_AHEAD - 4096),
        "the tree's head was not asked for at open"
    );
    let caches = Arc::new(Caches::new(&CacheBudgets::default()));
    let source = VeritySource::new("ahead.img".into(), data, 0, hash, &location, caches).unwrap();
    // The data's last 64 KiB: their hash blocks lie at the tree's end, far past its head.
    let last = DATA_BLOCKS - 1;
    let first = last + 1 - (64 << 10) / u64::from(BLOCK);
    let (low, high) = (
        bottom_hash_position(&location, first),
        bottom_hash_position(&location, last),
    );
    assert!(low > TREE_HEAD_AHEAD + (128 << 10));
    assert!(!resident(&tree_file, low) && !resident(&tree_file, high));
    source.will_need(first * u64::from(BLOCK), 64 << 10);
    assert!(
        becomes_resident(&tree_file, low) && becomes_resident(&tree_file, high),
        "a hint for data did not ask for the hash blocks that check it"
    );
    // And they check: reading the hinted data reads its hash blocks from there.
    let mut buf = vec![0u8; 64 << 10];
    source
        .read_exact_at(&mut buf, first * u64::from(BLOCK))
        .unwrap();
    assert_eq!(
        source.stats().verified_blocks,
        (64 << 10) / u64::from(BLOCK)
    );
}

/// A sequential read gives its hash file no hint past its first read: each later bottom hash
/// block follows the one before it, already checked, and the kernel's read-ahead of the hash
/// file brings those in large reads; a hint per block read each block alone, and kept that
/// read-ahead from starting (2026-11-27-verity-s8.md). A read elsewhere, whose hash block does
/// not follow a checked one, still gets its hint. And each data block is hashed once, even
/// where reads of unaligned lengths share it.
#[test]
fn a_sequential_read_hints_its_first_hash_block_only_and_hashes_each_block_once() {
    let dir = tempfile::tempdir().unwrap();
    let (data, tree, location) = written_files(dir.path());
    let caches = Arc::new(Caches::new(&CacheBudgets::default()));
    let source = VeritySource::new(
        "sequential.img".into(),
        Arc::new(FileSource::from_file(data)),
        0,
        Arc::new(FileSource::from_file(tree)),
        &location,
        caches,
    )
    .unwrap();
    // The middle first (a seek: hinted), then the whole from the start (hinted at the start
    // only), in reads of 3000 bytes: across block edges, as a SquashFS image's compressed
    // blocks are read.
    let len = DATA_BLOCKS * u64::from(BLOCK);
    let mut buf = vec![0u8; 3000];
    source.read_exact_at(&mut buf, len / 2).unwrap();
    assert_eq!(source.stats().hash_hints, 1, "{:?}", source.stats());
    let mut pos = 0;
    while pos < len {
        let n = (len - pos).min(buf.len() as u64) as usize;
        source.read_exact_at(&mut buf[..n], pos).unwrap();
        pos += n as u64;
    }
    let stats = source.stats();
    assert_eq!(
        stats.hash_hints, 2,
        "a sequential read gave more hints: {stats:?}"
    );
    assert_eq!(stats.verified_blocks, DATA_BLOCKS, "{stats:?}");
    assert_eq!(stats.data_block_hashes, DATA_BLOCKS, "{stats:?}");
}
