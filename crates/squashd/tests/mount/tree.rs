//! What a mount shows, compared with the kernel's squashfs mount of the same image, with and
//! without subdir=, offset= and owner options.

use super::*;

fn statvfs(path: &Path) -> libc::statvfs {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    st
}

#[test]
fn mounted_tree_matches_the_kernels_squashfs() {
    if !testkit::can_mount() {
        return;
    }
    let built = Built::new(&TreeOptions::default());
    for (name, extra) in testkit::KERNEL_COMPARED_IMAGES {
        let image = built.image(name, extra);
        let (reference_root, kernel) = built.reference(&image, name);
        let expected = testkit::walk_disk(&reference_root);
        // Root's default mount (the kernel path, whose blob file system is served over FUSE;
        // the FUSE path where EROFS is missing), on each FUSE transport.
        for transport in testkit::uring::transports() {
            let name = &format!("{name}-uring-{}", transport.uring_option());
            let mnt = built.scratch(&format!("mnt-{name}"));
            let socket = built.scratch(&format!("{name}.sock"));
            let _mounted = mount(
                &image,
                &mnt,
                &format!(
                    "uring={},control={}",
                    transport.uring_option(),
                    socket.display()
                ),
            );
            let status = status_json(&socket);
            assert_eq!(
                status["images"][0]["transport"],
                transport.status_name(),
                "{status}"
            );
            let actual = testkit::walk_disk(&mnt);
            testkit::assert_records_eq(&expected, &actual, &format!("squashd mount of {name}"));

            // statfs as the kernel's squashfs reports it.
            let ours = statvfs(&mnt);
            if kernel.is_some() {
                let theirs = statvfs(&reference_root);
                assert_eq!(ours.f_blocks, theirs.f_blocks, "{name}: f_blocks");
                assert_eq!(ours.f_bsize, theirs.f_bsize, "{name}: f_bsize");
                assert_eq!(ours.f_files, theirs.f_files, "{name}: f_files");
                assert_eq!(ours.f_namemax, theirs.f_namemax, "{name}: f_namemax");
                // Inode numbers are the kernel's, but for the root and inode 1 (swapped: FUSE's
                // root is node 1).
                let root_ino = fs::metadata(&reference_root).unwrap().ino();
                assert_eq!(fs::metadata(&mnt).unwrap().ino(), 1);
                for r in expected.iter().filter(|r| !r.path.is_empty()).take(500) {
                    let rel = std::ffi::OsStr::from_bytes(&r.path);
                    let k = fs::symlink_metadata(reference_root.join(rel))
                        .unwrap()
                        .ino();
                    let o = fs::symlink_metadata(mnt.join(rel)).unwrap().ino();
                    let want = if k == 1 { root_ino } else { k };
                    assert_eq!(o, want, "{name}: st_ino of {}", r.path.escape_ascii());
                }
            }
            assert_eq!(ours.f_namemax, 256);
            assert_eq!(ours.f_bfree, 0);
            testkit::umount(&mnt);
        }
        if let Some(k) = kernel {
            testkit::umount(&k);
        }
    }
}

#[test]
fn options_subdir_offset_and_owner() {
    if !testkit::can_mount() {
        return;
    }
    let built = Built::new(&TreeOptions {
        many_entries: 10,
        ..TreeOptions::default()
    });
    let image = built.image("plain", &["-comp", "zstd"]);
    // The image 8 KiB into a file, as in an AppImage.
    let embedded = built.scratch("embedded.bin");
    let mut bytes = vec![0x7fu8; 8192];
    bytes.extend(fs::read(&image).unwrap());
    fs::write(&embedded, bytes).unwrap();
    let extracted = built.extract(&image);
    let subdir = fs::read_dir(&extracted)
        .unwrap()
        .flatten()
        .find(|e| e.file_type().unwrap().is_dir() && fs::read_dir(e.path()).unwrap().count() > 1)
        .expect("a non-empty directory")
        .file_name();
    let mnt = built.scratch("mnt");
    let _mounted = mount(
        &embedded,
        &mnt,
        &format!(
            "offset=8192,subdir={},uid=4321,gid=8765,ro,nofail",
            subdir.to_string_lossy()
        ),
    );
    let mut expected = testkit::walk_disk(&extracted.join(&subdir));
    for r in &mut expected {
        r.uid = 4321;
        r.gid = 8765;
    }
    let actual = testkit::walk_disk(&mnt);
    testkit::assert_records_eq(&expected, &actual, "subdir of an embedded image, uid/gid");
    testkit::umount(&mnt);
    wait_for_no_daemon(&mnt);

    let out = squashd_mount(&image, &mnt, "no_such_option");
    assert!(!out.status.success());
    assert!(!is_mounted(&mnt));
}
