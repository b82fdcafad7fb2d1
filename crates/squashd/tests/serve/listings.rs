//! Parallel listers of one cold directory, through the daemon on both FUSE transports: each
//! gets the whole listing, `status` counts the listing requests, and once the kernel has cached
//! the listing no later lister reaches the daemon (the cache was completed and kept, short
//! answers included). The ring's half runs where the kernel has it (as root: `enable_uring` is
//! turned on for the test and restored); else it prints why it is skipped.

use super::*;
use std::sync::{Arc, Barrier};
use testkit::uring::transports;

/// Entries of the big directory.
const ENTRIES: usize = 2000;
/// Listers at once.
const LISTERS: usize = 16;

/// `LISTERS` threads list `dir` at once; each listing's names, sorted.
fn list_in_parallel(dir: &Path) -> Vec<Vec<String>> {
    let start = Arc::new(Barrier::new(LISTERS));
    let listers: Vec<_> = (0..LISTERS)
        .map(|_| {
            let (dir, start) = (dir.to_path_buf(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let mut names: Vec<String> = fs::read_dir(&dir)
                    .unwrap()
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect();
                names.sort();
                names
            })
        })
        .collect();
    listers.into_iter().map(|t| t.join().unwrap()).collect()
}

fn listings_of(daemon: &Daemon, mnt: &Path) -> (u64, u64) {
    let entry = daemon.image_status(mnt);
    (
        entry["listing_requests"].as_u64().unwrap(),
        entry["short_listings"].as_u64().unwrap(),
    )
}

#[test]
fn parallel_listers_of_a_cold_directory_get_it_whole_and_later_ones_cost_nothing() {
    if !testkit::can_mount() || !testkit::have_squashfs_tools() {
        return;
    }
    let scratch = Scratch::new();
    let src = scratch.path().join("src");
    let big = src.join("big");
    fs::create_dir_all(&big).unwrap();
    let mut expected: Vec<String> = (0..ENTRIES)
        .map(|i| format!("entry-{i:05}-with-a-longer-name"))
        .collect();
    for name in &expected {
        fs::write(big.join(name), b"x").unwrap();
    }
    expected.sort();
    let img = scratch.path().join("big.sqfs");
    let made = Command::new("mksquashfs")
        .arg(&src)
        .arg(&img)
        .args(["-noappend", "-quiet", "-no-progress"])
        .status()
        .unwrap();
    assert!(made.success());
    for transport in transports() {
        let name = format!("listings-{}", transport.uring_option());
        let mnt = scratch.path().join(&name);
        fs::create_dir_all(&mnt).unwrap();
        let config = image_entry(
            &img,
            &mnt,
            &format!("fuse,uring={}", transport.uring_option()),
        );
        let daemon = Daemon::ready(scratch.path(), &name, &config);
        let (before, _) = listings_of(&daemon, &mnt);
        for (i, names) in list_in_parallel(&mnt.join("big")).iter().enumerate() {
            assert!(
                names == &expected,
                "{name}: lister {i} got {} names",
                names.len()
            );
        }
        let (cold, short) = listings_of(&daemon, &mnt);
        // At least one fill (its entries, then the end); at most every lister twice over.
        assert!(
            cold - before >= 2 && cold - before <= 4 * LISTERS as u64,
            "{name}: {} listing requests",
            cold - before
        );
        // The kernel's cache of the listing is complete and kept: later listers are answered
        // from it, short answers or not.
        for names in list_in_parallel(&mnt.join("big")) {
            assert!(names == expected, "{name}: {} names", names.len());
        }
        assert_eq!(listings_of(&daemon, &mnt), (cold, short), "{name}");
        let unlinked = daemon.image_status(&mnt)["unlinked_listings"]
            .as_u64()
            .unwrap();
        println!(
            "{name}: {} listing requests, {short} short, {unlinked} unlinked",
            cold - before
        );
        daemon.terminate();
    }
}
