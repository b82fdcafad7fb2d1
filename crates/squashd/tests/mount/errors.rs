//! Errors a user sees: errnos and read-only refusals, a truncated image, an image that fails
//! before the mount detaches from the terminal.

use super::*;

fn getxattr(path: &Path, name: &str, size: usize) -> (isize, i32, Vec<u8>) {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; size];
    let r = unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), size) };
    let err = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    buf.truncate(r.max(0) as usize);
    (r, if r < 0 { err } else { 0 }, buf)
}

#[test]
fn errors_a_user_expects_and_read_only() {
    if !testkit::can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    fs::write(src.join("f"), b"contents").unwrap();
    xattr::set(src.join("f"), "user.big", &[7u8; 300]).unwrap();
    let image = dir.path().join("i.sqfs");
    testkit::mksquashfs(&src, &image, &[]);
    let mnt = dir.path().join("mnt");
    let _mounted = mount(&image, &mnt, "");

    assert_eq!(errno_of(fs::metadata(mnt.join("missing"))), libc::ENOENT);
    // A negative entry is cached, and still says ENOENT the second time.
    assert_eq!(errno_of(fs::metadata(mnt.join("missing"))), libc::ENOENT);
    assert_eq!(errno_of(fs::metadata(mnt.join("f/x"))), libc::ENOTDIR);
    assert_eq!(errno_of(fs::read(mnt.join("d"))), libc::EISDIR);
    assert_eq!(errno_of(fs::read_dir(mnt.join("f"))), libc::ENOTDIR);
    assert_eq!(errno_of(fs::write(mnt.join("new"), b"x")), libc::EROFS);
    assert_eq!(
        errno_of(fs::OpenOptions::new().append(true).open(mnt.join("f"))),
        libc::EROFS
    );
    assert_eq!(errno_of(fs::create_dir(mnt.join("nd"))), libc::EROFS);
    assert_eq!(errno_of(fs::remove_file(mnt.join("f"))), libc::EROFS);
    assert_eq!(
        errno_of(fs::rename(mnt.join("f"), mnt.join("g"))),
        libc::EROFS
    );
    assert_eq!(
        errno_of(xattr::set(mnt.join("f"), "user.n", b"v")),
        libc::EROFS
    );
    assert_eq!(fs::read(mnt.join("f")).unwrap(), b"contents");

    // getxattr's size protocol: 0 asks the length; too small is ERANGE; missing is ENODATA.
    let f = mnt.join("f");
    assert_eq!(getxattr(&f, "user.big", 0).0, 300);
    assert_eq!(getxattr(&f, "user.big", 10).1, libc::ERANGE);
    let (n, _, value) = getxattr(&f, "user.big", 4096);
    assert_eq!((n, value), (300, vec![7u8; 300]));
    assert_eq!(getxattr(&f, "user.none", 100).1, libc::ENODATA);
    let names: Vec<_> = xattr::list(&f).unwrap().collect();
    assert_eq!(names, vec![std::ffi::OsString::from("user.big")]);
    testkit::umount(&mnt);
}

#[test]
fn truncated_image_gives_eio_and_the_daemon_stays() {
    if !testkit::can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    let mut rng = fastrand::Rng::with_seed(12345);
    let data: Vec<u8> = (0..4 << 20).map(|_| rng.u8(..)).collect();
    fs::write(src.join("big"), &data).unwrap();
    fs::write(src.join("small"), b"small").unwrap();
    let image = dir.path().join("i.sqfs");
    // Data first, metadata at the end: cut the data off and keep the tables.
    testkit::mksquashfs(&src, &image, &["-comp", "gzip"]);
    let mnt = dir.path().join("mnt");
    let _mounted = mount(&image, &mnt, "");
    let md = fs::metadata(mnt.join("big")).unwrap();
    assert_eq!(md.len(), data.len() as u64);
    // Cut the image to its first megabyte: most of big's blocks are gone.
    fs::OpenOptions::new()
        .write(true)
        .open(&image)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let mut f = fs::File::open(mnt.join("big")).unwrap();
    let mut buf = Vec::new();
    assert_eq!(errno_of(f.read_to_end(&mut buf)), libc::EIO);
    // The daemon is still there and answers.
    assert!(is_mounted(&mnt));
    assert!(fs::metadata(&mnt).is_ok());
    assert_eq!(daemons_of(&mnt).len(), 1);
    drop(f);
    testkit::umount(&mnt);
    wait_for_no_daemon(&mnt);
}

#[test]
fn bad_image_fails_before_detaching() {
    if !testkit::can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.sqfs");
    fs::write(&bad, vec![0x42u8; 8192]).unwrap();
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let out = squashd_mount(&bad, &mnt, "");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "stderr: {stderr}");
    assert!(stderr.contains("bad.sqfs"), "stderr: {stderr}");
    assert!(!is_mounted(&mnt));
    assert!(daemons_of(&mnt).is_empty());
}
