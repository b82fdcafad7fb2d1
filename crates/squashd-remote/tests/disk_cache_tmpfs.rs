//! The budget holds at every instant, not only between operations: the cache lives on a tmpfs
//! exactly as large as its budget, so a single moment with more bytes on disk than the budget
//! would fail a write with ENOSPC, which the cache counts as a write error.
//!
//! A test binary of its own: it starts processes (mount, umount), and a fork holds a copy of every
//! descriptor of the test process until its exec, which would make another test's lock look held.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use squashd_remote::disk_cache::{DiskCache, UnitKey};

const PAGE: usize = 4096;

/// Mounts a tmpfs of `bytes` on `dir` for as long as it lives.
struct Tmpfs<'a>(&'a Path);

impl<'a> Tmpfs<'a> {
    fn mount(dir: &'a Path, bytes: usize) -> Result<Tmpfs<'a>, String> {
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={bytes},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .status()
            .map_err(|error| format!("cannot run mount: {error}"))?;
        status
            .success()
            .then_some(Tmpfs(dir))
            .ok_or_else(|| format!("mount -t tmpfs failed: {status}"))
    }
}

impl Drop for Tmpfs<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).status();
    }
}

#[test]
fn the_budget_holds_at_every_instant() {
    let mnt = tempfile::tempdir().unwrap();
    let budget_pages = 16;
    let tmpfs = match Tmpfs::mount(mnt.path(), budget_pages * PAGE) {
        Ok(tmpfs) => tmpfs,
        Err(why) => {
            println!("skipped: {why} (mounting a tmpfs needs root)");
            return;
        }
    };
    // The tmpfs bites: one page more than its size cannot be written.
    assert!(fs::write(
        mnt.path().join("probe"),
        vec![0u8; (budget_pages + 1) * PAGE]
    )
    .is_err());
    fs::remove_file(mnt.path().join("probe")).unwrap();

    let dir = mnt.path().join("cache");
    let cache = DiskCache::open(&dir, (budget_pages * PAGE) as u64).unwrap();
    let object: Arc<str> = Arc::from("https://images.example/usr.sqfs\0\"e1\"");
    // Entries of whole pages (1 to 4), so that their lengths are what the tmpfs charges.
    let unit_len = |index: u64| (index as usize % 4 + 1) * PAGE - 28 - object.len();
    let unit = |index: u64| vec![index as u8; unit_len(index)];
    // Puts only: a reader holding an evicted file open keeps its pages until it closes it, which
    // no file system avoids (the documentation of the module says so).
    std::thread::scope(|s| {
        for thread in 0..6 {
            let (cache, object) = (&cache, &object);
            s.spawn(move || {
                let mut rng = fastrand::Rng::with_seed(thread);
                for _ in 0..400 {
                    let index = rng.u64(..100);
                    cache.put(
                        &UnitKey {
                            object: object.clone(),
                            index,
                        },
                        &unit(index),
                    );
                }
            });
        }
    });
    let stats = cache.stats();
    assert_eq!(
        stats.write_errors, 0,
        "a write found the tmpfs full: {stats:?}"
    );
    assert!(stats.evictions > 100, "{stats:?}");
    let mut found = 0;
    for index in 0..100 {
        if let Some(bytes) = cache.get(&UnitKey {
            object: object.clone(),
            index,
        }) {
            assert_eq!(bytes, unit(index), "unit {index}");
            found += 1;
        }
    }
    assert_eq!(found, stats.entries);
    drop(cache);
    drop(tmpfs);
}
