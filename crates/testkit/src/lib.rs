//! Shared test fixtures for squashd: a fixture tree that exercises every corner of the SquashFS
//! 4.0 format, runners for the real `mksquashfs`/`unsquashfs`, and a walker that records a tree
//! on disk in a form tests compare with what squashd reads from an image. For remote images, the
//! servers tests start on 127.0.0.1: [`http`] (nginx, and an in-process server that injects
//! faults) and [`s3`] (s3s-fs, an S3-compatible server with credentials).
//!
//! Tests never compare with outputs produced by squashd itself: they build images with the real
//! mksquashfs from the tree [`build_tree`] writes, and compare what squashd reads with the source
//! tree ([`walk_disk`]) and with `unsquashfs -d` extractions of the same image.
//!
//! # What the tree holds, and why
//!
//! | part | why |
//! |---|---|
//! | names of 1 and 255 bytes, non-UTF-8 names (`caf\xe9`, `\xff\xfe`), a name with a space | directory entry name lengths (stored as size-1) and byte-exact names |
//! | directories of 0, 1 and `many_entries` entries (`big/`, names of varying length) | empty listings; the big one is larger than a metadata block, so mksquashfs writes an extended directory inode with a directory index that lookup uses |
//! | files of 0 bytes and 4096/131072/1048576 bytes ±1, 3×131072, random and compressible | exact block multiples and tail ends for the 4 KiB, 128 KiB and 1 MiB block sizes; stored-uncompressed blocks (random data does not compress) |
//! | small files | packed into fragment blocks |
//! | identical files (`dup/`) | mksquashfs's duplicate detection (`-no-duplicates` turns it off) |
//! | sparse files with holes at the start, middle and end | sparse (zero-size) block entries |
//! | with [`TreeOptions::huge_sparse`]: `huge/sparse5g`, 5 GiB + 17 bytes | a file over 4 GiB: extended file inode, 64-bit sizes and offsets |
//! | hard-link groups of 2 and 3 names across directories | one inode shared by several entries, link counts |
//! | symlinks: short, 4000-byte target, dangling, to a directory | inline targets of every length |
//! | xattrs in `user.`, `trusted.`, `security.`: a large value (6000 bytes where the file system allows, else 3800), an empty value, many keys, the same value and the same set on several files | xattr id table, key prefixes, values stored out of line (mksquashfs stores repeated values once, out of line) |
//! | fifos, a unix socket, and as root char and block devices (small and large major/minor) | the IPC and device inode types |
//! | as root: several uids/gids (up to 2^31-ish), setuid/setgid/sticky bits, mode 000 | the id table, permission bits |
//! | fixed mtimes everywhere (one past 2038) | deterministic listings; unsigned 32-bit times |
//!
//! All contents come from a seeded PRNG: the tree is the same on every run.
//!
//! ```no_run
//! use testkit::{Built, TreeOptions};
//! let built = Built::new(&TreeOptions::default());
//! let image = built.image("gzip", &["-comp", "gzip"]);
//! let expected = testkit::walk_disk(&built.src);
//! # let _ = (image, expected);
//! ```

#![forbid(unsafe_code)]

pub mod http;
pub mod raw;
pub mod s3;
pub mod sif;
mod squashfs_tools;
mod tree;
pub mod uring;
mod walk;

pub use squashfs_tools::{
    image_of_files, mksquashfs, unsquashfs, unsquashfs_extract, unsquashfs_extract_offset,
    unsquashfs_lls, unsquashfs_stat, Built, KERNEL_COMPARED_IMAGES,
};
pub use tree::{big_dir_name, build_huge_sparse, build_tree, TreeOptions, HUGE_SPARSE_LEN};
pub use walk::{
    assert_records_eq, hash_file, read_xattrs, set_link_leaders, walk_disk, ContentHash,
    ContentHasher, Kind, Record,
};

use std::process::{Command, Stdio};

/// Whether the program `name` can be run (found on PATH and executable).
pub fn have_tool(name: &str) -> bool {
    Command::new(name)
        .arg("-version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// Whether the test runs as root (owners, device nodes and trusted xattrs need it).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Reports that a test cannot run here: prints `SKIPPED: {reason}` to stderr. The caller returns.
pub fn skip(reason: &str) {
    eprintln!("SKIPPED: {reason}");
}

/// Whether the test can mount images through squashd's kernel path here: what
/// [`can_mount`] needs, and a kernel with EROFS (loaded if it is a module); prints the skip
/// line when not.
pub fn can_mount_erofs() -> bool {
    if !can_mount() {
        return false;
    }
    let has = || {
        std::fs::read_to_string("/proc/filesystems").is_ok_and(|t| {
            t.lines()
                .any(|l| l.split_whitespace().last() == Some("erofs"))
        })
    };
    if !has() {
        let _ = Command::new("modprobe").args(["-q", "erofs"]).status();
    }
    if !has() {
        skip("the kernel has no EROFS");
        return false;
    }
    true
}

/// Unmounts `mnt` (`umount`), trying again for up to a second while it is busy, and panics
/// if it cannot: tests in one binary run in parallel and spawn processes, and a child between
/// fork and exec briefly holds every descriptor the test process has open, a file just read on
/// the mount included ("target is busy").
pub fn umount(mnt: &std::path::Path) {
    for _ in 0..50 {
        let out = Command::new("umount")
            .arg(mnt)
            .output()
            .expect("umount runs");
        if out.status.success() {
            return;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("busy"), "umount {}: {err}", mnt.display());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("umount {}: still busy after a second", mnt.display());
}

/// Detaches `mnt` for clean-up (`umount -l`), whatever holds it: for reference mounts a test
/// made and no longer needs, where a busy mount must not be left behind. Errors are ignored
/// (nothing may be mounted there).
pub fn detach(mnt: &std::path::Path) {
    let _ = Command::new("umount").arg("-l").arg(mnt).output();
}

/// Whether the test can make real FUSE mounts of images here (/dev/fuse, root, and the
/// squashfs tools to build them); prints the skip line when not.
pub fn can_mount() -> bool {
    if !std::path::Path::new("/dev/fuse").exists() {
        skip("/dev/fuse is missing");
        return false;
    }
    if !is_root() {
        skip("mounting needs root in these tests");
        return false;
    }
    have_squashfs_tools()
}

/// Whether mksquashfs and unsquashfs are both available; prints the skip line when not.
pub fn have_squashfs_tools() -> bool {
    for tool in ["mksquashfs", "unsquashfs"] {
        if !have_tool(tool) {
            skip(&format!(
                "{tool} is not installed (scripts/setup.sh installs it)"
            ));
            return false;
        }
    }
    true
}
