//! Issue 23, items 1, 4 and 7: the daemon unmounts the mounts it made and nothing else, whatever
//! a user does to the directories above their mount point; one image path on a file system
//! that hangs does not freeze the daemon; concurrent attaches cannot pass
//! `max_images_per_user`. As root, with a real unprivileged uid in `allow_uids`.

use super::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

const USER: u32 = 65534;

/// A user's home with a mount point of theirs, `~/a/mnt`, and beside it a directory of root's
/// with root's tmpfs mounted on `mnt` in it: the ground of the swap in which the user renames
/// `~/a` away and puts a symbolic link to root's directory in its place.
struct Ground {
    home: PathBuf,
    roots: PathBuf,
}

impl Ground {
    fn new(scratch: &Path) -> Ground {
        let home = scratch.join("home");
        let roots = scratch.join("roots");
        fs::create_dir_all(home.join("a/mnt")).unwrap();
        for dir in [&home, &home.join("a"), &home.join("a/mnt")] {
            chown(dir, USER);
        }
        fs::create_dir_all(roots.join("mnt")).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "roots-tmpfs"])
            .arg(roots.join("mnt"))
            .status()
            .unwrap();
        assert!(mounted.success());
        Ground { home, roots }
    }

    /// Where the user attaches.
    fn mountpoint(&self) -> PathBuf {
        self.home.join("a/mnt")
    }

    /// Where the user's mount is once `~/a` is renamed to `~/b`.
    fn moved(&self) -> PathBuf {
        self.home.join("b/mnt")
    }

    fn roots_tmpfs_mounted(&self) -> bool {
        mount_type(&self.roots.join("mnt")).as_deref() == Some("tmpfs")
    }

    /// The user renames `~/a` to `~/b` and puts a symbolic link to root's directory in its
    /// place: `~/a/mnt` now leads to root's tmpfs.
    fn swap(&self) {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "mv a b && ln -s \"$1\" a", "sh"])
            .arg(&self.roots)
            .current_dir(&self.home);
        let out = run_as(USER, cmd);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            fs::canonicalize(self.mountpoint()).unwrap(),
            self.roots.join("mnt")
        );
    }
}

/// Attaches `image` onto `mnt` as the user, with `options`.
fn attach_as_user(daemon: &Daemon, image: &Path, mnt: &Path, options: &[&str]) -> Output {
    let mut args = vec!["attach", image.to_str().unwrap(), mnt.to_str().unwrap()];
    for option in options {
        args.extend(["-o", option]);
    }
    squashd_as(USER, &daemon.socket, &args)
}

/// One request over the control socket, answered within `within`, or None: the daemon hangs.
fn request_within(daemon: &Daemon, request: &Value, within: Duration) -> Option<Value> {
    let mut conn = UnixStream::connect(&daemon.socket).unwrap();
    conn.set_read_timeout(Some(within)).unwrap();
    writeln!(conn, "{request}").unwrap();
    let mut line = String::new();
    BufReader::new(conn).read_line(&mut line).ok()?;
    Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad answer {line:?}: {e}")))
}

/// The attack on the idle timer: the user attaches with `timeout=2`, then makes the
/// mount point's path lead to root's tmpfs. When the timer fires, the user's own mount (now
/// at `~/b/mnt`) is the one unmounted, root's tmpfs stays, and the daemon forgets the image.
#[test]
fn the_idle_timer_unmounts_its_own_mount_not_where_the_path_leads_now() {
    if !testkit::can_mount() {
        return;
    }
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 1);
    let ground = Ground::new(scratch.path());
    let daemon = Daemon::ready(scratch.path(), "idle", &format!("allow_uids = [{USER}]\n"));
    let out = attach_as_user(&daemon, &images[0].1, &ground.mountpoint(), &["timeout=2"]);
    assert!(out.status.success(), "{out:?}");
    ground.swap();
    assert!(mount_id(&ground.moved()).is_some());
    // The timer fires some 2 s after the last request (the attach's check that it answers).
    let deadline = Instant::now() + Duration::from_secs(10);
    while mount_id(&ground.moved()).is_some()
        && ground.roots_tmpfs_mounted()
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        ground.roots_tmpfs_mounted(),
        "the idle timer unmounted root's tmpfs:\n{}",
        daemon.stderr()
    );
    assert_eq!(
        mount_id(&ground.moved()),
        None,
        "the user's mount outlived its idle timeout:\n{}",
        daemon.stderr()
    );
    let status = daemon.status();
    assert_eq!(
        status["images"].as_array().unwrap().len(),
        0,
        "an image unmounted by its idle timer is still listed: {status}"
    );
    assert!(
        daemon.stderr().contains("no longer attached"),
        "{}",
        daemon.stderr()
    );
    let out = squashd_as(
        USER,
        &daemon.socket,
        &["detach", ground.mountpoint().to_str().unwrap()],
    );
    assert!(!out.status.success(), "{out:?}");
    let unmounted = Command::new("umount")
        .arg(ground.roots.join("mnt"))
        .status()
        .unwrap();
    assert!(unmounted.success());
    daemon.terminate();
}

/// The same swap before SIGTERM: the daemon's lazy detach of everything unmounts the user's
/// mount where it is now and leaves root's tmpfs alone.
#[test]
fn sigterm_unmounts_only_the_daemons_mounts() {
    if !testkit::can_mount() {
        return;
    }
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 1);
    let ground = Ground::new(scratch.path());
    let mut daemon = Daemon::ready(
        scratch.path(),
        "sigterm",
        &format!("allow_uids = [{USER}]\n"),
    );
    let out = attach_as_user(&daemon, &images[0].1, &ground.mountpoint(), &[]);
    assert!(out.status.success(), "{out:?}");
    ground.swap();
    daemon.signal(libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(20);
    while daemon.is_running() {
        assert!(Instant::now() < deadline, "no exit 20 s after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        ground.roots_tmpfs_mounted(),
        "SIGTERM unmounted root's tmpfs:\n{}",
        daemon.stderr()
    );
    assert_eq!(
        mount_id(&ground.moved()),
        None,
        "SIGTERM left the user's mount:\n{}",
        daemon.stderr()
    );
}

/// Exchanges `~/a` (the user's directory) and `~/c` (a symbolic link to root's directory)
/// over and over while `running` is set, as a user racing a detach would
/// (renameat2(RENAME_EXCHANGE)), counting the exchanges in `flips`; leaves `~/a` the directory.
/// `~/a` is the directory for a moment (some 5 µs), then the link for longer (30 µs): a detach
/// that found the user's mount point under `~/a/mnt` is then likely to find root's tmpfs there
/// a moment later, when it unmounts (as the daemon did, by path, before issue 23).
fn flip(home: &Path, running: &AtomicBool, flips: &AtomicUsize) {
    let a = CString::new(home.join("a").as_os_str().as_bytes()).unwrap();
    let c = CString::new(home.join("c").as_os_str().as_bytes()).unwrap();
    let exchange = || {
        // SAFETY: both paths are valid NUL-terminated strings that outlive the call.
        let done = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                a.as_ptr(),
                libc::AT_FDCWD,
                c.as_ptr(),
                libc::RENAME_EXCHANGE,
            )
        };
        assert_eq!(done, 0, "{}", std::io::Error::last_os_error());
        flips.fetch_add(1, Ordering::Relaxed);
    };
    let spin = |micros: u64| {
        let until = Instant::now() + Duration::from_micros(micros);
        while Instant::now() < until {}
    };
    let mut a_is_dir = true;
    while running.load(Ordering::Relaxed) {
        exchange();
        a_is_dir = !a_is_dir;
        spin(if a_is_dir { 5 } else { 30 });
    }
    if !a_is_dir {
        exchange();
    }
}

/// Detaches racing the swap: a loop exchanging `~/a` with a symbolic link to root's directory
/// while detach requests come. Each detach answers within seconds, either unmounting the
/// user's mount or failing with a clear message; root's tmpfs is never touched. After a swap
/// that stays, the detach fails and says why.
#[test]
fn detach_racing_a_swap_unmounts_the_users_mount_or_nothing() {
    if !testkit::can_mount() {
        return;
    }
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 1);
    let ground = Ground::new(scratch.path());
    std::os::unix::fs::symlink(&ground.roots, ground.home.join("c")).unwrap();
    let daemon = Daemon::ready(scratch.path(), "race", &format!("allow_uids = [{USER}]\n"));
    let detach = json!({"op": "detach", "mountpoint": ground.mountpoint(), "lazy": false});
    // One detach, which must answer within 5 s and leave root's tmpfs: whether it detached.
    let detach_once = || {
        let answer = request_within(&daemon, &detach, Duration::from_secs(5));
        let tmpfs = ground.roots_tmpfs_mounted();
        let answer = answer.expect("a detach did not answer within 5 s");
        assert!(tmpfs, "a detach unmounted root's tmpfs: {answer}");
        if answer["result"] == "ok" {
            return true;
        }
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(message.contains("no image is attached there"), "{answer}");
        false
    };
    let (running, flips) = (AtomicBool::new(false), AtomicUsize::new(0));
    for round in 0..8 {
        let out = attach_as_user(&daemon, &images[0].1, &ground.mountpoint(), &[]);
        assert!(out.status.success(), "round {round}: {out:?}");
        running.store(true, Ordering::Relaxed);
        let detached = std::thread::scope(|s| {
            let before = flips.load(Ordering::Relaxed);
            s.spawn(|| flip(&ground.home, &running, &flips));
            // Stops the flipping however this ends, or the scope would never end.
            struct Stop<'a>(&'a AtomicBool);
            impl Drop for Stop<'_> {
                fn drop(&mut self) {
                    self.0.store(false, Ordering::Relaxed);
                }
            }
            let _stop = Stop(&running);
            while flips.load(Ordering::Relaxed) < before + 20 {
                std::thread::yield_now();
            }
            (0..20).any(|_| detach_once())
        });
        // With `~/a` the directory again, the detach goes through.
        assert!(detached || detach_once(), "round {round}");
        assert_eq!(mount_id(&ground.mountpoint()), None, "round {round}");
    }
    // A swap that stays: the path leads to root's tmpfs, which is not the user's to detach.
    let out = attach_as_user(&daemon, &images[0].1, &ground.mountpoint(), &[]);
    assert!(out.status.success(), "{out:?}");
    fs::remove_file(ground.home.join("c")).unwrap();
    ground.swap();
    let answer = request_within(&daemon, &detach, Duration::from_secs(5))
        .expect("a detach did not answer within 5 s");
    assert_eq!(answer["result"], "error", "{answer}");
    let message = answer["message"].as_str().unwrap();
    assert!(message.contains("no image is attached there"), "{answer}");
    assert!(ground.roots_tmpfs_mounted());
    assert!(mount_id(&ground.moved()).is_some());
    // SIGTERM still finds the user's mount, through the directory it was made in.
    let unmounted = Command::new("umount")
        .arg(ground.roots.join("mnt"))
        .status()
        .unwrap();
    assert!(unmounted.success());
    daemon.terminate();
}

/// Attaches `image` onto each of `mountpoints` as `uid`, all at once: one process opens the
/// image, connects once per mount point, sends every request (the image passed beside each, as
/// `squashd attach` does) and only then reads the answers.
fn attach_all_at_once_as(
    uid: u32,
    daemon: &Daemon,
    image: &Path,
    mountpoints: &[PathBuf],
) -> Vec<Value> {
    let mut cmd = Command::new("python3");
    cmd.args([
        "-c",
        "import json, os, socket, sys\n\
         sock, image, mnts = sys.argv[1], sys.argv[2], sys.argv[3:]\n\
         fd = os.open(image, os.O_RDONLY)\n\
         conns = []\n\
         for m in mnts:\n\
         \x20   c = socket.socket(socket.AF_UNIX)\n\
         \x20   c.connect(sock)\n\
         \x20   conns.append((c, m))\n\
         for c, m in conns:\n\
         \x20   req = {'op': 'attach', 'image': image, 'mountpoint': m, 'options': []}\n\
         \x20   socket.send_fds(c, [(json.dumps(req) + '\\n').encode()], [fd])\n\
         print(json.dumps([json.loads(c.makefile().readline()) for c, _ in conns]))",
    ])
    .arg(&daemon.socket)
    .arg(image)
    .args(mountpoints);
    let out = run_as(uid, cmd);
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// Six attaches at once by one user whose limit is one image: exactly one mounts.
#[test]
fn concurrent_attaches_stay_within_max_images_per_user() {
    if !testkit::can_mount() {
        return;
    }
    if !testkit::have_tool("python3") {
        eprintln!("SKIPPED: python3 is needed to send requests all at once");
        return;
    }
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 1);
    let home = scratch.path().join("home");
    let mountpoints: Vec<PathBuf> = (0..6).map(|i| home.join(format!("m{i}"))).collect();
    for dir in std::iter::once(&home).chain(&mountpoints) {
        fs::create_dir_all(dir).unwrap();
        chown(dir, USER);
    }
    let daemon = Daemon::ready(
        scratch.path(),
        "quota",
        &format!("allow_uids = [{USER}]\nmax_images_per_user = 1\n"),
    );
    let answers = attach_all_at_once_as(USER, &daemon, &images[0].1, &mountpoints);
    let attached = answers.iter().filter(|a| a["result"] == "ok").count();
    let mounted = mounts_under(&home);
    assert_eq!(attached, 1, "{answers:?}");
    assert_eq!(mounted.len(), 1, "{mounted:?}");
    for answer in answers.iter().filter(|a| a["result"] != "ok") {
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(message.contains("max_images_per_user"), "{answer}");
    }
    assert_eq!(daemon.status()["images"].as_array().unwrap().len(), 1);
    let out = squashd_as(
        USER,
        &daemon.socket,
        &["detach", mounted[0].to_str().unwrap()],
    );
    assert!(out.status.success(), "{out:?}");
    daemon.terminate();
}

/// A FUSE server the test stops with SIGSTOP; resumed and killed when dropped.
struct Stoppable(Child);

impl Stoppable {
    fn signal(&self, signal: i32) {
        // SAFETY: kill has no memory-safety preconditions; the pid is our own child's.
        assert_eq!(unsafe { libc::kill(self.0.id() as i32, signal) }, 0);
    }

    fn stop(&self) {
        self.signal(libc::SIGSTOP);
    }

    fn resume(&self) {
        self.signal(libc::SIGCONT);
    }
}

impl Drop for Stoppable {
    fn drop(&mut self) {
        self.resume();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An image whose file lies on a FUSE file system that stops answering (squashfuse, stopped):
/// status still answers within seconds, saying the image's file is unknown, and attaches and
/// detaches of other images go on.
#[test]
fn an_image_path_that_hangs_does_not_freeze_the_daemon() {
    if !testkit::can_mount() {
        return;
    }
    if !testkit::have_tool("squashfuse") {
        eprintln!("SKIPPED: squashfuse is needed to serve an image's file from a FUSE mount");
        return;
    }
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 2);
    // Started first, so dropped last: a daemon thread stuck on the stopped server can only end
    // (and the daemon be killed) once that server is resumed.
    let daemon = Daemon::ready(scratch.path(), "hang", "");
    // The first image, inside a squashfs image that squashfuse serves.
    let outer_src = scratch.path().join("outer-src");
    fs::create_dir_all(&outer_src).unwrap();
    fs::copy(&images[0].1, outer_src.join("inner.sqfs")).unwrap();
    let outer = scratch.path().join("outer.sqfs");
    testkit::mksquashfs(&outer_src, &outer, &[]);
    let outer_mnt = scratch.path().join("outer");
    fs::create_dir_all(&outer_mnt).unwrap();
    let squashfuse = Command::new("squashfuse")
        .arg("-f")
        .arg(&outer)
        .arg(&outer_mnt)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let squashfuse = Stoppable(squashfuse);
    let inner = outer_mnt.join("inner.sqfs");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !inner.exists() {
        assert!(Instant::now() < deadline, "squashfuse did not mount");
        std::thread::sleep(Duration::from_millis(20));
    }
    let answer = daemon.attach(&inner, &images[0].2);
    assert_eq!(answer["result"], "ok", "{answer}");
    assert_eq!(daemon.image_status(&images[0].2)["health"], "ok");
    squashfuse.stop();
    // squashfuse's entries and attributes time out after 1 s: then a stat of the path asks
    // the stopped server, and waits.
    std::thread::sleep(Duration::from_millis(1500));
    let within = Duration::from_secs(5);
    let status = request_within(&daemon, &json!({"op": "status"}), within)
        .expect("status did not answer within 5 s");
    let images_listed = status["images"].as_array().unwrap();
    assert_eq!(images_listed.len(), 1, "{status}");
    let health = images_listed[0]["health"].as_str().unwrap();
    assert!(health.starts_with("unknown"), "{health}");
    let (_, other, other_mnt) = &images[1];
    let attach = json!({"op": "attach", "image": other, "mountpoint": other_mnt, "options": []});
    let answer = request_within(&daemon, &attach, within).expect("attach did not answer");
    assert_eq!(answer["result"], "ok", "{answer}");
    // A second status while the first stat still hangs: answers again, as quickly.
    let started = Instant::now();
    let status = request_within(&daemon, &json!({"op": "status"}), within)
        .expect("a second status did not answer within 5 s");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(status["images"].as_array().unwrap().len(), 2, "{status}");
    let detach = json!({"op": "detach", "mountpoint": other_mnt, "lazy": false});
    let answer = request_within(&daemon, &detach, within).expect("detach did not answer");
    assert_eq!(answer["result"], "ok", "{answer}");
    squashfuse.resume();
    let answer = daemon.detach(&images[0].2);
    assert_eq!(answer["result"], "ok", "{answer}");
    let unmounted = Command::new("umount")
        .arg("-l")
        .arg(&outer_mnt)
        .status()
        .unwrap();
    assert!(unmounted.success());
    daemon.terminate();
}
