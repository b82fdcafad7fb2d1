//! `squashd mount`, run as the real binary on images made by the real mksquashfs, compared with
//! the kernel's own squashfs mount of the same image (or `unsquashfs -d` where the test cannot
//! loop-mount). Needs root and /dev/fuse; skipped with a printed reason otherwise.
//!
//! This file is the harness (`mount`, [`MountGuard`], `daemons_of`, `status_json`, ...); the
//! tests are in `mount/<topic>.rs`, declared at its end.

use std::ffi::{CString, OsStr};
use std::fs;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use testkit::{Built, TreeOptions};

const SQUASHD: &str = env!("CARGO_BIN_EXE_squashd");

fn is_mounted(mnt: &Path) -> bool {
    let mnt = mnt.canonicalize().unwrap_or_else(|_| mnt.to_path_buf());
    let needle = format!(" {} ", mnt.display());
    fs::read_to_string("/proc/mounts")
        .unwrap()
        .lines()
        .any(|l| l.contains(&needle))
}

/// `squashd mount IMAGE MNT -o OPTS` in the background; returns its output.
fn squashd_mount(image: &Path, mnt: &Path, opts: &str) -> Output {
    let mut cmd = Command::new(SQUASHD);
    cmd.arg("mount").arg(image).arg(mnt);
    if !opts.is_empty() {
        cmd.arg("-o").arg(opts);
    }
    cmd.stdin(Stdio::null()).output().unwrap()
}

/// Unmounts (lazily) on drop whatever is still mounted at its path, so that a failing test
/// leaves no mount behind.
#[must_use]
struct MountGuard(PathBuf);

impl Drop for MountGuard {
    fn drop(&mut self) {
        if is_mounted(&self.0) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

fn mount(image: &Path, mnt: &Path, opts: &str) -> MountGuard {
    fs::create_dir_all(mnt).unwrap();
    let out = squashd_mount(image, mnt, opts);
    assert!(
        out.status.success(),
        "squashd mount failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(is_mounted(mnt), "{} is not in /proc/mounts", mnt.display());
    MountGuard(mnt.to_path_buf())
}

/// Pids of squashd processes whose command line names `mnt`.
fn daemons_of(mnt: &Path) -> Vec<u32> {
    let needle = mnt.as_os_str().as_bytes();
    let mut pids = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let is_squashd = cmdline
            .split(|&b| b == 0)
            .next()
            .is_some_and(|a| a.ends_with(b"squashd"));
        if is_squashd && cmdline.split(|&b| b == 0).any(|a| a == needle) {
            // A zombie has no memory map: it is gone but for its exit status.
            let state = fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            if !state.contains(") Z ") {
                pids.push(pid);
            }
        }
    }
    pids
}

fn wait_for_no_daemon(mnt: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !daemons_of(mnt).is_empty() {
        assert!(
            Instant::now() < deadline,
            "squashd for {} did not exit",
            mnt.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn errno_of<T>(r: std::io::Result<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

/// A scratch directory holding an image of one file `f` ("x") and an empty mount point.
fn one_file_image() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let image = testkit::image_of_files(dir.path(), &[("f", b"x")], &[]);
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    (dir, image, mnt)
}

/// `squashd status --socket SOCKET --json`, parsed.
fn status_json(socket: &Path) -> serde_json::Value {
    let out = Command::new(SQUASHD)
        .args(["status", "--json", "--socket"])
        .arg(socket)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "squashd status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The file system type of the mount at `mnt`, from /proc/mounts.
fn fs_type(mnt: &Path) -> Option<String> {
    let mnt = mnt.canonicalize().ok()?;
    fs::read_to_string("/proc/mounts")
        .unwrap()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() > 2 && Path::new(f[1]) == mnt).then(|| f[2].to_string())
        })
}

#[path = "mount/control_socket.rs"]
mod control_socket;

#[path = "mount/errors.rs"]
mod errors;

#[path = "mount/kernel_path.rs"]
mod kernel_path;

#[path = "mount/lifecycle.rs"]
mod lifecycle;

#[path = "mount/tree.rs"]
mod tree;

#[path = "mount/unprivileged.rs"]
mod unprivileged;

#[path = "mount/read_ahead.rs"]
mod read_ahead;

#[path = "mount/fallback.rs"]
mod fallback;

#[path = "mount/uring.rs"]
mod uring;

#[path = "mount/blob_cache.rs"]
mod blob_cache;
