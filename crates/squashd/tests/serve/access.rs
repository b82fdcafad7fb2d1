//! Where a user may mount, whose a user's mount is, and what a user learns from the daemon
//! (issue 23, items 2, 3 and 9): each as the real daemon, with real unprivileged uids.

use super::*;
use std::os::unix::fs::MetadataExt;

const USER: u32 = 65534;
const OTHER: u32 = 65533;

/// The name of [`compare_trees_as_user`] as the test harness knows it.
const COMPARE_AS_USER: &str = "access::compare_trees_as_user";

/// Compares the tree at `mnt` with `src` as `uid` sees them (testkit's comparison, in this
/// test binary run again as that user): a comparison made as root shows what root sees.
pub(crate) fn assert_same_tree_as(uid: u32, src: &Path, mnt: &Path) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([COMPARE_AS_USER, "--exact", "--ignored", "--nocapture"])
        .arg("--test-threads=1")
        .env("SQUASHD_TEST_COMPARE_SRC", src)
        .env("SQUASHD_TEST_COMPARE_MNT", mnt);
    let out = run_as(uid, cmd);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "uid {uid} does not see {} as {}: {}\n{text}",
        mnt.display(),
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Run by [`assert_same_tree_as`] only, as another user.
#[test]
#[ignore = "run by assert_same_tree_as, as another user"]
fn compare_trees_as_user() {
    let src = std::env::var_os("SQUASHD_TEST_COMPARE_SRC").expect("run by assert_same_tree_as");
    let mnt = std::env::var_os("SQUASHD_TEST_COMPARE_MNT").expect("run by assert_same_tree_as");
    assert_same_tree(Path::new(&src), Path::new(&mnt));
}

/// `squashd attach IMAGE MNT [-o OPTIONS]` as `uid`: the exit status and stderr.
fn attach_as(uid: u32, sock: &Path, img: &Path, mnt: &Path, options: &[&str]) -> (bool, String) {
    let mut args = vec!["attach", img.to_str().unwrap(), mnt.to_str().unwrap()];
    args.extend_from_slice(options);
    let out = squashd_as(uid, sock, &args);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A directory made for a test outside the scratch directory, removed when dropped.
struct MadeDir(PathBuf);

impl Drop for MadeDir {
    fn drop(&mut self) {
        // umount2 rather than umount(8), which may wait on a lock of mount(8)'s own.
        let path = CString::new(self.0.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path that outlives the call.
        unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
        let _ = fs::remove_dir(&self.0);
    }
}

/// Mounts a tmpfs with `options` on `dir` (mount(2), not mount(8): see [`MadeDir`]).
fn mount_tmpfs(dir: &Path, options: &str) {
    let c = |s: &[u8]| CString::new(s).unwrap();
    let (source, target, data) = (
        c(b"tmpfs"),
        c(dir.as_os_str().as_bytes()),
        c(options.as_bytes()),
    );
    // SAFETY: NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            source.as_ptr(),
            0,
            data.as_ptr().cast(),
        )
    };
    assert_eq!(rc, 0, "mount tmpfs: {}", std::io::Error::last_os_error());
}

/// A cgroup (v1 or v2) hierarchy mounted here, if any.
fn cgroup_mount() -> Option<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let sep = f.iter().position(|x| *x == "-")?;
        matches!(f.get(sep + 1), Some(&"cgroup") | Some(&"cgroup2")).then(|| PathBuf::from(f[4]))
    })
}

/// Item 2: a user's mount point must be on a file system where user mounts make sense, on a
/// writable mount, and not the root of a mount; the refusals say so in one line and mount
/// nothing. A directory of their own on tmpfs or a disk file system still works.
#[test]
fn mount_points_on_pseudo_read_only_or_mount_roots_are_refused() {
    if !testkit::can_mount() {
        return;
    }
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 2);
    let (_, img, _) = &images[0];
    // An image with a directory the user owns, mounted by root for everyone: that directory
    // is the user's by its owner, but inside a read-only image.
    let tree = scratch.path().join("src/owned");
    fs::create_dir_all(tree.join("theirs")).unwrap();
    chown(&tree.join("theirs"), USER);
    let owned_img = scratch.path().join("img/owned.sqfs");
    testkit::mksquashfs(&tree, &owned_img, &["-no-progress", "-quiet"]);
    let shared = scratch.path().join("mnt/shared");
    fs::create_dir_all(&shared).unwrap();
    let daemon = Daemon::ready(
        scratch.path(),
        "where",
        &format!(
            "allow_uids = [{USER}]\n{}",
            image_entry(&owned_img, &shared, "allow_other,fuse")
        ),
    );
    let sock = daemon.socket.clone();
    let refused = |mnt: &Path, why: &str| {
        let (ok, err) = attach_as(USER, &sock, img, mnt, &[]);
        assert!(!ok, "{}: attached", mnt.display());
        assert!(err.contains(why), "{}: {err}", mnt.display());
        assert_eq!(err.lines().count(), 1, "not one line: {err}");
        assert_eq!(mount_id(mnt), None, "{}: mounted", mnt.display());
    };

    // /proc/PID of the user's own process: owned by the user, and refused.
    let mut sleeper = Command::new("sleep");
    sleeper.arg("60");
    as_user(&mut sleeper, USER);
    let mut sleeper = sleeper.spawn().unwrap();
    let proc_dir = PathBuf::from(format!("/proc/{}", sleeper.id()));
    refused(&proc_dir, "is on a proc file system");
    let _ = sleeper.kill();
    let _ = sleeper.wait();

    // A cgroup the user owns (delegated), under /sys.
    match cgroup_mount() {
        Some(hierarchy) => {
            let group = MadeDir(hierarchy.join(format!("squashd-test-{}", std::process::id())));
            fs::create_dir(&group.0).unwrap();
            chown(&group.0, USER);
            refused(&group.0, "file system, where uid 65534 may not mount");
        }
        None => eprintln!("no cgroup hierarchy mounted: that case is not tried"),
    }

    // A directory the user owns inside root's read-only image.
    let inside = shared.join("theirs");
    assert_eq!(fs::metadata(&inside).unwrap().uid(), USER);
    refused(&inside, "is on a read-only mount");

    // The root of a mount (a tmpfs root owns what its mode= and uid= say).
    let root_of = scratch.path().join("mnt/tmpfs-root");
    fs::create_dir_all(&root_of).unwrap();
    let tmpfs_root = MadeDir(root_of.clone());
    mount_tmpfs(&root_of, &format!("uid={USER},size=1M"));
    let (ok, err) = attach_as(USER, &sock, img, &root_of, &[]);
    assert!(!ok && err.contains("is the root of a mount"), "{ok} {err}");
    drop(tmpfs_root);

    // A directory of the user's own on tmpfs (/dev/shm, the scratch) and on the temporary
    // directory's file system (a disk one here) works.
    let on_tmpfs = scratch.path().join("mnt/own");
    fs::create_dir_all(&on_tmpfs).unwrap();
    chown(&on_tmpfs, USER);
    let disk = tempfile::tempdir().unwrap();
    fs::set_permissions(disk.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let on_disk = disk.path().join("own");
    fs::create_dir(&on_disk).unwrap();
    chown(&on_disk, USER);
    let _unmount_on_disk = MadeDir(on_disk.clone());
    for mnt in [&on_tmpfs, &on_disk] {
        let (ok, err) = attach_as(USER, &sock, img, mnt, &[]);
        assert!(ok, "{}: {err}", mnt.display());
        let out = squashd_as(USER, &sock, &["detach", mnt.to_str().unwrap()]);
        assert!(out.status.success(), "{out:?}");
    }
    daemon.terminate();
}

/// The super options (last field of /proc/self/mountinfo) of the mount at `mnt`.
fn super_options(mnt: &Path) -> String {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() > 4 && Path::new(f[4]) == mnt).then(|| f[f.len() - 1].to_string())
        })
        .unwrap_or_else(|| panic!("{} is not mounted", mnt.display()))
}

/// Whether `uid` can read `path` (`cat` as that user), and its stderr.
fn reads_as(uid: u32, path: &Path) -> (bool, String) {
    let mut cat = Command::new("cat");
    cat.arg(path);
    let out = run_as(uid, cat);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Item 3: a user's mount belongs to that user, as one fusermount3 made would: they read it
/// (the whole tree equals the source, compared as them), another user and root get EACCES
/// without allow_other, the kernel shows user_id and group_id as theirs, and it is served by
/// FUSE. A mount the daemon left dead is cleared when the user attaches there again.
#[test]
fn a_users_mount_is_theirs_to_read_and_no_one_elses() {
    if !testkit::can_mount() {
        return;
    }
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 1);
    let (src, img, mnt) = &images[0];
    chown(mnt, USER);
    let config = format!("allow_uids = [{USER}, {OTHER}]\n");
    let mut daemon = Daemon::ready(scratch.path(), "owner", &config);
    let (ok, err) = attach_as(USER, &daemon.socket, img, mnt, &[]);
    assert!(ok, "{err}");
    assert_same_tree_as(USER, src, mnt);
    let options = super_options(mnt);
    for want in [format!("user_id={USER}"), format!("group_id={USER}")] {
        assert!(options.split(',').any(|o| o == want), "{want}: {options}");
    }
    assert!(!options.split(',').any(|o| o == "allow_other"), "{options}");
    let file = mnt.join("d/data.bin");
    let (ok, err) = reads_as(OTHER, &file);
    assert!(
        !ok && err.contains("Permission denied"),
        "uid {OTHER}: {err}"
    );
    let admin_may = fs::read_to_string("/sys/module/fuse/parameters/allow_sys_admin_access")
        .is_ok_and(|v| v.trim() == "Y");
    if !admin_may {
        let root = fs::read(&file).map_err(|e| e.raw_os_error());
        assert_eq!(root, Err(Some(libc::EACCES)), "root reads a user's mount");
    }
    assert_eq!(daemon.image_status(mnt)["engine"], "fuse");

    // The daemon dies; the mount it leaves answers ENOTCONN to whatever needs the daemon, to
    // the user only (what the kernel holds, such as the pages of a file read and opened without
    // asking, stays readable: the image cannot change). Attaching there again clears it.
    daemon.child.kill().unwrap();
    daemon.child.wait().unwrap();
    let (ok, err) = reads_as(USER, &mnt.join("d/never-looked-up"));
    assert!(!ok && err.contains("not connected"), "{err}");
    let restarted = Daemon::ready(scratch.path(), "owner2", &config);
    let (ok, err) = attach_as(USER, &restarted.socket, img, mnt, &[]);
    assert!(ok, "{err}");
    assert_eq!(mounts_under(mnt).len(), 1, "a live mount over a dead one");
    assert_same_tree_as(USER, src, mnt);
    restarted.terminate();
}

/// Item 9: the daemon opens a user's mount point with the user's rights, so that under a
/// directory the user cannot search, a path that exists (even one of theirs) and one that
/// does not give the same error, and nothing is mounted.
#[test]
fn attach_errors_do_not_tell_whether_a_path_exists() {
    if !testkit::can_mount() {
        return;
    }
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 1);
    let (_, img, _) = &images[0];
    let secret = scratch.path().join("secret");
    fs::create_dir_all(secret.join("exists")).unwrap();
    chown(&secret.join("exists"), USER);
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o700)).unwrap();
    let daemon = Daemon::ready(scratch.path(), "paths", &format!("allow_uids = [{USER}]\n"));
    let sock = daemon.socket.clone();
    let (ok_exists, exists) = attach_as(USER, &sock, img, &secret.join("exists"), &[]);
    let (ok_missing, missing) = attach_as(USER, &sock, img, &secret.join("missing"), &[]);
    assert!(!ok_exists && !ok_missing, "{exists}{missing}");
    assert_eq!(
        exists.replace("exists", "NAME"),
        missing.replace("missing", "NAME"),
        "the errors tell whether the path exists"
    );
    assert!(exists.contains("Permission denied"), "{exists}");
    assert_eq!(mount_id(&secret.join("exists")), None);
    daemon.terminate();
}

/// Item 9: `status` shows a user only the images they attached; root sees all.
#[test]
fn status_shows_a_user_only_their_own_images() {
    if !testkit::can_mount() {
        return;
    }
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 3);
    let (_, img0, root_mnt) = &images[0];
    let (_, img1, mnt1) = &images[1];
    let (_, img2, mnt2) = &images[2];
    let daemon = Daemon::ready(
        scratch.path(),
        "status",
        &format!(
            "allow_uids = [{USER}, {OTHER}]\n{}",
            image_entry(img0, root_mnt, "")
        ),
    );
    let sock = daemon.socket.clone();
    chown(mnt1, USER);
    chown(mnt2, OTHER);
    assert!(attach_as(USER, &sock, img1, mnt1, &[]).0);
    assert!(attach_as(OTHER, &sock, img2, mnt2, &[]).0);
    let listed = |uid: u32| -> Vec<PathBuf> {
        let out = squashd_as(uid, &sock, &["status", "--json"]);
        assert!(out.status.success(), "{out:?}");
        let status: Value = serde_json::from_slice(&out.stdout).unwrap();
        status["images"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| PathBuf::from(i["mountpoint"].as_str().unwrap()))
            .collect()
    };
    assert_eq!(listed(USER), [mnt1.as_path()]);
    assert_eq!(listed(OTHER), [mnt2.as_path()]);
    let mut all = listed(0);
    all.sort();
    let mut expected = vec![root_mnt.clone(), mnt1.clone(), mnt2.clone()];
    expected.sort();
    assert_eq!(all, expected);
    daemon.terminate();
}

/// The capabilities the packaged unit leaves the daemon (its `CapabilityBoundingSet=`), as
/// setpriv's `--bounding-set` takes them.
fn unit_bounding_set() -> String {
    let unit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/squashd.service");
    let text = fs::read_to_string(&unit).unwrap();
    let caps = text
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("the unit sets CapabilityBoundingSet=");
    let caps: Vec<String> = caps
        .split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    format!("-all,{}", caps.join(","))
}

/// [`Daemon::start`], run through `wrapper` (a command that ends by running its arguments).
fn start_under(scope: &Path, name: &str, config: &str, wrapper: &[&str]) -> Daemon {
    let socket = scope.join(format!("{name}.sock"));
    let config_path = scope.join(format!("{name}.toml"));
    let text = format!("socket = {:?}\n{config}", socket.display().to_string());
    fs::write(&config_path, text).unwrap();
    let notify_path = scope.join(format!("{name}.notify"));
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    let stderr = scope.join(format!("{name}.err"));
    let child = Command::new(wrapper[0])
        .args(&wrapper[1..])
        .arg(SQUASHD)
        .args(["serve", "-c"])
        .arg(&config_path)
        .env("NOTIFY_SOCKET", &notify_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    Daemon {
        child,
        notify,
        socket,
        stderr,
        scope: scope.to_path_buf(),
    }
}

/// The packaged unit's capabilities and no-new-privileges are enough for a user's attach:
/// the child that opens the mount point (and probes the mount) becomes the user, which needs
/// CAP_SETUID and CAP_SETGID.
#[test]
fn a_user_attaches_under_the_units_capabilities() {
    if !testkit::can_mount() {
        return;
    }
    if !testkit::have_tool("setpriv") {
        eprintln!("SKIPPED: setpriv (util-linux) is needed to drop capabilities");
        return;
    }
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 1);
    let (src, img, mnt) = &images[0];
    chown(mnt, USER);
    let caps = unit_bounding_set();
    let wrapper = ["setpriv", "--bounding-set", &caps, "--no-new-privs", "--"];
    let config = format!("allow_uids = [{USER}]\n");
    let mut daemon = start_under(scratch.path(), "unit", &config, &wrapper);
    daemon.wait_ready(Duration::from_secs(30));
    let (ok, err) = attach_as(USER, &daemon.socket, img, mnt, &[]);
    assert!(ok, "under {caps}: {err}");
    assert_same_tree_as(USER, src, mnt);
    daemon.terminate();
}
