//! The life of a mount's process: --ready-fd and NOTIFY_SOCKET, SIGTERM, its log, the idle
//! timeout, and a hundred mount cycles that leave nothing behind.

use super::*;

#[test]
fn ready_fd_notify_socket_and_sigterm() {
    if !testkit::can_mount() {
        return;
    }
    let (dir, image, mnt) = one_file_image();

    // Foreground with --ready-fd: a byte arrives once the mount answers.
    let mut fds = [0; 2];
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: pipe2 just made these two descriptors, owned by nothing else.
    let (mut reader, writer) = unsafe {
        use std::os::fd::FromRawFd;
        (fs::File::from_raw_fd(fds[0]), fs::File::from_raw_fd(fds[1]))
    };
    let fd = fds[1];
    let mut child = Command::new(SQUASHD);
    child.arg("mount").arg(&image).arg(&mnt).arg("-f");
    child.arg("--ready-fd").arg(fd.to_string());
    // SAFETY: clears close-on-exec of the pipe's write end in the child only.
    unsafe {
        use std::os::unix::process::CommandExt;
        child.pre_exec(move || {
            libc::fcntl(fd, libc::F_SETFD, 0);
            Ok(())
        });
    }
    let mut child = child.stdin(Stdio::null()).spawn().unwrap();
    drop(writer);
    let mut byte = [0u8; 1];
    assert_eq!(reader.read(&mut byte).unwrap(), 1);
    assert!(is_mounted(&mnt));
    assert_eq!(fs::read(mnt.join("f")).unwrap(), b"x");
    // SIGTERM unmounts and ends the daemon with success.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(!is_mounted(&mnt));

    // Background with NOTIFY_SOCKET: READY=1 arrives as a datagram.
    let sock_path = dir.path().join("notify");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let out = Command::new(SQUASHD)
        .arg("mount")
        .arg(&image)
        .arg(&mnt)
        .env("NOTIFY_SOCKET", &sock_path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let mut msg = [0u8; 64];
    let n = sock.recv(&mut msg).unwrap();
    // One state a line (sd-notify ends each with a newline).
    let msg = String::from_utf8_lossy(&msg[..n]);
    assert!(msg.lines().any(|l| l == "READY=1"), "{msg:?}");
    let pids = daemons_of(&mnt);
    assert_eq!(pids.len(), 1);
    unsafe { libc::kill(pids[0] as i32, libc::SIGINT) };
    wait_for_no_daemon(&mnt);
    assert!(!is_mounted(&mnt));
}

#[test]
fn logs_at_squashd_log_and_outlives_a_closed_stderr() {
    if !testkit::can_mount() {
        return;
    }
    let (_dir, image, mnt) = one_file_image();
    let _guard = MountGuard(mnt.clone());
    let mut child = Command::new(SQUASHD)
        .arg("mount")
        .arg(&image)
        .arg(&mnt)
        .arg("-f")
        .env("SQUASHD_LOG", "debug")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The FUSE session's own records reach the log: the first is its "Mounting" line.
    let mut stderr = child.stderr.take().unwrap();
    let mut first = Vec::new();
    let mut byte = [0u8; 1];
    while stderr.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
        first.push(byte[0]);
    }
    let first = String::from_utf8_lossy(&first);
    assert!(first.contains("Mounting"), "first log line: {first:?}");
    // Nobody reads the log any more: the mount must still come up, answer and unmount on
    // SIGTERM (the logger used to panic on EPIPE and abort mid-mount, leaving a dead mount).
    drop(stderr);
    let deadline = Instant::now() + Duration::from_secs(10);
    while fs::read(mnt.join("f")).ok().as_deref() != Some(b"x".as_slice()) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the daemon died after its stderr closed"
        );
        assert!(Instant::now() < deadline, "the mount never answered");
        std::thread::sleep(Duration::from_millis(20));
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(!is_mounted(&mnt));
}

#[test]
fn idle_timeout_unmounts() {
    if !testkit::can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let image = testkit::image_of_files(dir.path(), &[], &[]);
    let mnt = dir.path().join("mnt");
    let _mounted = mount(&image, &mnt, "timeout=0.5");
    let deadline = Instant::now() + Duration::from_secs(10);
    while is_mounted(&mnt) {
        assert!(
            Instant::now() < deadline,
            "still mounted after the idle timeout"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_for_no_daemon(&mnt);
}

/// Descriptors of this process that point at `dir` (the image, the mount) or at /dev/fuse:
/// what a mount cycle could leak here. (Counting all descriptors would race with the tests
/// running beside this one.)
fn fds_into(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|e| fs::read_link(e.path()).ok())
        .filter(|t| t.starts_with(dir) || t == Path::new("/dev/fuse"))
        .collect()
}

#[test]
fn a_hundred_mount_cycles_leave_nothing_behind() {
    if !testkit::can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let image = testkit::image_of_files(dir.path(), &[("f", b"cycle")], &[]);
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    for i in 0..100 {
        let _mounted = mount(&image, &mnt, "");
        assert_eq!(fs::read(mnt.join("f")).unwrap(), b"cycle", "cycle {i}");
        testkit::umount(&mnt);
        assert!(!is_mounted(&mnt), "cycle {i}");
    }
    wait_for_no_daemon(&mnt);
    assert_eq!(fds_into(dir.path()), Vec::<PathBuf>::new());
    let _ = std::io::stderr().flush();
}

/// `squashd mount ... --ready-fd N` with `fd` open in the child as N (close-on-exec cleared).
fn mount_with_ready_fd(image: &Path, mnt: &Path, n: i32, fd: Option<i32>) -> Output {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(SQUASHD);
    cmd.arg("mount").arg(image).arg(mnt);
    cmd.arg(format!("--ready-fd={n}"));
    if let Some(fd) = fd {
        // SAFETY: only dup2 between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(fd, n) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd.stdin(Stdio::null()).output().unwrap()
}

#[test]
fn ready_fd_must_be_a_writable_descriptor_of_the_callers() {
    if !testkit::have_squashfs_tools() {
        return;
    }
    let (_dir, image, mnt) = one_file_image();
    let _guard = MountGuard(mnt.clone());
    let mut fds = [0; 2];
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: pipe2 just made these two descriptors, owned by nothing else.
    let (_reader, _writer) = unsafe {
        use std::os::fd::FromRawFd;
        (fs::File::from_raw_fd(fds[0]), fs::File::from_raw_fd(fds[1]))
    };
    for (n, fd, says) in [
        (1, None, "standard input, output and error"),
        (2, None, "standard input, output and error"),
        // Never passed: it would be whatever squashd opens there (/dev/fuse, the image).
        (57, None, "not an open file descriptor"),
        (-3, None, "not a file descriptor"),
        // The read end of a pipe.
        (9, Some(fds[0]), "not open for writing"),
    ] {
        let out = mount_with_ready_fd(&image, &mnt, n, fd);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--ready-fd {n}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "--ready-fd {n}: {stderr}");
        assert!(stderr.contains(says), "--ready-fd {n}: {stderr}");
        assert!(!is_mounted(&mnt), "--ready-fd {n} mounted");
    }
}
