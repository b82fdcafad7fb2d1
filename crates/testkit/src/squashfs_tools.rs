//! Runners for the reference tools, mksquashfs and unsquashfs (squashfs-tools 4.5.1), and
//! [`Built`]: one fixture tree and the images made from it.

use crate::tree::{build_tree, TreeOptions};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    if !out.status.success() {
        panic!(
            "{cmd:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// The two images a mount's tree is compared with the kernel's squashfs on: the default block
/// size with zstd, and 4 KiB blocks with gzip (many blocks per file, fragments of every size).
/// Each is (name, extra mksquashfs options), as [`Built::image`] takes them.
pub const KERNEL_COMPARED_IMAGES: [(&str, &[&str]); 2] = [
    ("zstd", &["-comp", "zstd"]),
    ("gzip4k", &["-comp", "gzip", "-b", "4096"]),
];

/// Runs `mksquashfs src out -noappend -quiet -no-progress <extra>`; panics with its output on
/// failure.
pub fn mksquashfs(src: &Path, out: &Path, extra: &[&str]) {
    run(Command::new("mksquashfs")
        .arg(src)
        .arg(out)
        .args(["-noappend", "-quiet", "-no-progress"])
        .args(extra));
}

/// Writes `files` (name, contents) into `dir/src` and builds `dir/i.sqfs` from it with
/// `mksquashfs <extra>`; returns the image's path. For tests that need a small image of their own.
pub fn image_of_files(dir: &Path, files: &[(&str, &[u8])], extra: &[&str]) -> PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).expect("create the source directory");
    for (name, contents) in files {
        std::fs::write(src.join(name), contents).expect("write a source file");
    }
    let image = dir.join("i.sqfs");
    mksquashfs(&src, &image, extra);
    image
}

/// Runs `unsquashfs <args>` and returns its output; panics with its output on failure.
pub fn unsquashfs<S: AsRef<OsStr>>(args: &[S]) -> Output {
    run(Command::new("unsquashfs").args(args))
}

/// `unsquashfs -lls -UTC -d '' IMAGE`: the long listing, one line per entry, with paths
/// relative to the root written as `/path` (the root itself as an empty path).
pub fn unsquashfs_lls(image: &Path) -> String {
    let out = unsquashfs(&[
        OsStr::new("-lls"),
        OsStr::new("-UTC"),
        OsStr::new("-n"),
        OsStr::new("-d"),
        OsStr::new(""),
        image.as_os_str(),
    ]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `unsquashfs -s IMAGE`: the superblock report.
pub fn unsquashfs_stat(image: &Path) -> String {
    let out = unsquashfs(&[OsStr::new("-s"), image.as_os_str()]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `unsquashfs -q -n -d DEST IMAGE`: extracts the whole image to `dest` (which must not exist).
/// As root it keeps owners, device nodes and all xattrs.
pub fn unsquashfs_extract(image: &Path, dest: &Path) {
    unsquashfs_extract_offset(image, 0, dest);
}

/// Like [`unsquashfs_extract`], for an image that starts `offset` bytes into its file.
pub fn unsquashfs_extract_offset(image: &Path, offset: u64, dest: &Path) {
    let offset = offset.to_string();
    unsquashfs(&[
        OsStr::new("-q"),
        OsStr::new("-n"),
        OsStr::new("-o"),
        OsStr::new(&offset),
        OsStr::new("-d"),
        dest.as_os_str(),
        image.as_os_str(),
    ]);
}

/// One fixture tree in a temporary directory, and the images and extractions made from it.
/// Everything is removed when it drops.
pub struct Built {
    /// The temporary directory holding everything.
    pub dir: tempfile::TempDir,
    /// The fixture tree.
    pub src: PathBuf,
    /// What the tree was built with.
    pub opts: TreeOptions,
    images: Mutex<HashMap<String, PathBuf>>,
}

impl Built {
    /// Builds the fixture tree with `opts`. It lives on /dev/shm when that is a usable tmpfs
    /// (tmpfs keeps xattr values over 4 KiB, which ext4 refuses), else in the system temp dir.
    pub fn new(opts: &TreeOptions) -> Built {
        let shm = Path::new("/dev/shm");
        remove_stale(shm);
        // The pid in the name lets a later run remove what a process that is gone left: a
        // fixture kept in a static is never dropped.
        let prefix = format!("{STALE_PREFIX}{}-", std::process::id());
        let dir = tempfile::Builder::new()
            .prefix(&prefix)
            .tempdir_in(shm)
            .or_else(|_| tempfile::Builder::new().prefix(&prefix).tempdir())
            .expect("create a temporary directory");
        let src = dir.path().join("tree");
        build_tree(&src, opts);
        std::fs::create_dir(dir.path().join("images")).unwrap();
        Built {
            dir,
            src,
            opts: opts.clone(),
            images: Mutex::new(HashMap::new()),
        }
    }

    /// The image `name` made by mksquashfs from the tree with the options `extra` (made on
    /// first call; later calls with the same name return the same file).
    pub fn image(&self, name: &str, extra: &[&str]) -> PathBuf {
        let mut images = self.images.lock().unwrap();
        if let Some(path) = images.get(name) {
            return path.clone();
        }
        let path = self.dir.path().join("images").join(format!("{name}.sqfs"));
        mksquashfs(&self.src, &path, extra);
        images.insert(name.to_string(), path.clone());
        path
    }

    /// Extracts `image` with unsquashfs into a fresh directory named after it, and returns it.
    pub fn extract(&self, image: &Path) -> PathBuf {
        let name = image.file_stem().unwrap().to_string_lossy();
        let dest = self.dir.path().join(format!("extract-{name}"));
        if dest.exists() {
            std::fs::remove_dir_all(&dest).unwrap();
        }
        unsquashfs_extract(image, &dest);
        dest
    }

    /// The reference view of `image`: the kernel's own squashfs mount of it (loop, read-only)
    /// where the test may mount, else an `unsquashfs -d` extraction. Returns the root to walk
    /// and, for the kernel mount, where to unmount it (`umount` it when done).
    pub fn reference(&self, image: &Path, name: &str) -> (PathBuf, Option<PathBuf>) {
        let kmnt = self.scratch(&format!("kernel-{name}"));
        std::fs::create_dir_all(&kmnt).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "squashfs", "-o", "loop,ro"])
            .arg(image)
            .arg(&kmnt)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if mounted {
            (kmnt.clone(), Some(kmnt))
        } else {
            eprintln!("note: no kernel squashfs mount here; comparing with unsquashfs -d");
            (self.extract(image), None)
        }
    }

    /// A path in the temporary directory for a test's own files (not created).
    pub fn scratch(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// How fixture directories' names begin.
const STALE_PREFIX: &str = "squashd-test-";

/// Removes fixture directories that earlier test runs left behind (a drop never ran: the run
/// was killed, or the fixture lived in a static): on tmpfs they hold memory until reboot.
/// Only those whose process is gone, or untouched for hours, so no live run loses its own.
fn remove_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let hours = std::time::Duration::from_secs(3 * 3600);
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(STALE_PREFIX) else {
            continue;
        };
        // squashd-test-PID-XXXXXX: its process is gone. Older names, or a pid reused since:
        // untouched for three hours.
        let owner_gone = rest
            .split_once('-')
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
            .is_some_and(|pid| !Path::new("/proc").join(pid.to_string()).exists());
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > hours));
        if owner_gone || old {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}
