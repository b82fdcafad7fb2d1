//! `FileReader::preload_chunk` (what read-ahead workers call: decompress a chunk's block into
//! the data cache unless it is cached or being loaded) leaves every chunk of every file in the
//! cache, decompressed once, with the bytes mksquashfs packed; `chunk_cached` and
//! `chunk_loading` say so; with no data cache budget nothing is loaded ahead.

use squashd_core::{CacheBudgets, FileKind, Image, OpenOptions};
use testkit::{Built, TreeOptions};

#[test]
fn preloaded_chunks_are_cached_once_and_read_back() {
    if !testkit::have_squashfs_tools() {
        testkit::skip("mksquashfs and unsquashfs are not installed");
        return;
    }
    let built = Built::new(&TreeOptions::default());
    let path = built.image("zstd", &["-comp", "zstd"]);
    let image = Image::open(&path, &OpenOptions::default()).unwrap();
    let mut files = Vec::new();
    let mut dirs = vec![image.root().unwrap()];
    while let Some(dir) = dirs.pop() {
        for entry in image.read_dir(&dir).unwrap() {
            let inode = image.inode(entry.id).unwrap();
            match entry.kind {
                FileKind::Directory => dirs.push(inode),
                FileKind::File => files.push(inode),
                _ => {}
            }
        }
    }
    assert!(files.len() > 3, "the tree has files");
    let before = image.stats().data;
    let mut chunks = 0;
    for inode in &files {
        let reader = image.open_file(inode).unwrap();
        for index in 0..reader.chunk_count() {
            assert!(
                reader.preload_chunk(index).unwrap(),
                "inode {}",
                inode.number
            );
            assert!(reader.chunk_cached(index), "inode {}", inode.number);
            assert!(!reader.chunk_loading(index), "inode {}", inode.number);
            chunks += 1;
        }
    }
    let loaded = image.stats().data;
    assert!(chunks > 0);
    // Each block decompressed at most once (tail ends share fragment blocks: fewer loads).
    assert!(loaded.loads - before.loads <= chunks, "{loaded:?}");
    // Again: every chunk is found in the cache, nothing decompressed; the bytes are the files'.
    for inode in &files {
        let reader = image.open_file(inode).unwrap();
        let mut got = vec![0u8; reader.size() as usize];
        for index in 0..reader.chunk_count() {
            assert!(reader.preload_chunk(index).unwrap());
        }
        assert_eq!(reader.read_at(0, &mut got).unwrap(), got.len());
        let mut want = vec![0u8; got.len()];
        let fresh = Image::open(&path, &OpenOptions::default()).unwrap();
        let fresh_reader = fresh.open_file(&fresh.inode(inode.id).unwrap()).unwrap();
        assert_eq!(fresh_reader.read_at(0, &mut want).unwrap(), want.len());
        assert!(got == want, "inode {}: bytes differ", inode.number);
    }
    assert_eq!(
        image.stats().data.loads,
        loaded.loads,
        "nothing decompressed again"
    );
    // No data cache: nothing could be kept, so nothing is loaded ahead.
    let uncached = Image::open(
        &path,
        &OpenOptions::default().with_budgets(CacheBudgets::new(1 << 20, 0)),
    )
    .unwrap();
    let reader = files
        .iter()
        .map(|i| uncached.open_file(&uncached.inode(i.id).unwrap()).unwrap())
        .find(|r| r.size() > 0)
        .unwrap();
    assert!(!reader.preload_chunk(0).unwrap());
    assert_eq!(uncached.stats().data.loads, 0);
}
