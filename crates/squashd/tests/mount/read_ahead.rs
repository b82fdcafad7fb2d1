//! Read-ahead's counters in `squashd status --json`, on the FUSE path and on the kernel path:
//! a file read whole in order is a stream, read ahead of with nothing wasted; small files read
//! whole get no read-ahead at all.

use super::*;

/// An image of one 8 MiB file and 40 small ones (zstd, 128 KiB blocks).
fn stream_and_small_files(dir: &Path) -> (PathBuf, Vec<u8>) {
    let src = dir.join("src");
    fs::create_dir_all(&src).unwrap();
    let mut rng = fastrand::Rng::with_seed(24);
    let big: Vec<u8> = (0..8 << 20).map(|_| b"acgt"[rng.usize(..4)]).collect();
    fs::write(src.join("big"), &big).unwrap();
    for i in 0..40 {
        let small: Vec<u8> = (0..2000 + i * 9000).map(|_| rng.u8(..)).collect();
        fs::write(src.join(format!("small{i:02}")), small).unwrap();
    }
    let image = dir.join("i.sqfs");
    testkit::mksquashfs(&src, &image, &["-comp", "zstd", "-b", "128K"]);
    (image, big)
}

fn read_ahead_of(socket: &Path) -> serde_json::Value {
    status_json(socket)["images"][0]["read_ahead"].clone()
}

fn check_path(options: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (image, big) = stream_and_small_files(dir.path());
    let mnt = dir.path().join("mnt");
    let socket = dir.path().join("control.sock");
    let _mounted = mount(
        &image,
        &mnt,
        &format!("{options}control={}", socket.display()),
    );
    for i in 0..40 {
        fs::read(mnt.join(format!("small{i:02}"))).unwrap();
    }
    let after_small = read_ahead_of(&socket);
    assert_eq!(after_small["loads"], 0, "{options}: {after_small}");
    assert_eq!(after_small["streams"], 0, "{options}: {after_small}");
    assert!(fs::read(mnt.join("big")).unwrap() == big);
    let ra = read_ahead_of(&socket);
    let n = |k: &str| ra[k].as_u64().unwrap();
    assert!(
        n("loads") > 0,
        "{options}: a file read in order got no read-ahead: {ra}"
    );
    assert_eq!(n("wasted"), 0, "{options}: {ra}");
    assert_eq!(n("loads"), n("used") + n("pending"), "{options}: {ra}");
    testkit::umount(&mnt);
    wait_for_no_daemon(&mnt);
}

#[test]
fn status_shows_read_ahead_on_both_paths_and_none_wasted_on_whole_files() {
    if !testkit::can_mount() {
        return;
    }
    check_path("fuse,");
    if testkit::can_mount_erofs() {
        check_path("kernel,");
    } else {
        testkit::skip("the kernel path: no EROFS");
    }
}
