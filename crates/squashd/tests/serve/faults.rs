//! Fault isolation: a damaged image fails alone, a lost stderr, a crash and a restart, an
//! image renamed over while attached, two entries on one mount point.

use super::*;

/// Overwrites the data area of the image (from the end of the superblock to the inode table)
/// with garbage, in place: the daemon keeps reading the same file.
fn corrupt_data_blocks(img: &Path) {
    let file = fs::OpenOptions::new()
        .write(true)
        .read(true)
        .open(img)
        .unwrap();
    let mut start = [0u8; 8];
    file.read_exact_at(&mut start, 64).unwrap();
    let inode_table = u64::from_le_bytes(start);
    assert!(inode_table > 96 && inode_table < file.metadata().unwrap().len());
    let garbage: Vec<u8> = (0..inode_table - 96)
        .map(|i| (i * 7 + 0xa5) as u8)
        .collect();
    file.write_all_at(&garbage, 96).unwrap();
    file.sync_all().unwrap();
}

#[test]
fn damaged_image_fails_alone_and_bad_entries_are_named() {
    if !testkit::can_mount() {
        return;
    }
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 4);
    let missing_mnt = scratch.path().join("mnt/missing");
    let typo_mnt = scratch.path().join("mnt/typo");
    let badopt_mnt = scratch.path().join("mnt/badopt");
    for m in [&missing_mnt, &typo_mnt, &badopt_mnt] {
        fs::create_dir_all(m).unwrap();
    }
    let mut config = String::new();
    for (_, img, mnt) in &images {
        config += &image_entry(img, mnt, "");
    }
    config += &image_entry(&scratch.path().join("img/nothere.sqfs"), &missing_mnt, "");
    config += &format!(
        "[[image]]\npath = {:?}\nmountpiont = {:?}\n\n",
        scratch.path().join("img/typo.sqfs").display().to_string(),
        typo_mnt.display().to_string()
    );
    config += &image_entry(&images[0].1, &badopt_mnt, "bogus_option");
    let mut daemon = Daemon::ready(scratch.path(), "faults", &config);
    let stderr = daemon.stderr();
    for named in ["nothere.sqfs", "typo.sqfs", "mountpiont", "bogus_option"] {
        assert!(stderr.contains(named), "{named} not reported:\n{stderr}");
    }
    for m in [&missing_mnt, &typo_mnt, &badopt_mnt] {
        assert_eq!(mount_id(m), None, "{} mounted", m.display());
    }
    for (_, _, mnt) in &images {
        assert!(
            mount_id(mnt).is_some(),
            "{} not mounted:\n{stderr}",
            mnt.display()
        );
    }

    // Image 2: garbage over its data blocks; image 3: truncated to its superblock.
    let (_, corrupt_img, corrupt_mnt) = &images[2];
    let (_, truncated_img, truncated_mnt) = &images[3];
    corrupt_data_blocks(corrupt_img);
    fs::OpenOptions::new()
        .write(true)
        .open(truncated_img)
        .unwrap()
        .set_len(96)
        .unwrap();
    for mnt in [corrupt_mnt, truncated_mnt] {
        for file in ["d/data.bin", "link"] {
            let got = read_with_timeout(&mnt.join(file));
            assert_eq!(
                got.as_ref().map(|v| v.len()),
                Err(&Some(libc::EIO)),
                "{}/{file}",
                mnt.display()
            );
        }
    }
    // The daemon's log names the image and what was wrong with it.
    let log = daemon.stderr();
    let named = |img: &Path| {
        log.lines()
            .any(|l| l.contains(img.to_str().unwrap()) && l.contains("at byte"))
    };
    assert!(
        named(corrupt_img),
        "no read error logged for {}:\n{log}",
        corrupt_img.display()
    );
    assert!(
        named(truncated_img),
        "no read error logged for {}:\n{log}",
        truncated_img.display()
    );
    let corrupt = daemon.image_status(corrupt_mnt);
    assert!(
        corrupt["errors"].as_u64().unwrap() > 0 && corrupt["health"] != "ok",
        "{corrupt}"
    );
    // ... and status says what the last failure was, naming the image and the byte.
    let last = corrupt["last_error"].as_str().unwrap_or_default();
    assert!(
        last.contains(corrupt_img.to_str().unwrap()) && last.contains("at byte"),
        "{corrupt}"
    );
    let truncated = daemon.image_status(truncated_mnt);
    assert!(
        truncated["health"].as_str().unwrap().contains("truncated"),
        "{truncated}"
    );
    // The others are untouched, and the daemon still serves them.
    for (src, _, mnt) in &images[..2] {
        assert_same_tree(src, mnt);
        let entry = daemon.image_status(mnt);
        assert_eq!(entry["health"], "ok", "{entry}");
        assert_eq!(entry["errors"], 0, "{entry}");
    }
    assert!(daemon.is_running());
    daemon.terminate();
}

#[test]
fn keeps_serving_when_its_stderr_is_gone() {
    if !testkit::can_mount() {
        return;
    }
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 2);
    let [a, b] = [&images[0], &images[1]];
    // stderr is a pipe nobody reads: its read end is closed before the daemon writes a line.
    let mut daemon = Daemon::start_with(
        scratch.path(),
        "no-stderr",
        &image_entry(&a.1, &a.2, ""),
        Stdio::piped(),
    );
    drop(daemon.child.stderr.take());
    // It logs how many images it attached before READY=1, and one line per attach and detach:
    // each write fails with EPIPE, and none may take the daemon down.
    daemon.wait_ready(Duration::from_secs(30));
    assert_eq!(daemon.attach(&b.1, &b.2)["result"], "ok");
    assert_same_tree(&b.0, &b.2);
    assert_eq!(daemon.detach(&b.2)["result"], "ok");
    assert_same_tree(&a.0, &a.2);
    assert!(daemon.is_running());
    daemon.terminate();
}

#[test]
fn restart_after_a_crash_reclaims_dead_mounts() {
    if !testkit::can_mount() {
        return;
    }
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 2);
    let mut config = String::new();
    for (_, img, mnt) in &images {
        config += &image_entry(img, mnt, "");
    }
    let mut crashed = Daemon::ready(scratch.path(), "crash", &config);
    crashed.child.kill().unwrap();
    crashed.child.wait().unwrap();
    // Its guard would unmount what it left: the point is that the next daemon does.
    std::mem::forget(crashed);
    // statfs reaches the (dead) daemon; a stat may be answered from the kernel's cache.
    let path = CString::new(images[0].2.as_os_str().as_bytes()).unwrap();
    let mut buf = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: a valid C string and room for one statfs.
    let rc = unsafe { libc::statfs(path.as_ptr(), buf.as_mut_ptr()) };
    let dead = std::io::Error::last_os_error();
    assert_eq!(rc, -1);
    assert_eq!(dead.raw_os_error(), Some(libc::ENOTCONN), "{dead}");
    let restarted = Daemon::ready(scratch.path(), "restart", &config);
    for (src, _, mnt) in &images {
        assert_same_tree(src, mnt);
    }
    // Each mount point holds one mount again, not a live one over a dead one.
    assert_eq!(mounts_under(scratch.path()).len(), 2);
    restarted.terminate();
}

/// An image renamed over while attached: the daemon keeps serving the file it opened, and
/// status says the path now names another file. Two config entries on one mount point: the
/// second is named in the log and skipped, the first serves.
#[test]
fn replaced_images_and_doubled_mount_points_are_reported() {
    if !testkit::can_mount() {
        return;
    }
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 3);
    let (src0, img0, mnt0) = &images[0];
    let (_, img1, _) = &images[1];
    let (_, img2, _) = &images[2];
    let config = image_entry(img0, mnt0, "") + &image_entry(img2, mnt0, "");
    let daemon = Daemon::ready(scratch.path(), "replaced", &config);
    let log = daemon.stderr();
    assert!(
        log.lines().any(|l| l.contains("image #2")
            && l.contains(img2.to_str().unwrap())
            && l.contains("already used by image #1")),
        "{log}"
    );
    assert_same_tree(src0, mnt0);
    assert_eq!(daemon.image_status(mnt0)["health"], "ok");
    let replacement = scratch.path().join("img/replacement.sqfs");
    fs::copy(img1, &replacement).unwrap();
    fs::rename(&replacement, img0).unwrap();
    let health = daemon.image_status(mnt0)["health"].clone();
    assert!(health.as_str().unwrap().contains("replaced"), "{health}");
    // Still the file opened at attach, not a mix of the two.
    assert_same_tree(src0, mnt0);
    daemon.terminate();
}
