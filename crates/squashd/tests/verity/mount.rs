//! Verified images mounted: on the FUSE path and on the kernel path they show what the
//! kernel's squashfs mount of the same image shows; a flipped byte of one file's data gives
//! EIO for that file only (without verity it read back as wrong bytes, with no error), counted
//! in `status`; a wrong root hash refuses the mount with one line.

use super::*;
use std::os::unix::fs::MetadataExt as _;

fn is_mounted(mnt: &Path) -> bool {
    let needle = format!(" {} ", mnt.display());
    fs::read_to_string("/proc/mounts")
        .unwrap()
        .lines()
        .any(|l| l.contains(&needle))
}

/// Unmounts (lazily) on drop whatever is still mounted at its path.
#[must_use]
struct MountGuard(PathBuf);

impl Drop for MountGuard {
    fn drop(&mut self) {
        if is_mounted(&self.0) {
            testkit::detach(&self.0);
        }
    }
}

/// `squashd mount IMAGE MNT -o OPTS` (in the background), which must succeed.
fn mount(image: &Path, mnt: &Path, opts: &str) -> MountGuard {
    fs::create_dir_all(mnt).unwrap();
    let out = squashd(&[
        OsStr::new("mount"),
        image.as_os_str(),
        mnt.as_os_str(),
        OsStr::new("-o"),
        OsStr::new(opts),
    ]);
    assert!(out.status.success(), "mount -o {opts}: {out:?}");
    assert!(is_mounted(mnt), "{} is not mounted", mnt.display());
    MountGuard(mnt.to_path_buf())
}

/// `squashd status --json --socket SOCKET`: the report's one image.
fn lone_status(socket: &Path) -> serde_json::Value {
    let out = squashd(&[
        OsStr::new("status"),
        OsStr::new("--json"),
        OsStr::new("--socket"),
        socket.as_os_str(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    report["images"][0].clone()
}

/// The engines a verified image is mounted with here: FUSE, and the kernel path where the
/// kernel has EROFS.
fn engines() -> Vec<&'static str> {
    let mut engines = vec!["fuse"];
    if testkit::can_mount_erofs() {
        engines.push("kernel");
    }
    engines
}

/// A tree beside `image` (`IMAGE.verity`, `IMAGE.roothash`) by `veritysetup format`; its root.
fn sidecars(image: &Path) -> String {
    let tree = PathBuf::from(format!("{}.verity", image.display()));
    let root = format(&[image.as_os_str(), tree.as_os_str()]);
    fs::write(format!("{}.roothash", image.display()), format!("{root}\n")).unwrap();
    root
}

#[test]
fn verified_mounts_show_what_the_kernels_squashfs_shows_on_both_paths() {
    if !testkit::can_mount() {
        return;
    }
    let Some((built, image)) = fixture() else {
        return;
    };
    let root = sidecars(&image);
    let (reference, kernel) = built.reference(&image, "verity");
    let expected = testkit::walk_disk(&reference);
    for engine in engines() {
        let mnt = built.scratch(&format!("mnt-{engine}"));
        let socket = built.scratch(&format!("{engine}.sock"));
        let opts = format!("{engine},verity=require,control={}", socket.display());
        let guard = mount(&image, &mnt, &opts);
        testkit::assert_records_eq(
            &expected,
            &testkit::walk_disk(&mnt),
            &format!("verified mount on the {engine} path"),
        );
        let status = lone_status(&socket);
        assert_eq!(status["engine"], engine, "{status}");
        assert_eq!(status["health"], "ok", "{status}");
        assert_eq!(status["verity_failures"], 0, "{status}");
        assert_eq!(status["verity"]["root_hash"], root.as_str(), "{status}");
        assert!(
            status["verity"]["verified_blocks"].as_u64().unwrap() > 0
                && status["verity"]["bitmap_bytes"].as_u64().unwrap() > 0,
            "{status}"
        );
        testkit::umount(&mnt);
        drop(guard);
    }
    if let Some(kmnt) = kernel {
        testkit::umount(&kmnt);
    }
}

/// Random (incompressible) bytes: mksquashfs stores them as they are, so a flipped byte reads
/// back as a wrong byte unless something checks it.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..len).map(|_| rng.u8(..)).collect()
}

/// An image of two 256 KiB files of noise, `a.bin` then `b.bin`, stored uncompressed and
/// without fragments from byte 96 on, with its tree beside it; a byte of `a.bin`'s data
/// flipped after the tree was made. Returns (image, a, b).
pub(crate) fn image_with_a_flipped_byte(dir: &Path) -> (PathBuf, Vec<u8>, Vec<u8>) {
    let (a, b) = (noise(1, 256 << 10), noise(2, 256 << 10));
    let image = testkit::image_of_files(
        dir,
        &[("a.bin", &a), ("b.bin", &b)],
        &["-no-fragments", "-comp", "zstd"],
    );
    sidecars(&image);
    // a.bin's data starts at 96, after the superblock: 100000 bytes into it, data block 24.
    let at = 96 + 100_000;
    assert_eq!(fs::read(&image).unwrap()[at as usize], a[100_000]);
    flip(&image, at);
    (image, a, b)
}

#[test]
fn a_flipped_data_byte_gives_eio_for_that_file_only_on_both_paths() {
    if !testkit::can_mount() || !have_veritysetup() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (image, a, b) = image_with_a_flipped_byte(dir.path());
    // Without verity the wrong byte is read back, with no error.
    let out = squashd(&[
        OsStr::new("cat"),
        OsStr::new("--verity=off"),
        image.as_os_str(),
        OsStr::new("/a.bin"),
    ]);
    assert!(out.status.success(), "{out:?}");
    assert_ne!(out.stdout, a);
    for engine in engines() {
        let mnt = dir.path().join(format!("mnt-{engine}"));
        let socket = dir.path().join(format!("{engine}.sock"));
        let opts = format!("{engine},control={}", socket.display());
        let guard = mount(&image, &mnt, &opts);
        let err = fs::read(mnt.join("a.bin")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EIO), "{engine}: {err}");
        assert!(fs::read(mnt.join("b.bin")).unwrap() == b, "{engine}: b.bin");
        // a.bin's second 128 KiB block (image bytes 131168 on) holds no bad byte: it reads.
        let tail = {
            use std::os::unix::fs::FileExt as _;
            let mut tail = vec![0u8; 128 << 10];
            fs::File::open(mnt.join("a.bin"))
                .unwrap()
                .read_exact_at(&mut tail, 128 << 10)
                .unwrap();
            tail
        };
        assert!(tail[..] == a[128 << 10..], "{engine}: the tail of a.bin");
        assert_eq!(fs::metadata(mnt.join("a.bin")).unwrap().size(), 256 << 10);
        let status = lone_status(&socket);
        assert!(
            status["verity_failures"].as_u64().unwrap() > 0,
            "{engine}: {status}"
        );
        assert!(
            status["health"]
                .as_str()
                .unwrap()
                .starts_with("verity failures"),
            "{engine}: {status}"
        );
        testkit::umount(&mnt);
        drop(guard);
    }
}

#[test]
fn a_wrong_root_hash_refuses_the_mount_with_one_line() {
    if !testkit::can_mount() || !have_veritysetup() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // An image of one 4 KiB block (whose tree has no hash block: the root hash is the
    // block's), and one of many.
    let tiny_dir = dir.path().join("tiny");
    fs::create_dir(&tiny_dir).unwrap();
    let tiny = testkit::image_of_files(&tiny_dir, &[("a", b"a")], &[]);
    assert_eq!(fs::metadata(&tiny).unwrap().len(), 4096);
    let a = noise(3, 64 << 10);
    let image = testkit::image_of_files(dir.path(), &[("a", &a)], &[]);
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mut root = String::new();
    for image in [&tiny, &image] {
        root = sidecars(image);
        let mut wrong = root.clone().into_bytes();
        wrong[0] = if wrong[0] == b'0' { b'1' } else { b'0' };
        let wrong = String::from_utf8(wrong).unwrap();
        for opts in [
            format!("roothash={wrong}"),
            format!("fuse,roothash={wrong}"),
        ] {
            let out = squashd(&[
                OsStr::new("mount"),
                image.as_os_str(),
                mnt.as_os_str(),
                OsStr::new("-o"),
                OsStr::new(&opts),
            ]);
            let _guard = MountGuard(mnt.clone());
            assert!(!out.status.success(), "{opts}: {out:?}");
            let err = text(&out.stderr);
            assert_eq!(err.trim_end().lines().count(), 1, "{opts}: {err}");
            assert!(
                err.contains("root hash does not match") && err.contains(&wrong),
                "{opts}: {err}"
            );
            assert!(!is_mounted(&mnt), "{opts}: mounted");
        }
    }
    // The right one (given, or found beside it) mounts.
    let guard = mount(
        &image,
        &mnt,
        &format!("fuse,verity=require,roothash={root}"),
    );
    assert!(fs::read(mnt.join("a")).unwrap() == a);
    testkit::umount(&mnt);
    drop(guard);
}

#[test]
fn a_small_metadata_budget_holds_the_hash_blocks_and_bitmap_and_reads_still_verify() {
    if !testkit::can_mount() || !testkit::have_squashfs_tools() || !have_veritysetup() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // 12 MiB of noise: 3072 data blocks, 24 level-0 hash blocks (96 KiB), more than the budget.
    let files: Vec<(String, Vec<u8>)> = (0..4)
        .map(|i| (format!("f{i}.bin"), noise(10 + i, 3 << 20)))
        .collect();
    let named: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_slice()))
        .collect();
    let image = testkit::image_of_files(dir.path(), &named, &["-no-fragments"]);
    sidecars(&image);
    let reference = dir.path().join("unsquashfs");
    testkit::unsquashfs_extract(&image, &reference);
    let budget = 64u64 << 10;
    let mnt = dir.path().join("mnt");
    let socket = dir.path().join("ctl.sock");
    let opts = format!(
        "fuse,verity=require,metadata_cache={budget},control={}",
        socket.display()
    );
    let guard = mount(&image, &mnt, &opts);
    testkit::assert_records_eq(
        &testkit::walk_disk(&reference),
        &testkit::walk_disk(&mnt),
        "a verified mount within a 64 KiB metadata budget",
    );
    let status = lone_status(&socket);
    let verity = &status["verity"];
    let number = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("{status}"));
    assert_eq!(
        number(&verity["verified_blocks"]),
        number(&verity["data_blocks"]),
        "{status}"
    );
    let (hash, bitmap) = (
        number(&verity["hash_cache_bytes"]),
        number(&verity["bitmap_bytes"]),
    );
    assert!(hash > 0 && bitmap > 0, "{status}");
    assert!(hash + bitmap <= budget, "{status}");
    let metadata = &status["cache"]["metadata"];
    assert_eq!(number(&metadata["capacity_bytes"]), budget, "{status}");
    assert!(
        number(&metadata["resident_bytes"]) <= budget
            && number(&metadata["resident_bytes"]) >= hash + bitmap,
        "{status}"
    );
    let table = squashd(&[
        OsStr::new("status"),
        OsStr::new("--socket"),
        socket.as_os_str(),
    ]);
    let table = text(&table.stdout);
    assert!(
        table.contains("bitmap ") && table.contains("hash blocks "),
        "{table}"
    );
    testkit::umount(&mnt);
    drop(guard);
}
