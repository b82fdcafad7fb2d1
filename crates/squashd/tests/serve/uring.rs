//! The daemon on both FUSE transports: its config's `uring` is the default of images that give
//! none (from the config and attached through the socket), an image's own `uring=` wins for a
//! FUSE mount, `status` shows each mount's transport and the rings' memory, and the kernel
//! path's shared blob file system follows the daemon's `uring`, not its first image's. The
//! ring's half runs where the kernel has it (as root: `enable_uring` is turned on for the test
//! and restored, through testkit's process-wide guard); else it prints why it is skipped.

use super::*;
use testkit::uring::{transports, RingOn, Transport};

/// What unsquashfs extracts from `image` (the reference reader), walked.
fn unsquashfs_view(image: &Path, dest: &Path) -> Vec<testkit::Record> {
    testkit::unsquashfs_extract(image, dest);
    testkit::walk_disk(dest)
}

fn status_of(daemon: &Daemon, mnt: &Path) -> (String, u64, u64) {
    let entry = daemon.image_status(mnt);
    (
        entry["transport"].as_str().unwrap().to_string(),
        entry["ring_memory_bytes"].as_u64().unwrap(),
        entry["ring_requests"].as_u64().unwrap(),
    )
}

#[test]
fn the_configs_uring_serves_config_and_attached_images_on_each_transport() {
    if !testkit::can_mount() {
        return;
    }
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 3);
    let references: Vec<_> = images
        .iter()
        .enumerate()
        .map(|(i, (_, img, _))| unsquashfs_view(img, &scratch.path().join(format!("ref{i}"))))
        .collect();
    for transport in transports() {
        let name = format!("uring-{}", transport.uring_option());
        let [(_, img0, mnt0), (_, img1, mnt1), (_, img2, mnt2)] = &images[..] else {
            unreachable!()
        };
        // The daemon's `uring`; the second image asks for the other transport itself (where
        // the ring cannot be had, `auto`: still /dev/fuse, but through the option's path).
        let ring_here = testkit::uring::ring_unavailable().is_none();
        let other = match &transport {
            Transport::DevFuse if ring_here => "on",
            Transport::DevFuse => "auto",
            Transport::Ring(_) => "off",
        };
        let config = format!("uring = {:?}\n", transport.uring_option())
            + &image_entry(img0, mnt0, "fuse")
            + &image_entry(img1, mnt1, &format!("fuse,uring={other}"));
        let mut daemon = Daemon::start(scratch.path(), &name, &config);
        daemon.wait_ready(Duration::from_secs(30));
        // Attached through the socket with no options: the daemon's `uring` again.
        let answer = daemon.attach(img2, mnt2);
        assert_eq!(answer["result"], "ok", "{answer}");
        for (i, mnt) in [mnt0, mnt1, mnt2].into_iter().enumerate() {
            let walked = testkit::walk_disk(mnt);
            testkit::assert_records_eq(&references[i], &walked, &format!("{name}: {i}"));
        }
        let ring_mounts: Vec<&PathBuf> = if transport.is_ring() {
            vec![mnt0, mnt2]
        } else if ring_here {
            // `enable_uring` is on: the ring's guard in `transports()` is yielded after this.
            vec![mnt1]
        } else {
            vec![]
        };
        let mut rings = 0;
        for mnt in [mnt0, mnt1, mnt2] {
            let (shown, memory, requests) = status_of(&daemon, mnt);
            if ring_mounts.contains(&mnt) {
                assert_eq!(shown, "io-uring", "{name}: {}", mnt.display());
                assert!(memory > 0 && requests > 0, "{name}: {memory} {requests}");
                rings += memory;
            } else {
                assert_eq!(shown, "dev-fuse", "{name}: {}", mnt.display());
                assert_eq!((memory, requests), (0, 0), "{name}: {}", mnt.display());
            }
        }
        let status = daemon.status();
        assert_eq!(status["ring_memory_bytes"], rings, "{name}: {status}");
        let table = squashd_as(0, &daemon.socket, &["status"]);
        let table = String::from_utf8_lossy(&table.stdout);
        assert_eq!(
            table.contains("of rings in all"),
            rings > 0,
            "{name}:\n{table}"
        );
        daemon.terminate();
    }
}

#[test]
fn the_kernel_paths_blob_fs_follows_the_daemons_uring_not_its_first_image() {
    if !testkit::can_mount_erofs() {
        return;
    }
    let ring = match RingOn::take() {
        Ok(ring) => ring,
        Err(reason) => {
            testkit::skip(&reason);
            return;
        }
    };
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 2);
    let [(_, img0, mnt0), (_, img1, mnt1)] = &images[..] else {
        unreachable!()
    };
    let reference = unsquashfs_view(img0, &scratch.path().join("ref0"));
    // The first kernel-path image asks for /dev/fuse; the daemon says the ring.
    let config = "uring = \"on\"\n".to_string() + &image_entry(img0, mnt0, "kernel,uring=off");
    let mut daemon = Daemon::start(scratch.path(), "blob", &config);
    daemon.wait_ready(Duration::from_secs(30));
    assert_eq!(mount_type(mnt0).as_deref(), Some("erofs"));
    testkit::assert_records_eq(&reference, &testkit::walk_disk(mnt0), "kernel path");
    let answer = daemon.request(json!({"op": "attach", "image": img1, "mountpoint": mnt1,
        "options": ["kernel"]}));
    assert_eq!(answer["result"], "ok", "{answer}");
    for mnt in [mnt0, mnt1] {
        let (shown, memory, _) = status_of(&daemon, mnt);
        assert_eq!(shown, "io-uring", "{}", mnt.display());
        assert!(memory > 0);
    }
    // The blob file system's rings, counted once for its two images.
    let status = daemon.status();
    assert_eq!(
        status["ring_memory_bytes"],
        status_of(&daemon, mnt0).1,
        "{status}"
    );
    let log = daemon.stderr();
    assert!(
        log.contains("uring=off does not apply to the kernel path"),
        "{log}"
    );
    daemon.terminate();
    drop(ring);
}

#[test]
fn a_config_with_a_wrong_uring_is_refused_naming_the_values() {
    let config = "uring = \"sometimes\"\n";
    let err = format!(
        "{:#}",
        squashd_config_error(config).expect("a wrong uring value is refused")
    );
    assert!(err.contains("uring") && err.contains("\"auto\""), "{err}");
}

/// The error `squashd serve` gives for `config` (None if it started).
fn squashd_config_error(config: &str) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.toml");
    fs::write(
        &path,
        format!("socket = {:?}\n{config}", dir.path().join("s.sock")),
    )
    .unwrap();
    let mut child = Command::new(SQUASHD)
        .args(["serve", "-c"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            assert!(!status.success());
            return Some(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
