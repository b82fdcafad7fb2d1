//! What the fallback tests of a lone mount (mount/fallback.rs) and of the daemon
//! (serve/fallback.rs) share: two real ways to make the kernel path fail.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const SQUASHD: &str = env!("CARGO_BIN_EXE_squashd");

/// Whether this kernel would take the kernel path (EROFS from files: Linux 6.12+); prints the
/// skip line when not.
pub fn kernel_path_possible() -> bool {
    if !testkit::can_mount_erofs() {
        return false;
    }
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    if (major, minor) < (6, 12) {
        eprintln!("SKIPPED: Linux {release} cannot mount EROFS from a file");
        return false;
    }
    true
}

/// An image holding `a` ("hello\n") and a symlink whose 5000-byte target EROFS cannot hold.
pub fn untranslatable_image(dir: &Path) -> PathBuf {
    let src = dir.join("untranslatable-src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), "hello\n").unwrap();
    let image = dir.join("untranslatable.sqfs");
    let target = "x".repeat(5000);
    let out = Command::new("mksquashfs")
        .arg(&src)
        .arg(&image)
        .args(["-noappend", "-quiet", "-no-progress", "-p"])
        .arg(format!("long s 0777 0 0 {target}"))
        .output()
        .unwrap();
    assert!(out.status.success(), "mksquashfs: {out:?}");
    image
}

/// Runs `script` with sh as root of a new user namespace with a mount namespace of its own,
/// in `dir`, with `$SQUASHD` set. There the kernel refuses to mount EROFS (it is not mountable
/// in a user namespace) but mounts FUSE, and every mount goes with the namespace when the
/// script ends. None (after the skip line) where user namespaces are not allowed.
pub fn in_user_namespace(dir: &Path, script: &str) -> Option<Output> {
    let unshare = ["--user", "--map-root-user", "--mount"];
    let works = Command::new("unshare")
        .args(unshare)
        .arg("true")
        .status()
        .is_ok_and(|s| s.success());
    if !works {
        eprintln!("SKIPPED: cannot make a user namespace (unshare --user)");
        return None;
    }
    let out = Command::new("timeout")
        .arg("120")
        .arg("unshare")
        .args(unshare)
        .args(["sh", "-c", script])
        .current_dir(dir)
        .env("SQUASHD", SQUASHD)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Some(out)
}
