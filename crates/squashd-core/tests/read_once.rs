//! `FileReader::read_once_at` (blocks decompressed straight into the caller's buffer, not
//! cached) gives the bytes of the files mksquashfs packed, for files of every size class
//! (empty, shorter than a block, exact block multiples, a block multiple and a tail end in a
//! fragment or in a block of its own, sparse), whole or in ranges that start and end inside
//! blocks; with blocks already in the data cache or not, through the compressed tier, with
//! uncompressed blocks, and with a data cache too small to hold a file.

use squashd_core::{CacheBudgets, FileKind, Image, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use testkit::{Built, TreeOptions};

/// The regular files under `root`: their paths relative to it, and their bytes.
fn files_of(root: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                dirs.push(entry.path());
            } else if kind.is_file() {
                let rel = entry.path().strip_prefix(root).unwrap().to_owned();
                let bytes = std::fs::read(entry.path()).unwrap();
                out.push((rel.as_os_str().as_bytes().to_vec(), bytes));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn read_once_gives_every_file_whole_and_in_ranges() {
    if !testkit::have_squashfs_tools() {
        testkit::skip("mksquashfs and unsquashfs are not installed");
        return;
    }
    let built = Built::new(&TreeOptions {
        many_entries: 20,
        ..TreeOptions::default()
    });
    let files = files_of(&built.src);
    let block = 131072u64;
    // Every size class the tree is built to have, so that none is left out unseen.
    let sizes: Vec<u64> = files.iter().map(|(_, b)| b.len() as u64).collect();
    assert!(sizes.contains(&0), "an empty file");
    assert!(
        sizes.iter().any(|&s| s > 0 && s < block),
        "a file under a block"
    );
    assert!(sizes.contains(&block), "a file of exactly one block");
    assert!(
        sizes.iter().any(|&s| s > block && s % block == 0),
        "a block multiple"
    );
    assert!(
        sizes.iter().any(|&s| s > block && s % block != 0),
        "blocks and a tail"
    );
    let images = [
        built.image("zstd", &["-comp", "zstd"]),
        // Tail ends in blocks of their own.
        built.image("zstd-nofrag", &["-comp", "zstd", "-no-fragments"]),
        // lz4 stores incompressible blocks as they are.
        built.image("lz4", &["-comp", "lz4"]),
    ];
    let budgets = [
        ("default", CacheBudgets::default()),
        (
            "compressed tier",
            CacheBudgets::default().with_compressed(8 << 20),
        ),
        ("tiny", CacheBudgets::new(1 << 20, 256 << 10)),
    ];
    for path in &images {
        for (name, budget) in &budgets {
            let image = Image::open(path, &OpenOptions::default().with_budgets(*budget)).unwrap();
            for (rel, want) in &files {
                let ctx = format!(
                    "{} ({name} caches): {}",
                    path.display(),
                    String::from_utf8_lossy(rel)
                );
                let inode = image.resolve_path(rel).unwrap();
                assert_eq!(inode.kind, FileKind::File, "{ctx}");
                let reader = image.open_file(&inode).unwrap();
                // Whole, twice: the second read finds what the first left in the caches (the
                // tail end's fragment block), with stale bytes in the buffer.
                for pass in 0..2 {
                    let mut got = vec![0xa5u8; want.len() + 7];
                    let n = reader.read_once_at(0, &mut got).unwrap();
                    assert_eq!(n, want.len(), "{ctx} pass {pass}");
                    assert!(got[..n] == want[..], "{ctx} pass {pass}: bytes differ");
                    assert!(
                        got[n..].iter().all(|&b| b == 0xa5),
                        "{ctx}: wrote past the end"
                    );
                }
                // Ranges starting and ending inside blocks, and one past the end.
                let len = want.len() as u64;
                for (at, n) in [
                    (1, len),
                    (len / 3, len / 2),
                    (block - 1, block + 2),
                    (len, 5),
                ] {
                    let at = at.min(len);
                    let end = (at + n).min(len);
                    let mut got = vec![0u8; n as usize];
                    let read = reader.read_once_at(at, &mut got).unwrap();
                    assert_eq!(read as u64, end - at, "{ctx} at {at}");
                    assert!(
                        got[..read] == want[at as usize..end as usize],
                        "{ctx}: {n} bytes at {at} differ"
                    );
                }
            }
            // Blocks the data cache holds are copied from it: read every file through the
            // cache first, then once.
            for (rel, want) in &files {
                let reader = image.open_file(&image.resolve_path(rel).unwrap()).unwrap();
                let mut cached = vec![0u8; want.len()];
                assert_eq!(reader.read_at(0, &mut cached).unwrap(), want.len());
                let mut got = vec![0u8; want.len()];
                assert_eq!(reader.read_once_at(0, &mut got).unwrap(), want.len());
                assert!(
                    got == *want,
                    "{}: bytes differ after a cached read",
                    path.display()
                );
            }
        }
    }
}

#[test]
fn read_once_does_not_fill_the_data_cache() {
    if !testkit::have_squashfs_tools() {
        testkit::skip("mksquashfs and unsquashfs are not installed");
        return;
    }
    // Four full blocks of varied bytes and no tail end: nothing a whole read needs is shared.
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..4 * 131072u32).map(|i| (i * 7 / 3) as u8).collect();
    let path = testkit::image_of_files(dir.path(), &[("f", &data)], &["-comp", "zstd"]);
    let image = Image::open(&path, &OpenOptions::default()).unwrap();
    let reader = image.open_file(&image.resolve_path(b"f").unwrap()).unwrap();
    let mut got = vec![0u8; data.len()];
    assert_eq!(reader.read_once_at(0, &mut got).unwrap(), data.len());
    assert!(got == data);
    let stats = image.stats();
    assert_eq!(stats.data.loads, 4, "{stats:?}");
    assert_eq!(stats.data.entries, 0, "read once, yet cached: {stats:?}");
    // A read through the cache keeps the blocks; a read once then copies them, loading none.
    assert_eq!(reader.read_at(0, &mut got).unwrap(), data.len());
    assert_eq!(image.stats().data.entries, 4);
    got.fill(0);
    assert_eq!(reader.read_once_at(0, &mut got).unwrap(), data.len());
    assert!(got == data);
    let stats = image.stats();
    assert_eq!(stats.data.loads, 8, "{stats:?}");
    assert_eq!(stats.data.hits, 4, "{stats:?}");
}

#[test]
fn read_once_takes_cached_blocks_out_and_their_buffers_hold_the_next_blocks_loaded() {
    if !testkit::have_squashfs_tools() {
        testkit::skip("mksquashfs and unsquashfs are not installed");
        return;
    }
    // Two files of four full blocks each, with different bytes: `g`'s blocks are loaded into
    // the buffers `f`'s blocks leave behind, which must then hold `g`'s bytes, not `f`'s.
    let dir = tempfile::tempdir().unwrap();
    let f: Vec<u8> = (0..4 * 131072u32).map(|i| (i * 7 / 3) as u8).collect();
    let g: Vec<u8> = (0..4 * 131072u32).map(|i| (i / 5 + i % 11) as u8).collect();
    let path = testkit::image_of_files(dir.path(), &[("f", &f), ("g", &g)], &["-comp", "zstd"]);
    let image = Image::open(&path, &OpenOptions::default()).unwrap();
    let open = |name: &[u8]| image.open_file(&image.resolve_path(name).unwrap()).unwrap();
    let (reader_f, reader_g) = (open(b"f"), open(b"g"));
    let mut got = vec![0u8; f.len()];
    // Read ahead, as a worker would: through the cache.
    assert_eq!(reader_f.read_at(0, &mut got).unwrap(), f.len());
    assert_eq!(image.stats().data.entries, 4);
    got.fill(0);
    assert_eq!(reader_f.read_once_at(0, &mut got).unwrap(), f.len());
    assert!(got == f);
    let stats = image.stats();
    assert_eq!(
        stats.data.entries, 0,
        "blocks read once still cached: {stats:?}"
    );
    assert_eq!((stats.data.loads, stats.data.hits), (4, 4), "{stats:?}");
    assert_eq!(
        stats.data.evictions, 0,
        "taken out is not evicted: {stats:?}"
    );
    // `g` through the cache, into `f`'s old buffers; then again from the cache.
    for round in 0..2 {
        got.fill(0);
        assert_eq!(reader_g.read_at(0, &mut got).unwrap(), g.len());
        assert!(got == g, "round {round}: g's bytes differ");
    }
    for (index, chunk) in g.chunks(131072).enumerate() {
        assert!(reader_g.chunk_cached(index as u64));
        let mut block = vec![0u8; chunk.len()];
        reader_g.read_at(index as u64 * 131072, &mut block).unwrap();
        assert!(block == chunk, "block {index} of g differs");
    }
    // And `f` again, decompressed straight into the caller's buffer.
    got.fill(0);
    assert_eq!(reader_f.read_once_at(0, &mut got).unwrap(), f.len());
    assert!(got == f);
}
