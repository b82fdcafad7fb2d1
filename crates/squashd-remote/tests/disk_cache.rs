//! The disk cache on a real directory: its budget checked by listing the directory, LRU order,
//! restarts, damaged entries, leftovers of a crash. The directory lock is in `disk_cache_lock.rs`.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use squashd_remote::disk_cache::{DiskCache, UnitKey};

const URL: &str = "https://images.example/fleet/usr.sqfs";
/// Bytes of an entry file before the identity (the format in `disk_cache/entry.rs`).
const HEADER: u64 = 28;

fn key(etag: &str, index: u64) -> UnitKey {
    UnitKey {
        object: Arc::from(format!("{URL}\0\"{etag}\"")),
        index,
    }
}

/// A unit's bytes, different for every key and length.
fn unit(key: &UnitKey, len: usize) -> Vec<u8> {
    let seed = key
        .object
        .bytes()
        .fold(key.index.wrapping_mul(0x9e37_79b9), |h, b| {
            h.wrapping_mul(31) ^ b as u64
        });
    (0..len)
        .map(|i| (seed.wrapping_add(i as u64 * 7) >> 3) as u8)
        .collect()
}

fn entry_len(key: &UnitKey, len: usize) -> u64 {
    HEADER + key.object.len() as u64 + len as u64
}

/// Every file in the units directory, with its length.
fn listing(dir: &Path) -> Vec<(String, u64)> {
    let mut files: Vec<_> = fs::read_dir(dir.join("units"))
        .unwrap()
        .map(|item| {
            let item = item.unwrap();
            (
                item.file_name().into_string().unwrap(),
                item.metadata().unwrap().len(),
            )
        })
        .collect();
    files.sort();
    files
}

/// The entry file holding unit `index` (found by the index in its header).
fn file_of(dir: &Path, index: u64) -> PathBuf {
    let found: Vec<_> = listing(dir)
        .into_iter()
        .map(|(name, _)| dir.join("units").join(name))
        .filter(|path| fs::read(path).unwrap().get(8..16) == Some(&index.to_le_bytes()[..]))
        .collect();
    assert_eq!(found.len(), 1, "one file for unit {index}: {found:?}");
    found.into_iter().next().unwrap()
}

fn set_age(path: &Path, age: Duration) {
    fs::File::open(path)
        .unwrap()
        .set_modified(SystemTime::now() - age)
        .unwrap();
}

fn mtime_age(path: &Path) -> Duration {
    SystemTime::now()
        .duration_since(fs::metadata(path).unwrap().modified().unwrap())
        .unwrap_or_default()
}

#[test]
fn the_budget_holds_under_puts_from_several_threads() {
    let dir = tempfile::tempdir().unwrap();
    let budget = 40_000;
    let cache = DiskCache::open(dir.path(), budget).unwrap();
    // A unit's length depends on its key alone, as for real units: a put of a unit already cached
    // is skipped, and a get must still return exactly these bytes.
    let len_of = |k: &UnitKey| (k.index as usize * 7919 + k.object.len()) % 9000 + 1;
    // Rounds of concurrent puts and gets; between rounds, with every thread joined, the directory
    // is listed (a listing made while files come and go could add up files that never coexisted).
    for round in 0..15 {
        std::thread::scope(|s| {
            for thread in 0..6 {
                let cache = &cache;
                s.spawn(move || {
                    let mut rng = fastrand::Rng::with_seed(round * 100 + thread);
                    for _ in 0..40 {
                        let k = key(["a", "b", "c"][rng.usize(..3)], rng.u64(..60));
                        if rng.bool() {
                            cache.put(&k, &unit(&k, len_of(&k)));
                        } else if let Some(bytes) = cache.get(&k) {
                            assert_eq!(
                                bytes,
                                unit(&k, len_of(&k)),
                                "unit {} of {:?}",
                                k.index,
                                k.object
                            );
                        }
                    }
                });
            }
        });
        let files = listing(dir.path());
        let on_disk: u64 = files.iter().map(|(_, len)| len).sum();
        let stats = cache.stats();
        assert!(
            on_disk <= budget,
            "round {round}: {on_disk} bytes on disk, budget {budget}"
        );
        assert_eq!(on_disk, stats.bytes_used, "round {round}: {files:?}");
        assert_eq!(files.len() as u64, stats.entries);
        assert!(
            files.iter().all(|(name, _)| !name.starts_with("tmp.")),
            "{files:?}"
        );
    }
    let stats = cache.stats();
    assert!(
        stats.hits > 0 && stats.misses > 0 && stats.evictions > 0,
        "{stats:?}"
    );
    assert_eq!((stats.corrupt, stats.write_errors), (0, 0), "{stats:?}");
    // The budget was nearly used: evictions made just enough room.
    assert!(stats.bytes_used > budget - 2 * 9100, "{stats:?}");
}

#[test]
fn the_least_recently_used_go_first() {
    let dir = tempfile::tempdir().unwrap();
    let keys: Vec<_> = (0..6).map(|i| key("e1", i)).collect();
    let cache = DiskCache::open(dir.path(), 4 * entry_len(&keys[0], 1000)).unwrap();
    for k in &keys[..4] {
        cache.put(k, &unit(k, 1000));
    }
    assert!(cache.get(&keys[0]).is_some());
    cache.put(&keys[4], &unit(&keys[4], 1000)); // the oldest is now unit 1
    assert_eq!(cache.get(&keys[1]), None);
    for k in [&keys[0], &keys[2], &keys[3], &keys[4]] {
        assert_eq!(cache.get(k), Some(unit(k, 1000)), "unit {}", k.index);
    }
    cache.put(&keys[5], &unit(&keys[5], 1000)); // the gets made unit 0 the oldest
    assert_eq!(cache.get(&keys[0]), None);
    for k in &keys[2..] {
        assert_eq!(cache.get(k), Some(unit(k, 1000)), "unit {}", k.index);
    }
    // A unit twice as large pushes out the two oldest (2 and 3; the gets above went 2, 3, 4, 5).
    let big = key("e1", 9);
    cache.put(&big, &unit(&big, 2 * 1000 + entry_len(&big, 0) as usize));
    assert_eq!((cache.get(&keys[2]), cache.get(&keys[3])), (None, None));
    assert!(
        cache.get(&keys[4]).is_some() && cache.get(&keys[5]).is_some() && cache.get(&big).is_some()
    );
    let stats = cache.stats();
    assert_eq!(
        (stats.evictions, stats.entries, stats.bytes_used),
        (4, 3, stats.budget),
        "{stats:?}"
    );
    // A unit larger than the whole budget is not cached, and evicts nothing.
    let huge = key("e1", 10);
    cache.put(&huge, &unit(&huge, stats.budget as usize));
    assert_eq!((cache.get(&huge), cache.stats().entries), (None, 3));
}

#[test]
fn a_restart_finds_the_entries_in_the_order_of_their_mtimes() {
    let dir = tempfile::tempdir().unwrap();
    let keys: Vec<_> = (0..5).map(|i| key("e1", i)).collect();
    let budget = 4 * entry_len(&keys[0], 500);
    let cache = DiskCache::open(dir.path(), budget).unwrap();
    for k in &keys[..4] {
        cache.put(k, &unit(k, 500));
    }
    drop(cache);
    // Unit 2 was used longest ago, unit 0 (the first written) more recently than it.
    for (index, minutes) in [(0, 30), (1, 20), (2, 60), (3, 10)] {
        set_age(
            &file_of(dir.path(), index),
            Duration::from_secs(minutes * 60),
        );
    }
    let cache = DiskCache::open(dir.path(), budget).unwrap();
    let stats = cache.stats();
    assert_eq!(
        (stats.entries, stats.bytes_used, stats.hits),
        (4, budget, 0),
        "{stats:?}"
    );
    cache.put(&keys[4], &unit(&keys[4], 500));
    assert_eq!(cache.get(&keys[2]), None);

    // A hit moves the mtime forward, so the order survives the next restart, but at most once a
    // minute: a second hit right after does not write the file's metadata again.
    let file0 = file_of(dir.path(), 0);
    assert_eq!(cache.get(&keys[0]), Some(unit(&keys[0], 500)));
    assert!(
        mtime_age(&file0) < Duration::from_secs(30),
        "{:?}",
        mtime_age(&file0)
    );
    set_age(&file0, Duration::from_secs(3600));
    assert!(cache.get(&keys[0]).is_some());
    assert!(
        mtime_age(&file0) > Duration::from_secs(3000),
        "touched again within a minute"
    );
    for k in [&keys[1], &keys[3], &keys[4]] {
        assert_eq!(cache.get(k), Some(unit(k, 500)), "unit {}", k.index);
    }
    drop(cache);

    // A lower budget at the next open evicts the oldest by mtime: units 0 and 1.
    for (index, minutes) in [(1, 40), (3, 5), (4, 1)] {
        set_age(
            &file_of(dir.path(), index),
            Duration::from_secs(minutes * 60),
        );
    }
    let cache = DiskCache::open(dir.path(), 2 * entry_len(&keys[0], 500)).unwrap();
    assert_eq!(listing(dir.path()).len(), 2);
    assert_eq!((cache.get(&keys[0]), cache.get(&keys[1])), (None, None));
    assert!(cache.get(&keys[3]).is_some() && cache.get(&keys[4]).is_some());
}

#[test]
fn damaged_entries_are_detected_removed_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let cache = DiskCache::open(dir.path(), 1 << 20).unwrap();
    let (k, other) = (key("e1", 0), key("e1", 1));
    cache.put(&other, &unit(&other, 3000));
    type Damage = fn(&Path, &Path);
    let damages: [(&str, Damage); 6] = [
        ("a flipped unit byte", |p, _| flip(p, 200)),
        ("a flipped header byte", |p, _| flip(p, 5)),
        ("a flipped identity byte", |p, _| {
            flip(p, HEADER as usize + 3)
        }),
        ("truncated mid-unit", |p, _| {
            fs::File::options()
                .write(true)
                .open(p)
                .unwrap()
                .set_len(1500)
                .unwrap()
        }),
        ("emptied", |p, _| fs::write(p, b"").unwrap()),
        ("another unit's file", |p, other| {
            fs::copy(other, p).unwrap();
        }),
    ];
    for (n, (what, damage)) in damages.into_iter().enumerate() {
        cache.put(&k, &unit(&k, 3000));
        damage(&file_of(dir.path(), 0), &file_of(dir.path(), 1));
        assert_eq!(cache.get(&k), None, "{what}");
        let stats = cache.stats();
        assert_eq!(stats.corrupt, n as u64 + 1, "{what}: {stats:?}");
        assert_eq!(stats.entries, 1, "{what}: {stats:?}");
        let files = listing(dir.path());
        assert_eq!(
            files.len(),
            1,
            "{what}: the damaged file is removed: {files:?}"
        );
        assert_eq!(stats.bytes_used, files[0].1);
        // Fetched again, it is cached again.
        cache.put(&k, &unit(&k, 3000));
        assert_eq!(cache.get(&k), Some(unit(&k, 3000)), "{what}");
        fs::remove_file(file_of(dir.path(), 0)).unwrap();
        assert_eq!(
            cache.get(&k),
            None,
            "{what}: removed behind the cache's back"
        );
    }
    assert_eq!(cache.get(&other), Some(unit(&other, 3000)));
    drop(cache);

    // Torn by a power loss: the rename reached the disk, the data did not (zeros). Found at the
    // first read after the restart. A file too short to be an entry is removed at open.
    let k2 = key("e1", 2);
    let cache = DiskCache::open(dir.path(), 1 << 20).unwrap();
    cache.put(&k2, &unit(&k2, 3000));
    drop(cache);
    let torn = file_of(dir.path(), 2);
    fs::write(
        &torn,
        vec![0u8; fs::metadata(&torn).unwrap().len() as usize],
    )
    .unwrap();
    let short = file_of(dir.path(), 1);
    fs::File::options()
        .write(true)
        .open(&short)
        .unwrap()
        .set_len(HEADER - 1)
        .unwrap();
    let cache = DiskCache::open(dir.path(), 1 << 20).unwrap();
    assert!(!short.exists());
    assert_eq!(cache.stats().entries, 1);
    assert_eq!(cache.get(&k2), None);
    assert_eq!(cache.stats().corrupt, 1);
    assert!(listing(dir.path()).is_empty());
}

fn flip(path: &Path, at: usize) {
    let mut bytes = fs::read(path).unwrap();
    bytes[at] ^= 0x01;
    fs::write(path, bytes).unwrap();
}

#[test]
fn leftover_temporary_files_are_removed_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let k = key("e1", 0);
    let cache = DiskCache::open(dir.path(), 1 << 20).unwrap();
    cache.put(&k, &unit(&k, 100));
    drop(cache);
    let units = dir.path().join("units");
    fs::write(units.join("tmp.0"), vec![7u8; 5000]).unwrap();
    fs::write(units.join("tmp.41"), b"half an entr").unwrap();
    fs::write(units.join("README"), b"not ours").unwrap();
    let cache = DiskCache::open(dir.path(), 1 << 20).unwrap();
    let names: Vec<_> = listing(dir.path())
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(
        names.contains(&"README".to_string()),
        "a file not the cache's is left alone: {names:?}"
    );
    assert_eq!(cache.get(&k), Some(unit(&k, 100)));
    assert_eq!(cache.stats().entries, 1);
}

#[test]
fn a_unit_of_another_etag_is_never_returned() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (key("e1", 3), key("e2", 3));
    let other_url = UnitKey {
        object: Arc::from("https://images.example/fleet/usr2.sqfs\0\"e1\""),
        index: 3,
    };
    let cache = DiskCache::open(dir.path(), 1 << 20).unwrap();
    cache.put(&old, &unit(&old, 800));
    assert_eq!(cache.get(&new), None);
    assert_eq!(cache.get(&other_url), None);
    cache.put(&new, &unit(&new, 800));
    assert_ne!(unit(&old, 800), unit(&new, 800));
    assert_eq!(cache.get(&old), Some(unit(&old, 800)));
    assert_eq!(cache.get(&new), Some(unit(&new, 800)));
    drop(cache);
    let cache = DiskCache::open(dir.path(), 1 << 20).unwrap();
    assert_eq!(cache.get(&new), Some(unit(&new, 800)));
    assert_eq!(cache.get(&old), Some(unit(&old, 800)));
    assert_eq!(cache.get(&other_url), None);
    assert_eq!(cache.stats().corrupt, 0);
}

#[test]
fn an_unusable_directory_is_a_one_line_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    fs::write(&file, b"").unwrap();
    let message = DiskCache::open(&file.join("cache"), 1 << 20)
        .unwrap_err()
        .to_string();
    assert!(
        message.starts_with(&format!(
            "disk cache {}/cache: cannot create",
            file.display()
        )),
        "{message}"
    );
    assert!(!message.contains('\n'), "{message}");
}
