//! `-o uring=`: FUSE over io_uring on a real mount, with the kernel's `enable_uring` turned on
//! for the test and restored after it (also when it fails), through testkit's process-wide
//! guards, which the tests of this binary that run on both transports share.

use super::*;
use testkit::uring::{RingOff, RingOn};

/// The ring's guard (see `testkit::uring`), or None with the reason printed.
fn ring_on() -> Option<RingOn> {
    if !testkit::can_mount() {
        return None;
    }
    RingOn::take().map_err(|reason| testkit::skip(&reason)).ok()
}

/// The one image of this mount's status.
fn image_status(socket: &Path) -> serde_json::Value {
    let status = status_json(socket);
    let images = status["images"].as_array().unwrap();
    assert_eq!(images.len(), 1, "{status}");
    images[0].clone()
}

/// Mounts `image` on a new scratch directory `name` with `options`, checks that the mount is of
/// `fs_type` and its walk matches `expected`, and gives the mount's status (taken before it is
/// unmounted again).
fn walked_status(
    built: &Built,
    image: &Path,
    name: &str,
    options: &str,
    fs_type_shown: &str,
    expected: &[testkit::Record],
) -> serde_json::Value {
    let mnt = built.scratch(name);
    let socket = built.scratch(&format!("{name}.sock"));
    let guard = mount(
        image,
        &mnt,
        &format!("{options},control={}", socket.display()),
    );
    assert_eq!(fs_type(&mnt).as_deref(), Some(fs_type_shown), "{options}");
    testkit::assert_records_eq(
        expected,
        &testkit::walk_disk(&mnt),
        &format!("squashd mount -o {options}"),
    );
    let status = image_status(&socket);
    testkit::umount(&mnt);
    wait_for_no_daemon(&mnt);
    drop(guard);
    status
}

/// A zstd image of the default tree, its walk through the reference (the kernel's own mount of
/// it where the test can mount, else unsquashfs's extraction), and the guard that unmounts
/// that reference when the test ends, also if it fails.
fn zstd_image_and_reference(built: &Built) -> (PathBuf, Vec<testkit::Record>, Option<MountGuard>) {
    let image = built.image("zstd", &["-comp", "zstd"]);
    let (reference_root, kernel) = built.reference(&image, "zstd");
    let expected = testkit::walk_disk(&reference_root);
    (image, expected, kernel.map(MountGuard))
}

/// The status of a FUSE-path mount of `image` with `uring=` set to `uring`, walked and checked
/// against `expected`.
fn fuse_path_status(
    built: &Built,
    image: &Path,
    uring: &str,
    expected: &[testkit::Record],
) -> serde_json::Value {
    walked_status(
        built,
        image,
        &format!("mnt-{uring}-fuse"),
        &format!("fuse,uring={uring}"),
        "fuse.squashd",
        expected,
    )
}

/// The status of a kernel-path mount of `image` with `uring=` set to `uring`, walked and
/// checked against `expected`; None (with the skip line printed) where EROFS cannot be mounted.
fn kernel_path_status(
    built: &Built,
    image: &Path,
    uring: &str,
    expected: &[testkit::Record],
) -> Option<serde_json::Value> {
    if !testkit::can_mount_erofs() {
        return None;
    }
    let name = format!("mnt-{uring}-kernel");
    let status = walked_status(
        built,
        image,
        &name,
        &format!("allow_other,uring={uring}"),
        "erofs",
        expected,
    );
    assert_eq!(status["engine"], "kernel", "{status}");
    Some(status)
}

#[test]
fn uring_on_serves_the_fuse_path_and_the_blob_fs_over_the_ring() {
    let Some(_uring) = ring_on() else {
        return;
    };
    let built = Built::new(&TreeOptions::default());
    let (image, expected, _reference) = zstd_image_and_reference(&built);

    let status = fuse_path_status(&built, &image, "on", &expected);
    assert_eq!(status["transport"], "io-uring", "{status}");
    assert!(
        status["ring_memory_bytes"].as_u64().unwrap() > 0,
        "{status}"
    );
    // The walk's lookups, listings and reads came over the ring, not /dev/fuse.
    let over_ring = status["ring_requests"].as_u64().unwrap();
    assert!(over_ring >= expected.len() as u64, "{status}");

    // The kernel path (root's default) with uring=on: the blob file system takes the ring.
    let Some(status) = kernel_path_status(&built, &image, "on", &expected) else {
        return;
    };
    assert_eq!(status["transport"], "io-uring", "{status}");
    assert!(status["ring_requests"].as_u64().unwrap() > 0, "{status}");
}

/// `auto` takes the faster transport: the ring for a FUSE-path mount, /dev/fuse for the kernel
/// path's blob file system, whose reads are slower over the ring.
#[test]
fn uring_auto_takes_the_ring_for_the_fuse_path_only() {
    let Some(_uring) = ring_on() else {
        return;
    };
    let built = Built::new(&TreeOptions::default());
    let (image, expected, _reference) = zstd_image_and_reference(&built);

    let status = fuse_path_status(&built, &image, "auto", &expected);
    assert_eq!(status["transport"], "io-uring", "{status}");
    assert!(status["ring_requests"].as_u64().unwrap() > 0, "{status}");

    let Some(status) = kernel_path_status(&built, &image, "auto", &expected) else {
        return;
    };
    assert_eq!(status["transport"], "dev-fuse", "{status}");
    assert_eq!(status["ring_requests"].as_u64(), Some(0), "{status}");
    assert_eq!(status["ring_memory_bytes"].as_u64(), Some(0), "{status}");
}

#[test]
fn uring_on_without_the_kernels_ring_fails_with_how_to_enable_it() {
    if !testkit::can_mount() {
        return;
    }
    let _uring = match RingOff::take() {
        Ok(off) => off,
        Err(reason) => return testkit::skip(&reason),
    };
    let built = Built::new(&TreeOptions::default());
    let image = built.image("gzip", &["-comp", "gzip"]);
    let mnt = built.scratch("mnt-uring-off");
    fs::create_dir_all(&mnt).unwrap();
    let out = squashd_mount(&image, &mnt, "fuse,uring=on");
    let _guard = MountGuard(mnt.clone());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!is_mounted(&mnt), "mounted without the ring");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("fuse.enable_uring=1"), "{stderr}");
    assert!(
        stderr.contains("echo 1 > /sys/module/fuse/parameters/enable_uring"),
        "{stderr}"
    );

    // The default (off) mounts over /dev/fuse.
    let socket = built.scratch("uring-off.sock");
    let guard = mount(&image, &mnt, &format!("fuse,control={}", socket.display()));
    let status = image_status(&socket);
    assert_eq!(status["transport"], "dev-fuse", "{status}");
    assert_eq!(status["ring_memory_bytes"], 0, "{status}");
    testkit::umount(&mnt);
    wait_for_no_daemon(&mnt);
    drop(guard);
}

/// `len` bytes that do not compress, the same for the same seed.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fastrand::Rng::with_seed(seed).fill(&mut v);
    v
}

/// Waits (10 s at most) until `mnt` is mounted.
fn wait_mounted(mnt: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !is_mounted(mnt) {
        assert!(Instant::now() < deadline, "{} never mounted", mnt.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_with_reads_in_flight_ends_the_daemon_on_both_transports() {
    if !testkit::can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // 2 MiB of 128 KiB blocks, more than one ring payload buffer (reads over the ring are capped
    // at 128 KiB), read with O_DIRECT so that every read reaches the daemon.
    let content = noise(2 << 20, 7);
    let image = testkit::image_of_files(dir.path(), &[("big", &content)], &["-b", "128K"]);
    for transport in testkit::uring::transports() {
        let mnt = dir.path().join(format!("mnt-{}", transport.uring_option()));
        fs::create_dir_all(&mnt).unwrap();
        let _guard = MountGuard(mnt.clone());
        let mut daemon = Command::new(SQUASHD)
            .arg("mount")
            .arg(&image)
            .arg(&mnt)
            .arg("-f")
            .arg("-o")
            .arg(format!("fuse,uring={}", transport.uring_option()))
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        wait_mounted(&mnt);
        // Readers that open the file again and again, each read 1 MiB, and stop when the file
        // is gone (once the mount is detached, the path is the empty directory below).
        let readers: Vec<_> = (0..4)
            .map(|_| {
                let (path, content) = (mnt.join("big"), content.clone());
                std::thread::spawn(move || {
                    let mut reads = 0u64;
                    let mut buf = vec![0u8; 1 << 20];
                    loop {
                        use std::os::unix::fs::{FileExt, OpenOptionsExt};
                        let Ok(file) = fs::OpenOptions::new()
                            .read(true)
                            .custom_flags(libc::O_DIRECT)
                            .open(&path)
                        else {
                            return reads;
                        };
                        for at in [0usize, 1 << 20] {
                            match file.read_at(&mut buf, at as u64) {
                                Ok(n) => {
                                    assert_eq!(&buf[..n], &content[at..at + n], "at {at}");
                                    reads += 1;
                                }
                                // The connection ended under the read: allowed, no hang.
                                Err(_) => return reads,
                            }
                        }
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = daemon.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = daemon.kill();
                panic!("{transport:?}: the daemon did not end within 20 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "{transport:?}: {status}");
        assert!(!is_mounted(&mnt), "{transport:?}: still mounted");
        let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
        assert!(
            reads > 0,
            "{transport:?}: no read was answered before SIGTERM"
        );
    }
}

#[test]
fn many_mounts_at_once_on_both_transports() {
    if !testkit::can_mount() {
        return;
    }
    let built = Built::new(&TreeOptions::default());
    let image = built.image("gzip", &["-comp", "gzip"]);
    let (reference_root, kernel) = built.reference(&image, "gzip");
    let _reference = kernel.map(MountGuard);
    let expected = testkit::walk_disk(&reference_root);
    for transport in testkit::uring::transports() {
        let option = transport.uring_option();
        let mounts: Vec<(PathBuf, PathBuf, MountGuard)> = (0..6)
            .map(|i| {
                let mnt = built.scratch(&format!("mnt-many-{option}-{i}"));
                let socket = built.scratch(&format!("many-{option}-{i}.sock"));
                let opts = format!("fuse,uring={option},control={}", socket.display());
                let guard = mount(&image, &mnt, &opts);
                (mnt, socket, guard)
            })
            .collect();
        // Every mount walked at once, from a thread each.
        std::thread::scope(|scope| {
            let walks: Vec<_> = mounts
                .iter()
                .map(|(mnt, _, _)| scope.spawn(|| testkit::walk_disk(mnt)))
                .collect();
            for walk in walks {
                let what = format!("one of 6 mounts at once, uring={option}");
                testkit::assert_records_eq(&expected, &walk.join().unwrap(), &what);
            }
        });
        for (mnt, socket, guard) in mounts {
            let status = image_status(&socket);
            assert_eq!(status["transport"], transport.status_name(), "{status}");
            testkit::umount(&mnt);
            wait_for_no_daemon(&mnt);
            drop(guard);
        }
    }
}
