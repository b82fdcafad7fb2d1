//! Mounts by an ordinary user through fusermount3, and a dead mount (on a path with a space)
//! cleared by the next mount.

use super::*;

/// The uid of `nobody`: a real unprivileged user on every Debian machine.
const NOBODY: u32 = 65534;

/// Sets /dev/fuse's mode for a test and restores the one it had when dropped.
struct DevFuseMode(u32);

impl DevFuseMode {
    fn set(mode: u32) -> DevFuseMode {
        use std::os::unix::fs::PermissionsExt;
        let before = fs::metadata("/dev/fuse").unwrap().permissions().mode() & 0o7777;
        fs::set_permissions("/dev/fuse", fs::Permissions::from_mode(mode)).unwrap();
        DevFuseMode(before)
    }
}

impl Drop for DevFuseMode {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        let _ = fs::set_permissions("/dev/fuse", fs::Permissions::from_mode(self.0));
    }
}

/// `program args` run as `nobody` (its group, no supplementary groups: std drops them when
/// root changes uid), in `dir`.
fn as_nobody(program: &str, args: &[&OsStr], dir: &Path) -> Output {
    use std::os::unix::process::CommandExt;
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .uid(NOBODY)
        .gid(NOBODY)
        .env("HOME", dir)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Types, modes, sizes (but a directory's, which differs between file systems), link targets
/// and contents of every entry under `dir`, as `nobody` sees them (a FUSE mount of another user
/// is closed even to root).
fn listing_as_nobody(dir: &Path) -> String {
    let script = "find . -type d -printf 'd %m %p\\n' -o -printf '%y %m %s %p %l\\n' | sort; \
                  find . -type f -exec sha256sum {} + | sort -k 2";
    let out = as_nobody("sh", &[OsStr::new("-c"), OsStr::new(script)], dir);
    assert!(
        out.status.success(),
        "listing {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A user who is not root mounts, reads and unmounts through fusermount3, as Apptainer and
/// AppImage users do; `timeout=` unmounts by itself. With /dev/fuse closed to the user, the
/// error names /dev/fuse rather than the mount point.
#[test]
fn an_ordinary_user_mounts_reads_and_unmounts() {
    use std::os::unix::fs::PermissionsExt;
    if !testkit::can_mount() {
        return;
    }
    if !testkit::have_tool("fusermount3") {
        testkit::skip("an_ordinary_user_mounts_reads_and_unmounts: no fusermount3 (package fuse3)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let src = dir.path().join("src");
    fs::create_dir_all(src.join("sub/deeper")).unwrap();
    fs::write(src.join("top"), b"top file").unwrap();
    fs::write(src.join("sub/deeper/big"), vec![0x5au8; 300_000]).unwrap();
    fs::write(src.join("sub/empty"), b"").unwrap();
    std::os::unix::fs::symlink("deeper/big", src.join("sub/link")).unwrap();
    let image = dir.path().join("user.sqfs");
    testkit::mksquashfs(&src, &image, &["-comp", "zstd"]);
    let home = dir.path().join("home");
    fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(NOBODY), Some(NOBODY)).unwrap();
    let mnt = home.join("mnt");
    fs::create_dir(&mnt).unwrap();
    std::os::unix::fs::chown(&mnt, Some(NOBODY), Some(NOBODY)).unwrap();
    let _guard = MountGuard(mnt.clone());
    let mount_args = [OsStr::new("mount"), image.as_os_str(), mnt.as_os_str()];

    {
        let _closed = DevFuseMode::set(0o600);
        let out = as_nobody(SQUASHD, &mount_args, &home);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("/dev/fuse") && stderr.contains("chmod 0666 /dev/fuse"),
            "the error should name /dev/fuse and say what to do: {stderr}"
        );
        assert!(!is_mounted(&mnt));
    }

    let _open = DevFuseMode::set(0o666);
    let out = as_nobody(SQUASHD, &mount_args, &home);
    assert!(
        out.status.success(),
        "squashd mount as nobody: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(is_mounted(&mnt));
    let pids = daemons_of(&mnt);
    assert_eq!(pids.len(), 1);
    let daemon_uid = fs::metadata(format!("/proc/{}", pids[0])).unwrap().uid();
    assert_eq!(
        daemon_uid, NOBODY,
        "the daemon runs as the user who mounted"
    );
    assert_eq!(listing_as_nobody(&mnt), listing_as_nobody(&src));
    let out = as_nobody("fusermount3", &[OsStr::new("-u"), mnt.as_os_str()], &home);
    assert!(
        out.status.success(),
        "fusermount3 -u: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!is_mounted(&mnt));
    wait_for_no_daemon(&mnt);

    // timeout=1: the mount goes away by itself once idle, and its daemon with it.
    let out = as_nobody(
        SQUASHD,
        &[
            OsStr::new("mount"),
            image.as_os_str(),
            mnt.as_os_str(),
            OsStr::new("-o"),
            OsStr::new("timeout=1"),
        ],
        &home,
    );
    assert!(
        out.status.success(),
        "squashd mount -o timeout=1 as nobody: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(is_mounted(&mnt));
    let deadline = Instant::now() + Duration::from_secs(15);
    while is_mounted(&mnt) {
        assert!(
            Instant::now() < deadline,
            "still mounted 15 s into a 1 s idle timeout"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_for_no_daemon(&mnt);
}

/// How many mounts /proc/self/mountinfo shows on `mnt` (escaped as the kernel writes it).
fn mounts_on(mnt: &Path) -> usize {
    let escaped = mnt
        .to_str()
        .unwrap()
        .replace('\\', "\\134")
        .replace(' ', "\\040");
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.split(' ').nth(4) == Some(escaped.as_str()))
        .count()
}

/// A squashd mount whose process was killed, on a mount point with a space in its name, is
/// detached when a daemon attaches there: the daemon finds it in mountinfo, where the space is
/// written `\040`.
#[test]
fn a_dead_mount_on_a_path_with_a_space_is_cleared() {
    if !testkit::can_mount() {
        return;
    }
    let (dir, image, _) = one_file_image();
    let mnt = dir.path().join("with space");
    fs::create_dir(&mnt).unwrap();
    let _guard = MountGuard(mnt.clone());
    let mut lone = Command::new(SQUASHD)
        .arg("mount")
        .arg(&image)
        .arg(&mnt)
        .arg("-f")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while fs::read(mnt.join("f")).ok().as_deref() != Some(b"x".as_slice()) {
        assert!(Instant::now() < deadline, "the mount never answered");
        std::thread::sleep(Duration::from_millis(20));
    }
    lone.kill().unwrap();
    lone.wait().unwrap();
    assert_eq!(mounts_on(&mnt), 1);
    assert_eq!(
        errno_of(nix_statfs(&mnt)),
        libc::ENOTCONN,
        "the mount should be dead"
    );

    let socket = dir.path().join("control.sock");
    let mut daemon = Command::new(SQUASHD)
        .arg("serve")
        .arg("--socket")
        .arg(&socket)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "no control socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = Command::new(SQUASHD)
        .arg("attach")
        .arg("--socket")
        .arg(&socket)
        .arg(&image)
        .arg(&mnt)
        .output()
        .unwrap();
    let attached = out.status.success();
    let one_mount = mounts_on(&mnt);
    let reads = fs::read(mnt.join("f")).ok();
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let _ = daemon.wait();
    let mut log = String::new();
    if let Some(mut e) = daemon.stderr.take() {
        let _ = e.read_to_string(&mut log);
    }
    assert!(attached, "attach: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        one_mount, 1,
        "a live mount over the dead one instead of one mount; daemon log:\n{log}"
    );
    assert_eq!(reads.as_deref(), Some(b"x".as_slice()));
    assert!(log.contains("detached a dead squashd mount"), "{log}");
}

/// statfs(2) of `path`: it reaches the daemon, so a dead mount gives ENOTCONN.
fn nix_statfs(path: &Path) -> std::io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut buf = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: a valid C string and room for one statfs.
    if unsafe { libc::statfs(c.as_ptr(), buf.as_mut_ptr()) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
