//! `-o uring=`: FUSE over io_uring on a real mount, with the kernel's `enable_uring` turned on
//! for the test and restored after it (also when it fails). Other tests of this binary run
//! meanwhile with the default (`uring=off`), so they stay on /dev/fuse.

use super::*;
use std::sync::{Mutex, MutexGuard};

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Serializes this file's tests: they set one machine-wide parameter to different values.
static PARAMETER: Mutex<()> = Mutex::new(());

/// `enable_uring` set to a value for the guard's life, the old value restored on drop.
struct EnableUring {
    old: String,
    _lock: MutexGuard<'static, ()>,
}

impl EnableUring {
    /// None (with the reason printed) where the test cannot run.
    fn set(value: &str) -> Option<EnableUring> {
        if !testkit::can_mount() {
            return None;
        }
        if !Path::new(ENABLE_URING).exists() {
            println!("SKIPPED: {ENABLE_URING} does not exist (a kernel before 6.14?)");
            return None;
        }
        let lock = PARAMETER.lock().unwrap_or_else(|e| e.into_inner());
        let old = fs::read_to_string(ENABLE_URING).unwrap().trim().to_string();
        fs::write(ENABLE_URING, value).unwrap();
        Some(EnableUring { old, _lock: lock })
    }
}

impl Drop for EnableUring {
    fn drop(&mut self) {
        let _ = fs::write(ENABLE_URING, &self.old);
    }
}

/// The one image of this mount's status.
fn image_status(socket: &Path) -> serde_json::Value {
    let status = status_json(socket);
    let images = status["images"].as_array().unwrap();
    assert_eq!(images.len(), 1, "{status}");
    images[0].clone()
}

#[test]
fn uring_on_serves_the_fuse_path_and_the_blob_fs_over_the_ring() {
    let Some(_uring) = EnableUring::set("1") else {
        return;
    };
    let built = Built::new(&TreeOptions::default());
    let image = built.image("zstd", &["-comp", "zstd"]);
    let (reference_root, kernel) = built.reference(&image, "zstd");
    let expected = testkit::walk_disk(&reference_root);
    // The reference: unmounted when the test ends, also if it fails.
    let _reference = kernel.map(MountGuard);

    let mnt = built.scratch("mnt-uring");
    let socket = built.scratch("uring.sock");
    let guard = mount(
        &image,
        &mnt,
        &format!("fuse,uring=on,control={}", socket.display()),
    );
    testkit::assert_records_eq(
        &expected,
        &testkit::walk_disk(&mnt),
        "squashd mount -o fuse,uring=on",
    );
    let status = image_status(&socket);
    assert_eq!(status["transport"], "io-uring", "{status}");
    assert!(
        status["ring_memory_bytes"].as_u64().unwrap() > 0,
        "{status}"
    );
    // The walk's lookups, listings and reads came over the ring, not /dev/fuse.
    let over_ring = status["ring_requests"].as_u64().unwrap();
    assert!(over_ring >= expected.len() as u64, "{status}");
    testkit::umount(&mnt);
    wait_for_no_daemon(&mnt);
    drop(guard);

    // The kernel path (root's default) with uring=on: the blob file system takes the ring.
    if !testkit::can_mount_erofs() {
        return;
    }
    let mnt = built.scratch("mnt-uring-kernel");
    let socket = built.scratch("uring-kernel.sock");
    let guard = mount(
        &image,
        &mnt,
        &format!("allow_other,uring=on,control={}", socket.display()),
    );
    assert_eq!(fs_type(&mnt).as_deref(), Some("erofs"));
    testkit::assert_records_eq(
        &expected,
        &testkit::walk_disk(&mnt),
        "squashd mount (kernel path) with the ring on",
    );
    let status = image_status(&socket);
    assert_eq!(status["engine"], "kernel", "{status}");
    assert_eq!(status["transport"], "io-uring", "{status}");
    assert!(status["ring_requests"].as_u64().unwrap() > 0, "{status}");
    testkit::umount(&mnt);
    wait_for_no_daemon(&mnt);
    drop(guard);
}

#[test]
fn uring_on_without_the_kernels_ring_fails_with_how_to_enable_it() {
    let Some(_uring) = EnableUring::set("0") else {
        return;
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
