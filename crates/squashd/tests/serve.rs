//! `squashd serve`, run as the real binary on images made by the real mksquashfs: many images in
//! parallel, attach/detach cycles that must not leak, fault isolation, config reload, control
//! socket permissions and a clean SIGTERM. What the mounts show is compared with the source trees
//! the images were built from. Needs root and /dev/fuse; skipped with a printed reason otherwise.
//!
//! Every daemon runs under a [`Daemon`] guard: however a test ends, the daemon is killed and
//! every mount under the test's scratch directory is lazily unmounted.
//!
//! This file is the harness ([`Daemon`], [`Scratch`], `run_as`, `squashd_as`, `raw_request_as`,
//! ...); the tests are in `serve/<topic>.rs`, declared at its end.

use serde_json::{json, Value};
use std::ffi::CString;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const SQUASHD: &str = env!("CARGO_BIN_EXE_squashd");

/// Mount points under `scope`, from /proc/self/mountinfo.
fn mounts_under(scope: &Path) -> Vec<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_mount_path)
        .filter(|m| m.starts_with(scope))
        .collect()
}

/// A path as /proc/self/mountinfo writes it, with its octal escapes (`\040` for a space,
/// `\012` for a newline...) decoded.
fn unescape_mount_path(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut path = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                path.push(d.iter().fold(0u8, |n, b| n.wrapping_mul(8) + (b - b'0')));
                i += 4;
            }
            (b, _) => {
                path.push(b);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsStr::from_bytes(&path))
}

/// The mount id (first field of /proc/self/mountinfo) of the mount at `mnt`, if any.
fn mount_id(mnt: &Path) -> Option<u64> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.len() > 4 && Path::new(f[4]) == mnt).then(|| f[0].parse().unwrap())
    })
}

fn lazy_unmount_all(scope: &Path) {
    let mut mounts = mounts_under(scope);
    // Deepest first, so nested mounts go before their parents.
    mounts.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    for m in mounts {
        let _ = Command::new("umount").arg("-l").arg(&m).status();
    }
}

/// A scratch directory on /dev/shm (or the temp dir), traversable by other users so the
/// permission test's clients can reach the socket; unmounts whatever is left under it first.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::Builder::new()
            .prefix("squashd-serve-")
            .tempdir_in("/dev/shm")
            .or_else(|_| tempfile::Builder::new().prefix("squashd-serve-").tempdir())
            .unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        Scratch { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        lazy_unmount_all(self.dir.path());
    }
}

/// Deterministic bytes: a small alphabet, so mksquashfs compresses every block (garbage written
/// over a compressed block then fails to decompress instead of reading back as data).
fn text(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..len).map(|_| b"acgt \n"[rng.usize(..6)]).collect()
}

/// A small tree, different for every `i`: a fragment-sized file, a file of several 128 KiB
/// blocks, an empty directory and a symlink.
fn make_tree(root: &Path, i: usize) {
    fs::create_dir_all(root.join("d/empty")).unwrap();
    fs::write(root.join(format!("name-{i}.txt")), text(i as u64, 100 + i)).unwrap();
    fs::write(
        root.join("d/data.bin"),
        text(1000 + i as u64, 300_000 + 997 * i),
    )
    .unwrap();
    std::os::unix::fs::symlink(format!("name-{i}.txt"), root.join("link")).unwrap();
}

/// Builds `n` trees and images under `scratch/src/<i>` and `scratch/img/<i>.sqfs`, with a
/// mount point `scratch/mnt/<i>` each; two mksquashfs at a time.
fn build_images(scratch: &Path, n: usize) -> Vec<(PathBuf, PathBuf, PathBuf)> {
    fs::create_dir_all(scratch.join("img")).unwrap();
    let all: Vec<_> = (0..n)
        .map(|i| {
            (
                scratch.join(format!("src/{i}")),
                scratch.join(format!("img/{i}.sqfs")),
                scratch.join(format!("mnt/{i}")),
            )
        })
        .collect();
    std::thread::scope(|s| {
        for half in all.chunks(n.div_ceil(2).max(1)) {
            s.spawn(move || {
                for (src, img, mnt) in half {
                    let index: usize = src.file_name().unwrap().to_str().unwrap().parse().unwrap();
                    make_tree(src, index);
                    fs::create_dir_all(mnt).unwrap();
                    testkit::mksquashfs(src, img, &["-processors", "1"]);
                }
            });
        }
    });
    all
}

fn image_entry(img: &Path, mnt: &Path, options: &str) -> String {
    format!(
        "[[image]]\npath = {:?}\nmountpoint = {:?}\noptions = {options:?}\n\n",
        img.display().to_string(),
        mnt.display().to_string()
    )
}

/// A running `squashd serve`, killed (and its mounts lazily unmounted) when dropped.
struct Daemon {
    child: Child,
    notify: UnixDatagram,
    socket: PathBuf,
    stderr: PathBuf,
    scope: PathBuf,
}

impl Daemon {
    /// Starts `squashd serve -c scope/<name>.toml` with `config` (the socket line is added),
    /// with NOTIFY_SOCKET pointing at a datagram socket of the test's own.
    fn start(scope: &Path, name: &str, config: &str) -> Daemon {
        let stderr = scope.join(format!("{name}.err"));
        let file = fs::File::create(&stderr).unwrap();
        Daemon::start_with(scope, name, config, file.into())
    }

    /// [`Daemon::start`], then waits (up to 30 s) until it says it is ready.
    fn ready(scope: &Path, name: &str, config: &str) -> Daemon {
        let mut daemon = Daemon::start(scope, name, config);
        daemon.wait_ready(Duration::from_secs(30));
        daemon
    }

    /// [`Daemon::start`] with the daemon's stderr given (then `stderr()` reads nothing).
    fn start_with(scope: &Path, name: &str, config: &str, stderr_to: Stdio) -> Daemon {
        let socket = scope.join(format!("{name}.sock"));
        let config_path = scope.join(format!("{name}.toml"));
        fs::write(
            &config_path,
            format!("socket = {:?}\n{config}", socket.display().to_string()),
        )
        .unwrap();
        let notify_path = scope.join(format!("{name}.notify"));
        let notify = UnixDatagram::bind(&notify_path).unwrap();
        let stderr = scope.join(format!("{name}.err"));
        let child = Command::new(SQUASHD)
            .args(["serve", "-c"])
            .arg(&config_path)
            .env("NOTIFY_SOCKET", &notify_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr_to)
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

    fn config_path(&self) -> PathBuf {
        self.socket.with_extension("toml")
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits for READY=1 on the notify socket; panics if the daemon exits or it takes too long.
    fn wait_ready(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        self.notify
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut buf = [0u8; 256];
        while Instant::now() < deadline {
            if let Ok(n) = self.notify.recv(&mut buf) {
                let msg = String::from_utf8_lossy(&buf[..n]);
                if msg.lines().any(|l| l == "READY=1") {
                    return;
                }
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("squashd serve exited ({status}):\n{}", self.stderr());
            }
        }
        panic!("no READY=1 within {timeout:?}:\n{}", self.stderr());
    }

    fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// One request over the control socket: a JSON line out, a JSON line back.
    fn request(&self, request: Value) -> Value {
        let mut conn = UnixStream::connect(&self.socket).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        writeln!(conn, "{request}").unwrap();
        let mut line = String::new();
        BufReader::new(conn).read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad answer {line:?}: {e}"))
    }

    fn attach(&self, image: &Path, mnt: &Path) -> Value {
        self.request(json!({"op": "attach", "image": image, "mountpoint": mnt, "options": []}))
    }

    fn detach(&self, mnt: &Path) -> Value {
        self.request(json!({"op": "detach", "mountpoint": mnt, "lazy": false}))
    }

    fn status(&self) -> Value {
        let status = self.request(json!({"op": "status"}));
        assert_eq!(status["result"], "status", "{status}");
        status
    }

    /// The status entry of the image mounted on `mnt`.
    fn image_status(&self, mnt: &Path) -> Value {
        let status = self.status();
        let images = status["images"].as_array().unwrap();
        images
            .iter()
            .find(|i| Path::new(i["mountpoint"].as_str().unwrap()) == mnt)
            .unwrap_or_else(|| panic!("{} not in status: {status}", mnt.display()))
            .clone()
    }

    fn signal(&self, signal: i32) {
        // SAFETY: kill has no memory-safety preconditions; the pid is our own child's.
        assert_eq!(unsafe { libc::kill(self.pid(), signal) }, 0);
    }

    /// SIGTERM: the daemon must exit 0 within a few seconds, remove its socket and leave no
    /// mount behind.
    fn terminate(mut self) {
        self.signal(libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "no exit 20 s after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(
            status.code(),
            Some(0),
            "exit status {status}: {}",
            self.stderr()
        );
        assert!(!self.socket.exists(), "the control socket is left behind");
        let left = mounts_under(&self.scope);
        assert!(left.is_empty(), "mounts left after SIGTERM: {left:?}");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        lazy_unmount_all(&self.scope);
    }
}

/// Walks `mnt` and compares it with `src`: names, types, modes, sizes, times, link targets and
/// content hashes.
fn assert_same_tree(src: &Path, mnt: &Path) {
    let expected = testkit::walk_disk(src);
    let actual = testkit::walk_disk(mnt);
    testkit::assert_records_eq(&expected, &actual, &mnt.display().to_string());
}

/// Reads the whole of `path` on a helper thread; `Err(errno)` if it fails, panics if it does
/// not finish within 20 s (a hang is a failure too).
fn read_with_timeout(path: &Path) -> Result<Vec<u8>, Option<i32>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(fs::read(&path).map_err(|e| e.raw_os_error()));
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("reading a damaged image hangs")
}

/// The open descriptors of `pid` and what each points to, by number.
fn fd_targets(pid: i32) -> Vec<(u32, String)> {
    let mut fds: Vec<(u32, String)> = fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let fd = e.file_name().to_str()?.parse().ok()?;
                    let target = fs::read_link(e.path()).ok()?;
                    Some((fd, target.display().to_string()))
                })
                .collect()
        })
        .unwrap_or_default();
    fds.sort();
    fds
}

/// The names of `pid`'s threads.
fn thread_names(pid: i32) -> Vec<String> {
    fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .map(|t| {
                    let comm = fs::read_to_string(t.path().join("comm")).unwrap_or_default();
                    comm.trim().to_string()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Open descriptors, threads and resident bytes of `pid`.
fn footprint(pid: i32) -> (usize, u64, u64) {
    let fds = fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count();
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        let line = status.lines().find(|l| l.starts_with(name)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    (fds, field("Threads:"), field("VmRSS:") * 1024)
}

/// The footprint once the control socket's per-client threads have finished: the same count
/// of descriptors and threads in three readings 100 ms apart (or the last reading after 5 s;
/// the machine may be loaded, and a finishing thread may wait for a core).
fn settled_footprint(pid: i32) -> (usize, u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = footprint(pid);
    let mut same = 0;
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let now = footprint(pid);
        same = if (now.0, now.1) == (last.0, last.1) {
            same + 1
        } else {
            0
        };
        if same == 2 || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// Runs `squashd <args>` as `uid` (gid the same, no supplementary groups).
fn squashd_as(uid: u32, socket: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(SQUASHD);
    cmd.args(args).env("SQUASHD_SOCKET", socket);
    run_as(uid, cmd)
}

/// Makes `cmd` run as `uid` (gid the same, no supplementary groups).
fn as_user(cmd: &mut Command, uid: u32) {
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(uid) != 0
                || libc::setuid(uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Runs `cmd` as `uid` (gid the same, no supplementary groups).
fn run_as(uid: u32, mut cmd: Command) -> Output {
    as_user(&mut cmd, uid);
    cmd.stdin(Stdio::null()).output().unwrap()
}

/// The mount options (fourth-from-last group: the per-mount options) of the mount at `mnt`.
fn mount_options(mnt: &Path) -> Option<String> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.len() > 5 && Path::new(f[4]) == mnt).then(|| f[5].to_string())
    })
}

/// Sends one raw JSON request as `uid`, with no descriptor beside it (as a hand-made client
/// would), and returns the daemon's answer.
fn raw_request_as(uid: u32, socket: &Path, request: &Value) -> Value {
    let mut cmd = Command::new("python3");
    cmd.args([
        "-c",
        "import socket,sys\n\
         s=socket.socket(socket.AF_UNIX)\n\
         s.connect(sys.argv[1])\n\
         s.sendall(sys.argv[2].encode()+b'\\n')\n\
         print(s.makefile().readline(), end='')",
    ])
    .arg(socket)
    .arg(request.to_string());
    let out = run_as(uid, cmd);
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(uid)).unwrap();
}

/// The file system type of the mount at `mnt` (from /proc/self/mountinfo).
fn mount_type(mnt: &Path) -> Option<String> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let sep = f.iter().position(|x| *x == "-")?;
        (Path::new(f[4]) == mnt).then(|| f[sep + 1].to_string())
    })
}

#[path = "serve/access.rs"]
mod access;

#[path = "serve/config.rs"]
mod config;

#[path = "serve/faults.rs"]
mod faults;

#[path = "serve/kernel_path.rs"]
mod kernel_path;

#[path = "serve/scale.rs"]
mod scale;

#[path = "serve/trust.rs"]
mod trust;

#[path = "serve/unmount_identity.rs"]
mod unmount_identity;

#[path = "serve/control_limits.rs"]
mod control_limits;

#[path = "serve/log_quoting.rs"]
mod log_quoting;

#[path = "serve/fallback.rs"]
mod fallback;

#[path = "serve/verity.rs"]
mod verity;

#[path = "serve/verity_names.rs"]
mod verity_names;

#[path = "serve/verity_costs.rs"]
mod verity_costs;

#[path = "serve/descriptors.rs"]
mod descriptors;

#[path = "serve/uring.rs"]
mod uring;

#[path = "serve/listings.rs"]
mod listings;

#[path = "serve/uring_idle.rs"]
mod uring_idle;
