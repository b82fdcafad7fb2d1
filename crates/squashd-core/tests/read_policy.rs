//! `FileReader::read_into`, the read policy of a reader whose page cache keeps what it reads
//! (squashd's kernel path): a block read in part goes through the data cache and is reported,
//! a block read whole streams past it, a seek is told from a stream, and a fill's read of the
//! rest of a block takes it from the cache and leaves the reading state alone.

use squashd_core::read_ahead::{ReadAheadPool, ReadState};
use squashd_core::read_policy::ReadFor;
use squashd_core::{Image, OpenOptions};

const BLOCK: usize = 128 << 10;

#[test]
fn parts_go_through_the_cache_whole_blocks_do_not_and_fills_leave_the_state_alone() {
    if !testkit::have_squashfs_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut rng = fastrand::Rng::with_seed(3);
    let data: Vec<u8> = (0..16 * BLOCK).map(|_| b"acgt"[rng.usize(..4)]).collect();
    let path = testkit::image_of_files(
        dir.path(),
        &[("f", &data)],
        &["-comp", "zstd", "-b", "128K"],
    );
    let image = Image::open(&path, &OpenOptions::default()).unwrap();
    let reader = image.open_file(&image.resolve_path(b"f").unwrap()).unwrap();
    // No read-ahead threads: every load below is the read's own.
    let read_ahead = ReadAheadPool::new(0, 16, 8);
    let state = ReadState::default();
    let for_reader = ReadFor::Reader {
        read_ahead: &read_ahead,
        state: &state,
    };
    let mut parts = Vec::new();

    // A 4 KiB read far into the file: a seek, its block read in part and kept in the cache.
    let at = 9 * BLOCK + 4096;
    let mut page = vec![0u8; 4096];
    let read = reader
        .read_into(at as u64, &mut page, for_reader, &mut |i, c| {
            parts.push((i, c.bytes().to_vec()))
        })
        .unwrap();
    assert!(page == data[at..at + 4096]);
    assert!(!read.streaming, "a read 1 MiB past the start is a seek");
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0].0, 9);
    assert!(parts[0].1 == data[9 * BLOCK..10 * BLOCK]);
    let after_seek = image.stats().data;
    assert_eq!((after_seek.loads, after_seek.entries), (1, 1));

    // The rest of the block, as a fill reads it: from the cache, and not noted as a read.
    let mut rest = vec![0u8; BLOCK - 8192];
    let fill = reader
        .read_into((at + 4096) as u64, &mut rest, ReadFor::Fill, &mut |_, _| {})
        .unwrap();
    assert!(rest == data[at + 4096..10 * BLOCK]);
    assert!(!fill.streaming);
    assert_eq!(image.stats().data.loads, 1, "the fill decompressed again");

    // The reader's next read continues its first one (the fill did not move where it stands),
    // and a whole block read in order is not kept in the cache.
    let mut next = vec![0u8; 4096];
    let read = reader
        .read_into((at + 4096) as u64, &mut next, for_reader, &mut |_, _| {})
        .unwrap();
    assert!(read.streaming);
    let mut whole = vec![0u8; BLOCK];
    let read = reader
        .read_into((10 * BLOCK) as u64, &mut whole, for_reader, &mut |_, _| {
            panic!("a block read whole is not a part")
        })
        .unwrap();
    assert!(read.streaming);
    assert!(whole == data[10 * BLOCK..11 * BLOCK]);
    let stats = image.stats().data;
    assert_eq!((stats.loads, stats.entries), (2, 1), "{stats:?}");

    // Past the end of the file: zeros.
    let mut tail = vec![7u8; 8192];
    reader
        .read_into(
            (data.len() - 4096) as u64,
            &mut tail,
            ReadFor::Fill,
            &mut |_, _| {},
        )
        .unwrap();
    assert!(tail[..4096] == data[data.len() - 4096..]);
    assert!(tail[4096..].iter().all(|&b| b == 0));
}
