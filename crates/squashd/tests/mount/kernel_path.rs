//! `squashd mount` on the kernel path (EROFS over a blob file system).

use super::*;

/// `squashd mount` on the kernel path: `-o kernel` (and the rule, for a root `allow_other`
/// mount) gives an EROFS mount that shows what the kernel's squashfs shows, with `subdir=` and
/// `uid=`/`gid=` applied; `-o fuse` keeps FUSE; options the kernel path cannot honour are usage
/// errors; umount ends the process and leaves no blob file system behind.
#[test]
fn kernel_path_mounts_show_what_the_kernel_squashfs_shows() {
    if !testkit::can_mount_erofs() {
        return;
    }
    let built = Built::new(&TreeOptions::default());
    let image = built.image("zstd", &["-comp", "zstd"]);
    let (reference_root, kernel) = built.reference(&image, "zstd");
    let expected = testkit::walk_disk(&reference_root);

    let mnt = built.scratch("mnt-kernel");
    let guard = mount(&image, &mnt, "kernel");
    assert_eq!(fs_type(&mnt).as_deref(), Some("erofs"));
    testkit::assert_records_eq(
        &expected,
        &testkit::walk_disk(&mnt),
        "squashd mount -o kernel",
    );
    let daemons = daemons_of(&mnt);
    assert_eq!(daemons.len(), 1, "{daemons:?}");
    let blob_dir = PathBuf::from(format!("/run/squashd/mount-{}", daemons[0]));
    assert_eq!(fs_type(&blob_dir).as_deref(), Some("fuse.squashd-blobs"));
    testkit::umount(&mnt);
    wait_for_no_daemon(&mnt);
    assert!(!blob_dir.exists(), "{} left behind", blob_dir.display());
    drop(guard);

    // Killed before it could clean up, it leaves an EROFS mount on a dead blob file system;
    // the next kernel-path mount clears both.
    let guard = mount(&image, &mnt, "kernel");
    let pid = daemons_of(&mnt)[0];
    let dead_blobs = PathBuf::from(format!("/run/squashd/mount-{pid}"));
    // SAFETY: kill has no memory-safety preconditions; the pid is the mount's process.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    wait_for_no_daemon(&mnt);
    assert_eq!(
        fs_type(&mnt).as_deref(),
        Some("erofs"),
        "the dead mount went away by itself"
    );
    let other = built.scratch("mnt-kernel-other");
    let other_guard = mount(&image, &other, "kernel");
    assert!(
        fs_type(&mnt).is_none(),
        "the dead kernel-path mount is still there"
    );
    assert!(!dead_blobs.exists(), "{} left behind", dead_blobs.display());
    testkit::umount(&other);
    wait_for_no_daemon(&other);
    drop((guard, other_guard));

    // subdir= and the owner overrides, against the same directory of the reference.
    let sub = built.scratch("mnt-kernel-sub");
    let _sub_guard = mount(&image, &sub, "kernel,subdir=dup,uid=4321,gid=8765");
    let mut want = testkit::walk_disk(&reference_root.join("dup"));
    for r in &mut want {
        r.uid = 4321;
        r.gid = 8765;
    }
    testkit::assert_records_eq(
        &want,
        &testkit::walk_disk(&sub),
        "-o kernel,subdir=dup,uid,gid",
    );
    testkit::umount(&sub);
    wait_for_no_daemon(&sub);

    // The rule: a root allow_other mount takes the kernel path; -o fuse keeps FUSE.
    let auto = built.scratch("mnt-auto");
    let _auto_guard = mount(&image, &auto, "allow_other");
    assert_eq!(fs_type(&auto).as_deref(), Some("erofs"));
    testkit::umount(&auto);
    wait_for_no_daemon(&auto);
    let _fuse_guard = mount(&image, &auto, "allow_other,fuse");
    assert_eq!(fs_type(&auto).as_deref(), Some("fuse.squashd"));
    testkit::umount(&auto);
    wait_for_no_daemon(&auto);

    // What the kernel path cannot do is said, as a usage error.
    let out = squashd_mount(&image, &auto, "kernel,timeout=5");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("timeout="),
        "{out:?}"
    );
    let out = squashd_mount(&image, &auto, "kernel,fuse");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(!is_mounted(&auto));
    if let Some(k) = kernel {
        testkit::umount(&k);
    }
}
