//! `FileReader::read_chunk_into`, the path of readers that read each block once (extraction,
//! `cat`): the same bytes as the cached path and as the source file, every data block
//! decompressed once and counted, and nothing added to the data cache but shared fragments.

use squashd_core::{ChunkRead, FileKind, Image, Inode, OpenOptions};
use testkit::{Built, TreeOptions};

fn files(image: &Image, dir: &Inode, path: &mut Vec<u8>, out: &mut Vec<(Vec<u8>, Inode)>) {
    for (entry, inode) in image.read_dir_plus(dir).unwrap() {
        let len = path.len();
        path.push(b'/');
        path.extend_from_slice(&entry.name);
        match inode.kind {
            FileKind::File => out.push((path.clone(), inode)),
            FileKind::Directory => files(image, &inode, path, out),
            _ => {}
        }
        path.truncate(len);
    }
}

#[test]
fn read_once_path_matches_the_source_and_leaves_the_cache_alone() {
    if !testkit::have_squashfs_tools() {
        return;
    }
    let built = Built::new(&TreeOptions::default());
    let path = built.image("streaming-zstd-4k", &["-comp", "zstd", "-b", "4096"]);
    let image = Image::open(&path, &OpenOptions::default()).unwrap();
    let mut all = Vec::new();
    files(&image, &image.root().unwrap(), &mut Vec::new(), &mut all);
    assert!(all.len() > 20, "the fixture has files");

    let mut buf = Vec::new();
    let mut compared = 0;
    let mut stream_all = |check: bool| {
        for (name, inode) in &all {
            let reader = image.open_file(inode).unwrap();
            let mut content = Vec::new();
            for i in 0..reader.chunk_count() {
                match reader.read_chunk_into(i, &mut buf).unwrap() {
                    ChunkRead::Hole(len) => content.resize(content.len() + len, 0),
                    ChunkRead::Data => content.extend_from_slice(&buf),
                    ChunkRead::Cached(chunk) => content.extend_from_slice(chunk.bytes()),
                }
            }
            // Names that are not UTF-8 are compared by the conformance tests instead.
            let Ok(relative) = std::str::from_utf8(&name[1..]) else {
                continue;
            };
            if check {
                let expected = std::fs::read(built.src.join(relative)).unwrap();
                assert!(content == expected, "{relative} differs from the source");
                compared += 1;
            }
        }
    };
    stream_all(true);
    let first = image.stats().data;
    stream_all(false);
    let second = image.stats().data;
    assert!(compared > 20, "{compared} files compared");
    // Only fragment blocks (tail ends shared by files) entered the data cache...
    assert!(first.entries > 0 && first.entries <= image.superblock().fragment_count as u64);
    assert_eq!(second.entries, first.entries);
    // ...so a second pass decompresses every data block again and no fragment block.
    let block_loads = first.loads - first.entries;
    assert!(block_loads > 0, "{first:?}");
    assert_eq!(
        second.loads - first.loads,
        block_loads,
        "{first:?} {second:?}"
    );
    // The cached path gives the same bytes, and now fills the cache.
    for (_, inode) in all.iter().take(10) {
        let reader = image.open_file(inode).unwrap();
        for i in 0..reader.chunk_count() {
            let cached = reader.chunk(i).unwrap();
            match reader.read_chunk_into(i, &mut buf).unwrap() {
                ChunkRead::Hole(len) => assert!(cached.is_hole() && cached.len() == len),
                ChunkRead::Data => assert_eq!(cached.bytes(), &buf[..]),
                ChunkRead::Cached(lent) => assert_eq!(cached.bytes(), lent.bytes()),
            }
        }
    }
}
