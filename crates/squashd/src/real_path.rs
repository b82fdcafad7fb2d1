//! Resolving a path to its canonical form in two system calls.
//!
//! `std::fs::canonicalize` is glibc's `realpath`, which reads every prefix of the path as a
//! possible symbolic link: one `readlink` per component, each walking the path again from the
//! root. A daemon attaching 69 images at boot resolved each image and mount point twice and
//! spent 4% of its start-up CPU in those walks (`perf record`, bench/results/
//! 2026-11-24-serve-start.md). Opening the path once (`O_PATH`, which neither reads nor opens
//! the file's contents) and asking the kernel where that descriptor leads gives the same
//! answer for a path that exists.

use nix::fcntl::{open, OFlag};
use nix::sys::stat::Mode;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The canonical absolute path of `path` (every symbolic link followed, no `.` or `..`), as
/// [`std::fs::canonicalize`] gives, which it falls back to where /proc is not mounted.
pub(crate) fn resolve(path: &Path) -> io::Result<PathBuf> {
    open_resolved(path, OFlag::O_PATH).map(|(_, resolved)| resolved)
}

/// Opens `path` with `flags` (and `O_CLOEXEC`), following symbolic links, and returns the
/// descriptor with the canonical path of what it opened. The path is the descriptor's, so
/// checks made on either hold for both: no one can swap a symbolic link in between.
pub(crate) fn open_resolved(path: &Path, flags: OFlag) -> io::Result<(OwnedFd, PathBuf)> {
    let fd = open(path, flags | OFlag::O_CLOEXEC, Mode::empty()).map_err(io::Error::from)?;
    let resolved = match std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())) {
        // A path the kernel reports as deleted or outside this process's root is not one
        // that can be used again: let realpath say what it says.
        Ok(p) if p.is_absolute() && !p.as_os_str().as_bytes().ends_with(b" (deleted)") => p,
        _ => path.canonicalize()?,
    };
    Ok((fd, resolved))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_as_realpath_does() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir_all(real.join("inner")).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
        std::os::unix::fs::symlink("real/inner", dir.path().join("relative")).unwrap();
        for p in [
            dir.path().join("link"),
            dir.path().join("link/inner"),
            dir.path().join("relative"),
            dir.path().join("real/inner/../inner"),
            dir.path().join("link/./inner/.."),
            PathBuf::from("/"),
            PathBuf::from("."),
        ] {
            assert_eq!(
                resolve(&p).unwrap(),
                p.canonicalize().unwrap(),
                "{}",
                p.display()
            );
        }
        let missing = dir.path().join("missing");
        assert_eq!(
            resolve(&missing).unwrap_err().kind(),
            missing.canonicalize().unwrap_err().kind()
        );
    }
}
