//! Many images at once and many attach/detach cycles: 69 images attached in parallel, and
//! 200 attach/detach cycles that must leave descriptors, threads and memory where they were.

use super::*;

#[test]
fn serves_69_images_attached_in_parallel() {
    if !testkit::can_mount() {
        return;
    }
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 69);
    let mut config = String::from("cache = \"64MiB\"\n");
    for (_, img, mnt) in &images {
        config += &image_entry(img, mnt, "");
    }
    let started = Instant::now();
    let mut daemon = Daemon::start(scratch.path(), "many", &config);
    daemon.wait_ready(Duration::from_secs(60));
    eprintln!("69 images ready in {:?}", started.elapsed());
    // READY=1 comes only once every image answers.
    let mounted = mounts_under(&scratch.path().join("mnt"));
    assert_eq!(mounted.len(), 69, "{mounted:?}\n{}", daemon.stderr());
    // Ready means each root has answered a listing, which the kernel keeps: listing every root
    // now (what a booting host does next) reaches no daemon thread, and shows the source's
    // names.
    let requests = |status: &Value| -> u64 {
        status["images"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["requests"].as_u64().unwrap())
            .sum()
    };
    let before = requests(&daemon.status());
    for (src, _, mnt) in &images {
        let names = |dir: &Path| {
            let mut n: Vec<_> = fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            n.sort();
            n
        };
        assert_eq!(names(mnt), names(src), "{}", mnt.display());
    }
    assert_eq!(
        requests(&daemon.status()),
        before,
        "listing the roots after READY=1 reached the daemon"
    );
    std::thread::scope(|s| {
        for half in images.chunks(35) {
            s.spawn(move || {
                for (src, _, mnt) in half {
                    assert_same_tree(src, mnt);
                }
            });
        }
    });
    let status = daemon.status();
    let listed = status["images"].as_array().unwrap();
    assert_eq!(listed.len(), 69, "{status}");
    for (_, img, mnt) in &images {
        let entry = listed
            .iter()
            .find(|i| Path::new(i["mountpoint"].as_str().unwrap()) == mnt)
            .unwrap_or_else(|| panic!("{} missing from status", mnt.display()));
        assert_eq!(entry["health"], "ok", "{entry}");
        assert_eq!(entry["errors"], 0, "{entry}");
        assert_eq!(Path::new(entry["image"].as_str().unwrap()), img.as_path());
        assert!(
            entry["cache"]["data"]["loads"].as_u64().unwrap() > 0,
            "{entry}"
        );
    }
    // One budget for all: every image reports the shared 48 MiB data tier (3/4 of 64 MiB).
    assert_eq!(
        status["shared_cache"]["data"]["capacity_bytes"],
        48u64 << 20,
        "{status}"
    );
    daemon.terminate();
}

/// The footprint once it is back to `baseline`'s descriptors and threads, or after 15 s.
fn footprint_back_to(pid: i32, baseline: (usize, u64, u64)) -> (usize, u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let now = footprint(pid);
        if (now.0, now.1) == (baseline.0, baseline.1) || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Detaches `mnt`, retrying for a while if it is busy: the other tests of this binary fork
/// (mksquashfs, clients), and a child between fork and exec holds copies of this process's
/// descriptors, among them a file just opened on `mnt`.
fn detach_when_idle(daemon: &Daemon, mnt: &Path) -> Value {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let answer = daemon.detach(mnt);
        let busy = answer["message"]
            .as_str()
            .is_some_and(|m| m.contains("busy"));
        if !busy || Instant::now() > deadline {
            return answer;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn attach_detach_200_times_does_not_grow() {
    if !testkit::can_mount() {
        return;
    }
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 1);
    let (src, img, mnt) = &images[0];
    let expected = fs::read(src.join("d/data.bin")).unwrap();
    // A detached image's blocks leave the shared cache (forget_image), but the allocator may
    // keep the memory they used; a small budget bounds that, so growth here means a leak.
    let daemon = Daemon::ready(scratch.path(), "cycle", "cache = \"4MiB\"\n");
    let mut baseline = None;
    let mut fds_at_baseline = Vec::new();
    let started = Instant::now();
    for cycle in 0..200 {
        let answer = daemon.attach(img, mnt);
        assert_eq!(answer["result"], "ok", "cycle {cycle}: {answer}");
        assert!(mount_id(mnt).is_some(), "cycle {cycle}: not mounted");
        // Read through the mount so every cycle opens, reads and closes a file.
        let file = fs::File::open(mnt.join("d/data.bin")).unwrap();
        let mut got = vec![0; 4096];
        file.read_exact_at(&mut got, (cycle * 1237) as u64).unwrap();
        let at = cycle * 1237;
        assert_eq!(got, expected[at..at + 4096], "cycle {cycle}");
        drop(file);
        let answer = detach_when_idle(&daemon, mnt);
        assert_eq!(answer["result"], "ok", "cycle {cycle}: {answer}");
        assert_eq!(mount_id(mnt), None, "cycle {cycle}: still mounted");
        if cycle == 19 {
            baseline = Some(settled_footprint(daemon.pid()));
            fds_at_baseline = fd_targets(daemon.pid());
        }
    }
    let baseline = baseline.unwrap();
    let (fds0, threads0, rss0) = baseline;
    let (fds, threads, rss) = footprint_back_to(daemon.pid(), baseline);
    eprintln!(
        "200 cycles in {:?}; after 20: {fds0} fds, {threads0} threads, {} KiB RSS; \
         after 200: {fds} fds, {threads} threads, {} KiB RSS",
        started.elapsed(),
        rss0 >> 10,
        rss >> 10
    );
    if (fds, threads) != (fds0, threads0) {
        // Seen rarely on a loaded machine (+1 to +3 descriptors after 180 cycles, back to the
        // baseline on rerun): show what differs, by descriptor number, for whoever chases it.
        let now = fd_targets(daemon.pid());
        for fd in now.iter().filter(|f| !fds_at_baseline.contains(f)) {
            let info = fs::read_to_string(format!("/proc/{}/fdinfo/{}", daemon.pid(), fd.0));
            eprintln!("daemon descriptor new since cycle 20: {fd:?} {info:?}");
        }
        for fd in fds_at_baseline.iter().filter(|f| !now.contains(f)) {
            eprintln!("daemon descriptor gone since cycle 20: {fd:?}");
        }
        eprintln!(
            "daemon threads: {:?}\ndaemon stderr:\n{}",
            thread_names(daemon.pid()),
            daemon.stderr()
        );
    }
    // A leak of anything a cycle opens would show as about one descriptor per cycle (180
    // here); a straggler or two on a loaded machine is not that.
    assert!(
        fds <= fds0 + 2,
        "descriptors grew from {fds0} to {fds} over 180 cycles"
    );
    assert_eq!(threads, threads0, "threads grew");
    assert!(
        rss <= rss0 + (8 << 20),
        "RSS grew from {rss0} to {rss} bytes"
    );
    assert!(mounts_under(scratch.path()).is_empty());
    assert_eq!(daemon.status()["images"].as_array().unwrap().len(), 0);
    daemon.terminate();
}
