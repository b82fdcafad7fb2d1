//! Counts read straight from an image's bytes, independently of squashd's parser, so tests can
//! hold squashd's cache counters against them.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The little-endian u64 at `pos` of the image file `f`.
pub fn u64_at(f: &File, pos: u64) -> u64 {
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, pos).expect("read the image");
    u64::from_le_bytes(b)
}

/// Metadata blocks in `start..end` of the image file `f`, found by following their 2-byte
/// headers; asserts that the last one ends exactly at `end`.
pub fn metadata_blocks_in(f: &File, start: u64, end: u64) -> u64 {
    let (mut pos, mut n) = (start, 0);
    while pos < end {
        let mut h = [0u8; 2];
        f.read_exact_at(&mut h, pos).expect("read the image");
        pos += 2 + (u16::from_le_bytes(h) & 0x7fff) as u64;
        n += 1;
    }
    assert_eq!(pos, end, "metadata blocks overrun their table");
    n
}

/// The number of metadata blocks of the inode table and of the directory table of the image
/// at `path` (at offset 0), counted from the superblock's table positions and the blocks' own
/// headers. The directory table ends where the first block of the next table (fragment, export
/// or id, whichever comes first) starts.
pub fn inode_and_directory_blocks(path: &Path) -> (u64, u64) {
    let f = File::open(path).expect("open the image");
    let mut sb = [0u8; 96];
    f.read_exact_at(&mut sb, 0).expect("read the superblock");
    let field = |at: usize| u64::from_le_bytes(sb[at..at + 8].try_into().unwrap());
    let fragments = u32::from_le_bytes(sb[16..20].try_into().unwrap());
    let (id_table, inode_table, dir_table, fragment_table, export_table) =
        (field(48), field(64), field(72), field(80), field(88));
    let mut dir_end = u64_at(&f, id_table);
    if fragments > 0 {
        dir_end = dir_end.min(u64_at(&f, fragment_table));
    }
    if export_table != u64::MAX {
        dir_end = dir_end.min(u64_at(&f, export_table));
    }
    (
        metadata_blocks_in(&f, inode_table, dir_table),
        metadata_blocks_in(&f, dir_table, dir_end),
    )
}
