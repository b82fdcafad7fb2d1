//! What a disk cache entry belongs to, and who may read it: two remote images whose addresses
//! differ only in their query, served by a real nginx on 127.0.0.1 without ETag or
//! Last-Modified, each read through one disk cache whole; and the cache's modes under umask 0.
//!
//! A test binary of its own: it sets the process's umask, which every thread shares.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use squashd_core::source::Source;
use squashd_remote::disk_cache::DiskCache;
use squashd_remote::{Location, RemoteOptions, RemoteSource};
use testkit::http::Nginx;

/// `/img?x=N` answers the file `img-N.sqfs`, with neither of the validators a remote image's
/// version is taken from: the version is then the size alone.
const NO_VALIDATORS: &str = r#"
        location = /img {
            etag off;
            add_header Last-Modified "";
            try_files /img-$arg_x.sqfs =404;
        }"#;

/// An image of `seed`'s content: two files of noise (which does not compress, so two seeds give
/// images of the same size) of several 64 KiB units, and a small one.
fn image(dir: &Path, seed: u64) -> Vec<u8> {
    let src = dir.join(format!("src-{seed}"));
    fs::create_dir_all(&src).unwrap();
    let mut rng = fastrand::Rng::with_seed(seed);
    for (name, len) in [("a", 300_000), ("b", 200_000), ("c", 1000)] {
        let bytes: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
        fs::write(src.join(name), bytes).unwrap();
    }
    let out = dir.join(format!("img-{seed}.sqfs"));
    testkit::mksquashfs(
        &src,
        &out,
        &["-comp", "gzip", "-all-time", "0", "-mkfs-time", "0"],
    );
    fs::read(out).unwrap()
}

/// Reads the whole object at `url` through `cache`, 10,000 bytes at a time (reads that straddle
/// units); the bytes, and how many units came from the disk cache.
fn read_through(cache: &std::sync::Arc<DiskCache>, url: &str) -> (Vec<u8>, u64) {
    let options = RemoteOptions {
        unit_size: 64 << 10,
        read_ahead_threads: 0,
        disk_cache: Some(cache.clone()),
        ..RemoteOptions::default()
    };
    let source = RemoteSource::open(&Location::parse(url).unwrap(), &options).unwrap();
    let len = source.len().unwrap();
    let mut bytes = vec![0u8; len as usize];
    for (i, chunk) in bytes.chunks_mut(10_000).enumerate() {
        source.read_exact_at(chunk, i as u64 * 10_000).unwrap();
    }
    (bytes, source.stats().disk_hits)
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

#[test]
fn addresses_that_differ_in_their_query_never_share_entries_and_the_cache_is_private() {
    if !testkit::have_squashfs_tools() {
        return;
    }
    let served = tempfile::tempdir().unwrap();
    let (one, two) = (image(served.path(), 1), image(served.path(), 2));
    assert_eq!(one.len(), two.len(), "the test needs images of one size");
    assert_ne!(one, two);
    let nginx = match Nginx::serve_with(served.path(), NO_VALIDATORS) {
        Ok(nginx) => nginx,
        Err(why) => return testkit::skip(&format!("nginx cannot serve: {why}")),
    };

    // Whatever the umask, nothing of the cache is readable by others.
    rustix::process::umask(rustix::fs::Mode::empty());
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("cache");
    let cache = DiskCache::open(&dir, 64 << 20).unwrap();

    let (url_one, url_two) = (nginx.url("img?x=1"), nginx.url("img?x=2"));
    let (read, _) = read_through(&cache, &url_one);
    assert!(read == one, "image 1 read through an empty cache");
    let (read, _) = read_through(&cache, &url_two);
    assert!(
        read == two,
        "image 2 read through a cache holding image 1 of the same size and no validator: \
         {} of {} bytes differ",
        read.iter().zip(&two).filter(|(a, b)| a != b).count(),
        two.len()
    );
    // The cache still serves an address it has seen (the fix is not "cache nothing").
    let (read, disk_hits) = read_through(&cache, &url_one);
    assert!(read == one, "image 1 read again");
    assert!(disk_hits > 0, "image 1's units come from the disk cache");

    // Private to the daemon's user: 0700 directories, 0600 files, set whatever the umask.
    assert_eq!(mode(&dir), 0o700, "{}", dir.display());
    assert_eq!(mode(&dir.join("units")), 0o700);
    assert_eq!(mode(&dir.join("lock")), 0o600);
    let entries: Vec<_> = fs::read_dir(dir.join("units"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(entries.len() > 2, "{entries:?}");
    for entry in &entries {
        assert_eq!(mode(entry), 0o600, "{}", entry.display());
    }
    // The address's query is a secret (a presigned URL's signature): no entry holds it.
    for entry in &entries {
        let bytes = fs::read(entry).unwrap();
        assert!(
            !bytes
                .windows(b"x=1".len())
                .any(|w| w == b"x=1" || w == b"x=2"),
            "{} holds the address's query",
            entry.display()
        );
    }
    drop(cache);

    // A cache directory left open to others by an older version is made private at open.
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(dir.join("units"), fs::Permissions::from_mode(0o777)).unwrap();
    fs::set_permissions(&entries[0], fs::Permissions::from_mode(0o644)).unwrap();
    let cache = DiskCache::open(&dir, 64 << 20).unwrap();
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join("units")), 0o700);
    assert_eq!(mode(&entries[0]), 0o600);
    drop(cache);

    // One owned by another user is refused: its owner could plant or swap entries.
    if !testkit::is_root() {
        return testkit::skip("a directory owned by another user needs root to make");
    }
    rustix::fs::chown(&dir, Some(rustix::fs::Uid::from_raw(65534)), None).unwrap();
    let refused = DiskCache::open(&dir, 64 << 20).unwrap_err().to_string();
    assert!(
        refused.contains(&dir.display().to_string()) && refused.contains("owned by uid 65534"),
        "{refused}"
    );
}
