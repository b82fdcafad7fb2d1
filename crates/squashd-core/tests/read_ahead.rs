//! The read-ahead policy (`squashd_core::read_ahead`) on real mksquashfs images, held to its
//! counters: a stream still gets blocks decompressed ahead and reads every one of them; files
//! read whole in a request or two, and random readers, get none; nothing is read ahead past
//! the end of a file; blocks evicted before the reader comes are counted wasted and shrink the
//! window; busy CPUs cut read-ahead to a block per thread.
//!
//! Readers go through the two entries the mount paths use: `ReadAheadPool::on_read` then
//! `FileReader::chunk` (the FUSE path, `squashd-fuse`'s files.rs) and `FileReader::read_into`
//! (the kernel path's blob). The pools run with `CpuGauge::Off` except in the test of the gauge,
//! so that what other processes on the machine do cannot change the counts.

use squashd_core::read_ahead::{CpuGauge, ReadAheadPool, ReadState};
use squashd_core::read_policy::ReadFor;
use squashd_core::{CacheBudgets, FileReader, Image, OpenOptions};
use std::time::Duration;

const BLOCK: usize = 128 << 10;

fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..len).map(|_| b"acgt"[rng.usize(..4)]).collect()
}

/// An image of `files`, zstd, 128 KiB blocks; None (after saying so) without squashfs-tools.
fn image(dir: &std::path::Path, files: &[(&str, &[u8])], data_budget: u64) -> Option<Image> {
    if !testkit::have_squashfs_tools() {
        testkit::skip("no mksquashfs");
        return None;
    }
    let path = testkit::image_of_files(dir, files, &["-comp", "zstd", "-b", "128K"]);
    let budgets = CacheBudgets::new(64 << 20, data_budget);
    Some(Image::open(&path, &OpenOptions::default().with_budgets(budgets)).unwrap())
}

/// Two workers, a window of 16 blocks, a queue of 64, and no CPU gauge: what other processes
/// on the machine do cannot change the counts.
fn quiet_pool() -> ReadAheadPool {
    ReadAheadPool::with_gauge(2, 16, 64, CpuGauge::Off)
}

fn open(image: &Image, name: &str) -> FileReader {
    image
        .open_file(&image.resolve_path(name.as_bytes()).unwrap())
        .unwrap()
}

/// Reads `reader` from `from` to its end in `BLOCK`-byte reads as the FUSE path does, pausing
/// `pause` between reads (a reader that does something with its data), and checks the bytes.
fn read_as_fuse(
    pool: &ReadAheadPool,
    state: &ReadState,
    reader: &FileReader,
    data: &[u8],
    from: usize,
    pause: Duration,
) {
    let mut buf = vec![0u8; BLOCK];
    let mut at = from;
    while at < data.len() {
        pool.on_read(state, reader, at as u64, BLOCK as u64);
        let n = reader.read_at(at as u64, &mut buf).unwrap();
        assert!(buf[..n] == data[at..at + n], "bytes at {at}");
        at += n;
        std::thread::sleep(pause);
    }
}

/// One open file read as the FUSE path reads it, on a pool of its own ([`quiet_pool`]).
struct Stream {
    pool: ReadAheadPool,
    state: ReadState,
    reader: FileReader,
}

impl Stream {
    fn open(image: &Image, name: &str) -> Stream {
        Stream {
            pool: quiet_pool(),
            state: ReadState::default(),
            reader: open(image, name),
        }
    }

    /// [`read_as_fuse`] of `data` from `from` to its end.
    fn read(&self, data: &[u8], from: usize, pause: Duration) {
        read_as_fuse(&self.pool, &self.state, &self.reader, data, from, pause);
    }

    /// Dropping the pool joins its workers, then dropping the state settles what was never
    /// read: after this the counters are final.
    fn finish(self) {
        drop((self.pool, self.state));
    }
}

/// The same through `read_into`, as the kernel path's blob reads.
fn read_as_blob(
    pool: &ReadAheadPool,
    state: &ReadState,
    reader: &FileReader,
    data: &[u8],
    step: usize,
    pause: Duration,
) {
    let mut buf = vec![0u8; step];
    let mut at = 0;
    while at < data.len() {
        let n = step.min(data.len() - at);
        let read_for = ReadFor::Reader {
            read_ahead: pool,
            state,
        };
        reader
            .read_into(at as u64, &mut buf[..n], read_for, &mut |_, _| {})
            .unwrap();
        assert!(buf[..n] == data[at..at + n], "bytes at {at}");
        at += n;
        std::thread::sleep(pause);
    }
}

#[test]
fn a_stream_gets_blocks_ahead_on_both_paths_and_reads_every_one() {
    let dir = tempfile::tempdir().unwrap();
    let data = bytes(48 * BLOCK, 1);
    let other = bytes(48 * BLOCK, 11);
    let Some(image) = image(dir.path(), &[("f", &data), ("g", &other)], 128 << 20) else {
        return;
    };
    let pool = quiet_pool();
    let state = ReadState::default();
    read_as_fuse(
        &pool,
        &state,
        &open(&image, "f"),
        &data,
        0,
        Duration::from_millis(3),
    );
    let blob_state = ReadState::default();
    read_as_blob(
        &pool,
        &blob_state,
        &open(&image, "g"),
        &other,
        64 << 10,
        Duration::from_millis(2),
    );
    // Dropping the pool joins its workers; dropping the states settles what was never read.
    drop((pool, state, blob_state));
    let stats = image.stats();
    let ra = stats.read_ahead;
    assert!(ra.loads > 0, "a stream got nothing ahead: {ra:?}");
    assert_eq!(ra.streams, 2, "{ra:?}");
    assert_eq!((ra.used, ra.wasted), (ra.loads, 0), "{ra:?}");
    // Each block decompressed once: by the reader or ahead of it, never both.
    assert_eq!(stats.data.loads, 96, "{stats:?}");
}

#[test]
fn files_read_whole_in_a_few_requests_and_random_reads_get_none() {
    let dir = tempfile::tempdir().unwrap();
    let small: Vec<Vec<u8>> = (0..24)
        .map(|i| bytes(20_000 + i * 17_000, 10 + i as u64))
        .collect();
    let big = bytes(40 * BLOCK, 2);
    let mut files: Vec<(String, &[u8])> = small
        .iter()
        .enumerate()
        .map(|(i, d)| (format!("small{i}"), d.as_slice()))
        .collect();
    files.push(("big".into(), &big));
    let named: Vec<(&str, &[u8])> = files.iter().map(|(n, d)| (n.as_str(), *d)).collect();
    let Some(image) = image(dir.path(), &named, 128 << 20) else {
        return;
    };
    let pool = quiet_pool();
    // Small files (up to 411 KB) read whole in 128 KiB requests, each on its own open file.
    for (i, d) in small.iter().enumerate() {
        let state = ReadState::default();
        let reader = open(&image, &format!("small{i}"));
        read_as_fuse(&pool, &state, &reader, d, 0, Duration::ZERO);
    }
    // 4 KiB reads at random places of the large file, on one open file.
    let reader = open(&image, "big");
    let state = ReadState::default();
    let mut rng = fastrand::Rng::with_seed(5);
    let mut page = vec![0u8; 4096];
    for _ in 0..300 {
        let at = rng.usize(..big.len() - 4096);
        pool.on_read(&state, &reader, at as u64, 4096);
        reader.read_at(at as u64, &mut page).unwrap();
        assert!(page == big[at..at + 4096]);
    }
    drop((pool, state));
    let ra = image.stats().read_ahead;
    assert_eq!((ra.loads, ra.wasted, ra.streams), (0, 0, 0), "{ra:?}");
}

#[test]
fn nothing_is_read_ahead_past_the_end_of_a_file() {
    let dir = tempfile::tempdir().unwrap();
    // Six blocks and a tail end in a fragment, then another file whose blocks follow in the
    // image: read-ahead that ran on by image position would decompress those.
    let first = bytes(6 * BLOCK + 1000, 3);
    let next = bytes(8 * BLOCK, 4);
    let Some(image) = image(dir.path(), &[("a", &first), ("b", &next)], 128 << 20) else {
        return;
    };
    // Four blocks in order make a stream of 512 KiB, to be read ahead by four: the file has
    // three chunks left (two blocks and the tail end), and they are all that is read ahead.
    let stream = Stream::open(&image, "a");
    stream.read(&first[..4 * BLOCK], 0, Duration::ZERO);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while image.stats().read_ahead.loads < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(50));
    let stats = image.stats();
    // The six blocks and the fragment block holding the tail end: nothing of "b".
    assert_eq!(stats.data.loads, 7, "{stats:?}");
    assert_eq!(stats.read_ahead.loads, 3, "{:?}", stats.read_ahead);
    // The reader goes on to the end: every block read ahead is used.
    stream.read(&first, 4 * BLOCK, Duration::ZERO);
    stream.finish();
    let stats = image.stats();
    assert_eq!(stats.data.loads, 7, "{stats:?}");
    let ra = stats.read_ahead;
    assert_eq!((ra.loads, ra.used, ra.wasted), (3, 3, 0), "{ra:?}");
}

#[test]
fn a_reader_that_stops_wastes_at_most_what_it_read_and_eviction_shrinks_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let data = bytes(64 * BLOCK, 6);
    let Some(image) = image(dir.path(), &[("f", &data)], 128 << 20) else {
        return;
    };
    // A stream of one mebibyte, then the file is closed.
    let stream = Stream::open(&image, "f");
    stream.read(&data[..8 * BLOCK], 0, Duration::from_millis(2));
    stream.finish();
    let ra = image.stats().read_ahead;
    assert!(ra.loads > 0, "{ra:?}");
    assert_eq!(ra.used + ra.wasted, ra.loads, "{ra:?}");
    assert!(ra.wasted <= 8, "more wasted than the stream read: {ra:?}");

    // A data cache of four blocks under a window of sixteen: blocks read ahead are evicted
    // before the reader comes, counted wasted, and the window shrinks.
    let small = tempfile::tempdir().unwrap();
    let Some(image) = self::image(small.path(), &[("f", &data)], 4 * BLOCK as u64) else {
        return;
    };
    let stream = Stream::open(&image, "f");
    stream.read(&data, 0, Duration::from_millis(3));
    let window = stream.pool.window_now();
    stream.finish();
    let ra = image.stats().read_ahead;
    assert!(ra.wasted > 0, "{ra:?}");
    assert_eq!(ra.used + ra.wasted, ra.loads, "{ra:?}");
    assert!(window < 16, "the window stayed at {window} with {ra:?}");
}

#[test]
fn busy_cpus_cut_read_ahead_to_a_block_per_thread() {
    let dir = tempfile::tempdir().unwrap();
    let data = bytes(48 * BLOCK, 7);
    let Some(image) = image(dir.path(), &[("f", &data)], 128 << 20) else {
        return;
    };
    // Spinning threads, four per core, make the run queue busy while the stream reads.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let spinners = 4 * squashd_core::cores();
    std::thread::scope(|s| {
        for _ in 0..spinners {
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
        }
        std::thread::sleep(Duration::from_millis(200));
        let pool = ReadAheadPool::new(2, 16, 64);
        let state = ReadState::default();
        read_as_fuse(
            &pool,
            &state,
            &open(&image, "f"),
            &data,
            0,
            Duration::from_millis(10),
        );
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let ra = image.stats().read_ahead;
    assert!(ra.busy_cuts > 0, "{ra:?}");
    // Never more than two blocks (one per thread) beyond the reader while it was cut, and the
    // stream still got some: the reader paused 10 ms a block, the threads had time.
    assert!(ra.loads > 0, "{ra:?}");
}
