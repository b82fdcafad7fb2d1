//! The ring's idle start under the daemon: an image nobody uses holds one ring entry per CPU
//! (one queue thread), and only an image that gets busy grows its per-CPU queues; `status`
//! shows each mount's ring entries and memory. Runs where the kernel has FUSE over io_uring (as
//! root: `enable_uring` is turned on for the test and restored); else it prints why it is
//! skipped.

use super::*;
use testkit::uring::{possible_cpus, RingOn};

fn ring_of(daemon: &Daemon, mnt: &Path) -> (u64, u64) {
    let entry = daemon.image_status(mnt);
    assert_eq!(entry["transport"], "io-uring", "{entry}");
    (
        entry["ring_entries"].as_u64().unwrap(),
        entry["ring_memory_bytes"].as_u64().unwrap(),
    )
}

#[test]
fn idle_images_hold_one_ring_entry_per_cpu_and_a_busy_one_grows_per_cpu_queues() {
    if !testkit::can_mount() {
        return;
    }
    let ring = match RingOn::take() {
        Ok(ring) => ring,
        Err(reason) => return testkit::skip(&reason),
    };
    let cpus = possible_cpus();
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 3);
    let mut config = "uring = \"on\"\n".to_string();
    for (_, img, mnt) in &images {
        config += &image_entry(img, mnt, "fuse");
    }
    let mut daemon = Daemon::start(scratch.path(), "uring-idle", &config);
    daemon.wait_ready(Duration::from_secs(30));
    // Ready (each root stated and listed): every mount on its idle start.
    let idle: Vec<(u64, u64)> = images.iter().map(|(_, _, m)| ring_of(&daemon, m)).collect();
    for (entries, memory) in &idle {
        assert_eq!(*entries, cpus, "{idle:?}");
        // One entry per CPU, each at least one 128 KiB payload: the idle queue's buffers.
        assert!(*memory >= cpus * (128 << 10), "{idle:?}");
        assert!(*memory < cpus * (129 << 10) + (64 << 10), "{idle:?}");
    }
    // The first image gets busy: 400 lookups of names it does not have (each one request).
    let (_, _, busy) = &images[0];
    for k in 0..400 {
        assert!(fs::symlink_metadata(busy.join(format!("nope-{k}"))).is_err());
    }
    // Its per-CPU queues (RING_CPU_QUEUE_DEPTH entries each, one thread per CPU) come on top
    // of the idle start's; the others stay idle.
    let grown = (1 + u64::from(squashd_fuse::server::RING_CPU_QUEUE_DEPTH)) * cpus;
    let deadline = Instant::now() + Duration::from_secs(10);
    while ring_of(&daemon, busy).0 < grown && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let (entries, memory) = ring_of(&daemon, busy);
    assert_eq!(entries, grown);
    // One queue thread per CPU holds them all (`fuse-uring-N`; a thread per entry would add
    // `fuse-uring-N.K`), beside each image's idle start thread (`fuse-uring`).
    let pid = i32::try_from(daemon.child.id()).unwrap();
    let names = thread_names(pid);
    let per_cpu = names.iter().filter(|n| is_cpu_queue_thread(n)).count();
    assert_eq!(per_cpu as u64, cpus, "{names:?}");
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("fuse-uring-") && n.contains('.')),
        "{names:?}"
    );
    assert_eq!(
        names.iter().filter(|n| *n == "fuse-uring").count(),
        images.len(),
        "{names:?}"
    );
    assert!(memory >= 2 * idle[0].1, "{memory} {idle:?}");
    for (_, _, mnt) in &images[1..] {
        assert_eq!(ring_of(&daemon, mnt), idle[1]);
    }
    let status = daemon.status();
    assert_eq!(
        status["ring_memory_bytes"].as_u64().unwrap(),
        memory + idle[1].1 + idle[2].1,
        "{status}"
    );
    // Both kinds of queue threads answer right: every image reads as unsquashfs extracts it.
    for (i, (_, img, mnt)) in images.iter().enumerate() {
        let dest = scratch.path().join(format!("ref{i}"));
        testkit::unsquashfs_extract(img, &dest);
        let expected = testkit::walk_disk(&dest);
        testkit::assert_records_eq(&expected, &testkit::walk_disk(mnt), &format!("image {i}"));
    }
    daemon.terminate();
    drop(ring);
}

/// `fuse-uring-N`: the queue thread of CPU N.
fn is_cpu_queue_thread(name: &str) -> bool {
    name.strip_prefix("fuse-uring-")
        .is_some_and(|cpu| !cpu.is_empty() && cpu.bytes().all(|b| b.is_ascii_digit()))
}
