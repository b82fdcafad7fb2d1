//! Kernel-path images served by the daemon beside FUSE ones.

use super::*;

/// Kernel-path images in a daemon: from the config and through attach, beside a FUSE one;
/// status tells the paths apart; detach and SIGTERM leave nothing; a daemon restarted after a
/// crash replaces the dead kernel-path mount it finds with a live one.
#[test]
fn kernel_path_images_attach_detach_and_survive_a_restart() {
    if !testkit::can_mount() {
        return;
    }
    let has_erofs = fs::read_to_string("/proc/filesystems").is_ok_and(|t| t.contains("erofs"))
        || Command::new("modprobe")
            .args(["-q", "erofs"])
            .status()
            .is_ok_and(|s| s.success());
    if !has_erofs {
        eprintln!("SKIPPED: the kernel has no EROFS");
        return;
    }
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 3);
    let [(src0, img0, mnt0), (src1, img1, mnt1), (src2, img2, mnt2)] = &images[..] else {
        unreachable!()
    };
    let config = image_entry(img0, mnt0, "kernel") + &image_entry(img1, mnt1, "");
    let mut daemon = Daemon::ready(scratch.path(), "kernel", &config);
    assert_eq!(mount_type(mnt0).as_deref(), Some("erofs"));
    assert_eq!(mount_type(mnt1).as_deref(), Some("fuse.squashd"));
    assert_same_tree(src0, mnt0);
    assert_same_tree(src1, mnt1);
    let entry = daemon.image_status(mnt0);
    assert_eq!(entry["engine"], "kernel", "{entry}");
    assert!(
        entry["translation"]["inodes"].as_u64().unwrap() > 3,
        "{entry}"
    );
    assert!(
        entry["requests"].as_u64().unwrap() > 0,
        "blob reads not counted: {entry}"
    );
    assert_eq!(daemon.image_status(mnt1)["engine"], "fuse");
    // The same figures for Prometheus, by image and path.
    let prom = squashd_as(0, &daemon.socket, &["status", "--prometheus"]);
    assert!(prom.status.success(), "{prom:?}");
    let prom = String::from_utf8_lossy(&prom.stdout);
    let line = prom
        .lines()
        .find(|l| {
            l.starts_with("squashd_image_requests_total{")
                && l.contains(&format!("mountpoint=\"{}\"", mnt0.display()))
        })
        .unwrap_or_else(|| panic!("no requests line for {}:\n{prom}", mnt0.display()));
    assert!(line.contains("engine=\"kernel\""), "{line}");
    let counted = daemon.image_status(mnt0)["requests"].as_u64().unwrap();
    assert_eq!(
        line.rsplit(' ').next().unwrap().parse::<u64>().unwrap(),
        counted,
        "{line}"
    );
    let attached = daemon
        .request(json!({"op": "attach", "image": img2, "mountpoint": mnt2, "options": ["kernel"]}));
    assert_eq!(attached["result"], "ok", "{attached}");
    assert_same_tree(src2, mnt2);
    assert_eq!(daemon.detach(mnt2)["result"], "ok");
    assert_eq!(mount_id(mnt2), None);

    // A crash leaves the EROFS mount on a dead blob file system; the next daemon clears it.
    daemon.child.kill().unwrap();
    daemon.child.wait().unwrap();
    std::mem::forget(daemon);
    let restarted = Daemon::ready(scratch.path(), "kernel-again", &config);
    assert_same_tree(src0, mnt0);
    assert_same_tree(src1, mnt1);
    let log = restarted.stderr();
    assert!(log.contains("a dead daemon left there"), "{log}");
    // mnt0, mnt1 and the blob file system: one mount each, no live one over a dead one.
    let mut left = mounts_under(scratch.path());
    left.sort();
    assert_eq!(left.len(), 3, "{left:?}");
    restarted.terminate();
}
