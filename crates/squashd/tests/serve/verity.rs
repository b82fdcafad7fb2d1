//! Verified images under the daemon (issue 26, items 2 and 4): a block that fails its hash
//! gives EIO to the reads that need it and shows in `status` (`verity_failures`, `health`),
//! while the image's other files and the daemon's other images keep serving; a user's verity
//! files are read only if the user could read them, and through the descriptors opened for that
//! check: a file swapped in beside the image after it is never read.

use super::*;

pub(crate) const USER: u32 = 65534;

/// Random (incompressible) bytes: stored as they are, so a flipped byte reads back wrong
/// unless something checks it.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..len).map(|_| rng.u8(..)).collect()
}

/// `veritysetup format IMAGE TREE`: the root hash it printed.
pub(crate) fn veritysetup_format(image: &Path, tree: &Path) -> String {
    let out = Command::new("veritysetup")
        .arg("format")
        .args([image, tree])
        .output()
        .unwrap();
    assert!(out.status.success(), "veritysetup format: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("Root hash:"))
        .map(|h| h.trim().to_string())
        .expect("a root hash")
}

/// An image in `dir` of `a.bin` and `b.bin` (256 KiB of noise each, uncompressed, no
/// fragments: a.bin's data from byte 96 on); its tree made into `dir/i.sqfs.verity` and its
/// root hash into `dir/i.sqfs.roothash` when `beside`. Returns (image, tree, root, a, b).
pub(crate) fn verity_image(
    dir: &Path,
    seed: u64,
    beside: bool,
) -> (PathBuf, PathBuf, String, Vec<u8>, Vec<u8>) {
    fs::create_dir_all(dir).unwrap();
    let (a, b) = (noise(seed, 256 << 10), noise(seed + 1, 256 << 10));
    let image = testkit::image_of_files(
        dir,
        &[("a.bin", &a), ("b.bin", &b)],
        &["-no-fragments", "-processors", "1"],
    );
    let tree = if beside {
        PathBuf::from(format!("{}.verity", image.display()))
    } else {
        dir.join("tree")
    };
    let root = veritysetup_format(&image, &tree);
    if beside {
        fs::write(format!("{}.roothash", image.display()), &root).unwrap();
    }
    (image, tree, root, a, b)
}

/// A daemon that lets [`USER`] attach, started in `scratch` and ready.
pub(crate) fn user_daemon(scratch: &Scratch, name: &str) -> Daemon {
    let mut daemon = Daemon::start(scratch.path(), name, &format!("allow_uids = [{USER}]\n"));
    daemon.wait_ready(Duration::from_secs(30));
    daemon
}

/// An empty directory `mnt` in `scratch` that [`USER`] owns, to attach on.
pub(crate) fn user_mountpoint(scratch: &Scratch) -> PathBuf {
    let mnt = scratch.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    chown(&mnt, USER);
    mnt
}

pub(crate) fn have_veritysetup() -> bool {
    if testkit::have_tool("veritysetup") {
        return true;
    }
    testkit::skip("veritysetup not installed (apt install cryptsetup-bin)");
    false
}

#[test]
fn a_verity_failure_gives_eio_shows_in_status_and_the_rest_keeps_serving() {
    if !testkit::can_mount() || !have_veritysetup() {
        return;
    }
    let scratch = Scratch::new();
    let (bad, _, _, bad_a, bad_b) = verity_image(&scratch.path().join("bad"), 10, true);
    let (good, _, good_root, good_a, _) = verity_image(&scratch.path().join("good"), 20, true);
    // A byte of bad's a.bin, 100000 bytes into it, flipped after its tree was made.
    let mut bytes = fs::read(&bad).unwrap();
    assert_eq!(bytes[96 + 100_000], bad_a[100_000]);
    bytes[96 + 100_000] ^= 0x5a;
    fs::write(&bad, bytes).unwrap();
    let (bad_mnt, good_mnt) = (
        scratch.path().join("mnt-bad"),
        scratch.path().join("mnt-good"),
    );
    for mnt in [&bad_mnt, &good_mnt] {
        fs::create_dir(mnt).unwrap();
    }
    let config = format!(
        "{}{}",
        image_entry(&bad, &bad_mnt, "verity=require"),
        image_entry(&good, &good_mnt, "verity=require")
    );
    let mut daemon = Daemon::start(scratch.path(), "verity", &config);
    daemon.wait_ready(Duration::from_secs(30));

    assert_eq!(
        read_with_timeout(&bad_mnt.join("a.bin")),
        Err(Some(libc::EIO))
    );
    assert!(read_with_timeout(&bad_mnt.join("b.bin")).unwrap() == bad_b);
    assert!(read_with_timeout(&good_mnt.join("a.bin")).unwrap() == good_a);

    let status = daemon.image_status(&bad_mnt);
    assert!(status["verity_failures"].as_u64().unwrap() > 0, "{status}");
    let health = status["health"].as_str().unwrap();
    assert!(health.starts_with("verity failures"), "{status}");
    let status = daemon.image_status(&good_mnt);
    assert_eq!(status["health"], "ok", "{status}");
    assert_eq!(status["verity_failures"], 0, "{status}");
    assert_eq!(
        status["verity"]["root_hash"],
        good_root.as_str(),
        "{status}"
    );
    assert!(
        status["verity"]["root_hash_from"]
            .as_str()
            .unwrap()
            .ends_with(".roothash"),
        "{status}"
    );
    // The table says the same.
    let table = squashd_as(0, &daemon.socket, &["status"]);
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    assert!(table.contains("verity failures"), "{table}");
    assert!(
        table.contains(&format!("verity: root hash {good_root}")),
        "{table}"
    );
    // The memory of checking, within the shared metadata budget, per image and kind.
    let hash_bytes = status["verity"]["hash_cache_bytes"].as_u64().unwrap();
    assert!(hash_bytes > 0, "{status}");
    let prom = squashd_as(0, &daemon.socket, &["status", "--prometheus"]);
    let prom = String::from_utf8_lossy(&prom.stdout).into_owned();
    let sample = prom
        .lines()
        .find(|l| {
            l.starts_with("squashd_image_verity_memory_bytes{")
                && l.contains(&format!("{}\"", good_mnt.display()))
                && l.contains("kind=\"bitmap\"")
        })
        .unwrap_or_else(|| panic!("{prom}"));
    let bitmap = status["verity"]["bitmap_bytes"].as_u64().unwrap();
    assert!(
        bitmap > 0 && sample.ends_with(&format!(" {bitmap}")),
        "{sample}"
    );
    assert!(daemon.is_running());
    daemon.terminate();
}

/// `squashd attach IMAGE MNT -o OPTIONS` as `uid`: whether it succeeded, and its stderr.
pub(crate) fn attach_as(
    uid: u32,
    sock: &Path,
    img: &Path,
    mnt: &Path,
    options: &str,
) -> (bool, String) {
    let args = [
        "attach",
        img.to_str().unwrap(),
        mnt.to_str().unwrap(),
        "-o",
        options,
    ];
    let out = squashd_as(uid, sock, &args);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_users_verity_files_must_be_theirs_to_read() {
    if !testkit::can_mount() || !have_veritysetup() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new();
    let (image, tree, root, _, _) = verity_image(&scratch.path().join("img"), 30, false);
    let mnt = user_mountpoint(&scratch);
    // The tree, readable by root alone, and a copy the user may read.
    fs::set_permissions(&tree, fs::Permissions::from_mode(0o600)).unwrap();
    let readable = scratch.path().join("tree-readable");
    fs::copy(&tree, &readable).unwrap();
    fs::set_permissions(&readable, fs::Permissions::from_mode(0o644)).unwrap();
    let daemon = user_daemon(&scratch, "verity-user");
    let sock = daemon.socket.clone();

    // A tree the user cannot read: refused, naming it; nothing mounted.
    let given = format!("verity_data={},roothash={root}", tree.display());
    let (ok, err) = attach_as(USER, &sock, &image, &mnt, &given);
    assert!(!ok, "attached with a tree uid {USER} cannot read");
    assert!(
        err.contains("permission denied") && err.contains(tree.to_str().unwrap()),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(mount_type(&mnt).is_none());
    // A signature the user cannot read: the same.
    let sig = scratch.path().join("sig.p7s");
    fs::write(&sig, b"not a signature").unwrap();
    fs::set_permissions(&sig, fs::Permissions::from_mode(0o600)).unwrap();
    let given = format!(
        "verity_data={},roothash={root},roothash_sig={}",
        readable.display(),
        sig.display()
    );
    let (ok, err) = attach_as(USER, &sock, &image, &mnt, &given);
    assert!(!ok && err.contains(sig.to_str().unwrap()), "{err}");
    // verity_certs is the daemon's to set.
    let given = format!("verity=signed,verity_certs={}", scratch.path().display());
    let (ok, err) = attach_as(USER, &sock, &image, &mnt, &given);
    assert!(!ok && err.contains("verity_certs"), "{err}");

    // A tree found beside the image that the user cannot read: refused too.
    let beside = PathBuf::from(format!("{}.verity", image.display()));
    fs::copy(&tree, &beside).unwrap();
    fs::set_permissions(&beside, fs::Permissions::from_mode(0o600)).unwrap();
    let (ok, err) = attach_as(USER, &sock, &image, &mnt, &format!("roothash={root}"));
    assert!(!ok && err.contains(beside.to_str().unwrap()), "{err}");
    fs::remove_file(&beside).unwrap();

    // The tree the user can read: attached, verified.
    let given = format!(
        "verity=require,verity_data={},roothash={root}",
        readable.display()
    );
    let (ok, err) = attach_as(USER, &sock, &image, &mnt, &given);
    assert!(ok, "{err}");
    let status = daemon.image_status(&mnt.canonicalize().unwrap());
    assert_eq!(status["verity"]["root_hash"], root.as_str(), "{status}");
    assert_eq!(status["health"], "ok", "{status}");
    daemon.terminate();
}

/// Waits (up to `timeout`) for the first open of `path` by anyone, then calls `then`: a
/// thread that acts between a process's open of a file and whatever that process does next.
fn on_first_open(
    path: &Path,
    timeout: Duration,
    then: impl FnOnce() + Send + 'static,
) -> std::thread::JoinHandle<bool> {
    // SAFETY: inotify_init1 takes flags only; the descriptor it returns is owned below.
    let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
    assert!(
        fd >= 0,
        "inotify_init1: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `fd` was just returned by inotify_init1 and is owned by nothing else.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let name = CString::new(path.as_os_str().as_bytes()).unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: `fd` is an open inotify descriptor and `name` a NUL-terminated path.
    let watch = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), name.as_ptr(), libc::IN_OPEN) };
    assert!(
        watch >= 0,
        "inotify_add_watch: {}",
        std::io::Error::last_os_error()
    );
    std::thread::spawn(move || {
        let deadline = Instant::now() + timeout;
        let mut events = [0u8; 4096];
        while Instant::now() < deadline {
            // SAFETY: reads into a buffer of the length given, from the open descriptor.
            let n = unsafe { libc::read(fd.as_raw_fd(), events.as_mut_ptr().cast(), events.len()) };
            if n > 0 {
                then();
                return true;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        false
    })
}

#[test]
fn a_root_hash_swapped_beside_a_users_image_after_the_check_is_not_read() {
    if !testkit::can_mount() || !have_veritysetup() {
        return;
    }
    let scratch = Scratch::new();
    let (image, tree, root, _, _) = verity_image(&scratch.path().join("img"), 40, false);
    let mnt = user_mountpoint(&scratch);
    let beside_tree = PathBuf::from(format!("{}.verity", image.display()));
    fs::copy(&tree, &beside_tree).unwrap();
    fs::set_permissions(&beside_tree, fs::Permissions::from_mode(0o644)).unwrap();
    // The right root hash, which the user may not read, and a wrong one the user may.
    let secret = scratch.path().join("secret.roothash");
    fs::write(&secret, &root).unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    let decoy = scratch.path().join("decoy.roothash");
    let wrong = format!(
        "{}{}",
        if root.starts_with('0') { "1" } else { "0" },
        &root[1..]
    );
    fs::write(&decoy, &wrong).unwrap();
    fs::set_permissions(&decoy, fs::Permissions::from_mode(0o644)).unwrap();
    let beside = PathBuf::from(format!("{}.roothash", image.display()));
    std::os::unix::fs::symlink(&decoy, &beside).unwrap();
    let daemon = user_daemon(&scratch, "verity-swap");

    // As soon as the user's check has opened the decoy, IMAGE.roothash becomes the secret
    // (in one rename): a daemon that read the file again by its name would read the right
    // root hash, which the user could not, and attach.
    let swapped = {
        let (secret, beside) = (secret.clone(), beside.clone());
        let staged = scratch.path().join("staged.roothash");
        on_first_open(&decoy, Duration::from_secs(60), move || {
            std::os::unix::fs::symlink(&secret, &staged).unwrap();
            fs::rename(&staged, &beside).unwrap();
        })
    };
    let (ok, err) = attach_as(USER, &daemon.socket, &image, &mnt, "verity=require");
    assert!(swapped.join().unwrap(), "the decoy was never opened: {err}");
    assert_eq!(fs::read_link(&beside).unwrap(), secret, "swapped");
    assert!(!ok, "attached with the root hash uid {USER} could not read");
    assert!(
        err.contains("root hash does not match") && err.contains(&wrong),
        "{err}"
    );
    assert!(mount_type(&mnt).is_none());
    daemon.terminate();
}
