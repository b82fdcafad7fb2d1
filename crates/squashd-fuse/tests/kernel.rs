//! What the kernel makes of the file system's answers, for the statements of `doc/SEMANTICS.md`
//! that the in-process tests (`answers.rs`) cannot show: permission checks by the kernel
//! (`default_permissions`), requests the kernel answers itself on a read-only mount, and the
//! operations this file system leaves unanswered (ENOSYS); and the mounted tree against the
//! kernel's own squashfs mount of the same image. Every test runs on both FUSE transports
//! (/dev/fuse, and io_uring where the kernel offers it: `testkit::uring::transports`). Needs root
//! and /dev/fuse (skipped otherwise); the images are made by the real mksquashfs.

use squashd_core::{Image, OpenOptions};
use squashd_fuse::server::UringMode;
use squashd_fuse::{MountConfig, MountOwner, MountProbe, MountedImage, Unmounter};
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use testkit::uring::Transport;

/// Unmounts (lazily) when dropped, so that a failed assertion leaves no mount behind.
struct Mounted {
    probe: MountProbe,
    unmounter: Unmounter,
    server: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = self.unmounter.unmount(true);
        if let Some(server) = self.server.take() {
            let _ = server.join();
        }
    }
}

/// Mounts `image` at `mnt` with `config` over `transport`, and checks (once the kernel's INIT
/// was answered) that the session took that transport.
fn mount(image: &Path, mnt: &Path, config: &MountConfig, transport: &Transport) -> Mounted {
    fs::create_dir_all(mnt).unwrap();
    let image = Image::open(image, &OpenOptions::default()).unwrap();
    let config = MountConfig {
        uring: if transport.is_ring() {
            UringMode::On
        } else {
            UringMode::Off
        },
        ..config.clone()
    };
    let mounted = MountedImage::mount(image, mnt, &config).unwrap();
    let probe = mounted.probe();
    let unmounter = mounted.unmounter();
    let server = std::thread::spawn(move || mounted.run());
    let guard = Mounted {
        probe: probe.clone(),
        unmounter,
        server: Some(server),
    };
    // The ring is registered after INIT's answer, which the first request waits for (as root
    // the kernel may refuse this one without asking: a mount made for another user).
    let _ = fs::metadata(mnt);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while probe.transport().uring != transport.is_ring() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(
        probe.transport().uring,
        transport.is_ring(),
        "{transport:?}"
    );
    guard
}

/// An image of: `private` (mode 0600), `public` (0644), `dir/` (0700) holding `inner`; all
/// owned by root.
fn image(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    fs::create_dir_all(src.join("dir")).unwrap();
    for (name, mode) in [("private", 0o600), ("public", 0o644), ("dir/inner", 0o644)] {
        fs::write(src.join(name), format!("{name}\n").repeat(1000)).unwrap();
        fs::set_permissions(src.join(name), fs::Permissions::from_mode(mode)).unwrap();
    }
    fs::set_permissions(src.join("dir"), fs::Permissions::from_mode(0o700)).unwrap();
    fs::set_permissions(&src, fs::Permissions::from_mode(0o755)).unwrap();
    let image = dir.join("i.sqfs");
    testkit::mksquashfs(&src, &image, &["-comp", "gzip"]);
    image
}

/// Whether user 65534 (nobody) can read `path`: `cat` run as that user, exit status.
fn nobody_reads(path: &Path) -> bool {
    reads_as(65534, path)
}

/// Whether `uid` (with gid the same, no other groups) can read `path`: `cat` run as that user.
fn reads_as(uid: u32, path: &Path) -> bool {
    Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .args(["--clear-groups", "cat"])
        .arg(path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run setpriv")
        .success()
}

fn errno_of<T>(r: std::io::Result<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

#[test]
fn the_kernel_checks_permissions_from_the_mode_bits_and_shown_owner() {
    if !testkit::can_mount() || !testkit::have_tool("setpriv") {
        return;
    }
    for transport in testkit::uring::transports() {
        let dir = tempfile::tempdir().unwrap();
        // Other users must be able to reach the temporary directory to try.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let image = image(dir.path());
        let mnt = dir.path().join("mnt");
        {
            // Without allow_other, only the user who mounted gets in.
            let _m = mount(&image, &mnt, &MountConfig::default(), &transport);
            assert!(
                !nobody_reads(&mnt.join("public")),
                "0644 file, no allow_other"
            );
            assert!(fs::read(mnt.join("public")).is_ok());
        }
        let config = MountConfig {
            allow_other: true,
            ..MountConfig::default()
        };
        {
            let _m = mount(&image, &mnt, &config, &transport);
            assert!(nobody_reads(&mnt.join("public")), "0644 file, other user");
            assert!(!nobody_reads(&mnt.join("private")), "0600 file, other user");
            assert!(!nobody_reads(&mnt.join("dir/inner")), "under a 0700 dir");
            assert_eq!(
                fs::read(mnt.join("private")).unwrap(),
                "private\n".repeat(1000).as_bytes(),
                "root reads everything"
            );
        }
        // With uid=65534 every file shows that owner, and the owner's bits apply to that user.
        let config = MountConfig {
            allow_other: true,
            uid: Some(65534),
            ..MountConfig::default()
        };
        let _m = mount(&image, &mnt, &config, &transport);
        assert!(nobody_reads(&mnt.join("private")), "0600 file, shown owner");
        assert!(
            nobody_reads(&mnt.join("dir/inner")),
            "0700 dir, shown owner"
        );
    }
}

/// The super options (last field of /proc/self/mountinfo) of the mount at `mnt`.
fn super_options(mnt: &Path) -> Vec<String> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = info
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(mnt.to_str().unwrap()))
        .expect("mounted");
    let last = line.split(' ').next_back().unwrap();
    last.split(',').map(str::to_string).collect()
}

/// A mount made for a user (a daemon's for a user who asked it) is that user's, as one
/// fusermount3 made: the kernel admits them alone (root too is refused), others only with
/// allow_other; allow_root lets root in besides them, and still no one else.
#[test]
fn a_mount_made_for_a_user_admits_that_user_alone() {
    if !testkit::can_mount() || !testkit::have_tool("setpriv") {
        return;
    }
    for transport in testkit::uring::transports() {
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let image = image(dir.path());
        let mnt = dir.path().join("mnt");
        let owner = MountOwner {
            uid: 65534,
            gid: 65534,
        };
        // Unless the fuse module lets CAP_SYS_ADMIN in everywhere (allow_sys_admin_access).
        let root_refused =
            !fs::read_to_string("/sys/module/fuse/parameters/allow_sys_admin_access")
                .is_ok_and(|v| v.trim() == "Y");
        let public = mnt.join("public");
        {
            let config = MountConfig {
                owner: Some(owner),
                ..MountConfig::default()
            };
            let _m = mount(&image, &mnt, &config, &transport);
            let options = super_options(&mnt);
            for want in ["user_id=65534", "group_id=65534"] {
                assert!(options.iter().any(|o| o == want), "{want}: {options:?}");
            }
            assert!(!options.iter().any(|o| o == "allow_other"), "{options:?}");
            assert!(reads_as(65534, &public), "the owner");
            assert!(!reads_as(65533, &public), "another user");
            if root_refused {
                assert_eq!(errno_of(fs::read(&public)), libc::EACCES, "root");
            }
        }
        {
            let config = MountConfig {
                owner: Some(owner),
                allow_root: true,
                ..MountConfig::default()
            };
            let _m = mount(&image, &mnt, &config, &transport);
            assert!(reads_as(65534, &public), "the owner, allow_root");
            assert!(fs::read(&public).is_ok(), "root, allow_root");
            assert!(!reads_as(65533, &public), "another user, allow_root");
        }
        let config = MountConfig {
            owner: Some(owner),
            allow_other: true,
            ..MountConfig::default()
        };
        let _m = mount(&image, &mnt, &config, &transport);
        assert!(reads_as(65533, &public), "another user, allow_other");
        assert!(!reads_as(65533, &mnt.join("private")), "0600, allow_other");
        assert!(fs::read(&public).is_ok(), "root, allow_other");
    }
}

/// The kernel opens and closes files without asking the daemon (no-open, and no FLUSH after
/// the first is refused): reading a file whose pages it holds, again and again, costs no request.
#[test]
fn opening_and_closing_a_cached_file_costs_no_request() {
    if !testkit::can_mount() {
        return;
    }
    for transport in testkit::uring::transports() {
        let dir = tempfile::tempdir().unwrap();
        let image = image(dir.path());
        let mnt = dir.path().join("mnt");
        let m = mount(&image, &mnt, &MountConfig::default(), &transport);
        let public = mnt.join("public");
        let want = fs::read(dir.path().join("src/public")).unwrap();
        assert_eq!(fs::read(&public).unwrap(), want, "first read");
        let before = m.probe.requests();
        for _ in 0..20 {
            assert_eq!(fs::read(&public).unwrap(), want);
        }
        let asked = m.probe.requests() - before;
        assert!(
            asked < 5,
            "{transport:?}: {asked} requests for 20 reads of a cached file"
        );
    }
}

#[test]
fn writes_answer_erofs_and_unsupported_requests_fall_back() {
    if !testkit::can_mount() {
        return;
    }
    for transport in testkit::uring::transports() {
        let dir = tempfile::tempdir().unwrap();
        let image = image(dir.path());
        let mnt = dir.path().join("mnt");
        let _m = mount(&image, &mnt, &MountConfig::default(), &transport);
        let public = mnt.join("public");

        // Changing anything: EROFS.
        assert_eq!(
            errno_of(fs::set_permissions(
                &public,
                fs::Permissions::from_mode(0o600)
            )),
            libc::EROFS
        );
        assert_eq!(
            errno_of(std::os::unix::fs::chown(&public, Some(1), None)),
            libc::EROFS
        );
        assert_eq!(
            errno_of(fs::OpenOptions::new().write(true).open(&public)),
            libc::EROFS
        );
        let file = fs::File::open(&public).unwrap();
        let path = std::ffi::CString::new(public.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `path` is a NUL-terminated string that outlives the call.
        assert_eq!(unsafe { libc::truncate(path.as_ptr(), 0) }, -1, "truncate");
        assert_eq!(
            errno_of::<()>(Err(std::io::Error::last_os_error())),
            libc::EROFS
        );
        assert_eq!(
            errno_of(fs::hard_link(&public, mnt.join("link"))),
            libc::EROFS
        );
        assert_eq!(
            errno_of(std::os::unix::fs::symlink("public", mnt.join("sym"))),
            libc::EROFS
        );
        assert_eq!(errno_of(fs::remove_dir(mnt.join("dir"))), libc::EROFS);
        let name = std::ffi::CString::new("user.x").unwrap();
        // SAFETY: `path` and `name` are NUL-terminated strings that outlive the call.
        assert_eq!(
            unsafe { libc::removexattr(path.as_ptr(), name.as_ptr()) },
            -1
        );
        assert_eq!(
            errno_of::<()>(Err(std::io::Error::last_os_error())),
            libc::EROFS
        );

        // Locks are the kernel's own (no lock requests reach the file system): flock works.
        // SAFETY: flock on a descriptor this test owns and keeps open across the calls.
        unsafe {
            assert_eq!(libc::flock(file.as_raw_fd(), libc::LOCK_EX), 0);
            assert_eq!(libc::flock(file.as_raw_fd(), libc::LOCK_UN), 0);
        }

        // SEEK_DATA/SEEK_HOLE: the file system does not answer lseek (ENOSYS to the kernel), which
        // then treats the file as data from start to end.
        let size = fs::metadata(&public).unwrap().len() as i64;
        // SAFETY: lseek on a descriptor this test owns.
        let (data, hole) = unsafe {
            (
                libc::lseek(file.as_raw_fd(), 0, libc::SEEK_DATA),
                libc::lseek(file.as_raw_fd(), 0, libc::SEEK_HOLE),
            )
        };
        assert_eq!((data, hole), (0, size));

        // copy_file_range from the mount falls back to a plain copy.
        let out = dir.path().join("copy");
        fs::copy(&public, &out).unwrap();
        assert_eq!(fs::read(&out).unwrap(), fs::read(&public).unwrap());
    }
}

/// The mounted tree is what the kernel's own squashfs mount of the image shows (or, where the
/// test cannot loop-mount, what unsquashfs extracts): names, types, modes, owners, sizes, times,
/// link targets, xattrs and contents, over the fixture tree (a 3000-entry directory, hard links,
/// sparse and fragment-tailed files, devices, long names) with 4 KiB and 128 KiB blocks.
#[test]
fn the_mounted_tree_is_the_kernels_squashfs_on_both_transports() {
    if !testkit::can_mount() {
        return;
    }
    let built = testkit::Built::new(&testkit::TreeOptions::default());
    for (name, extra) in testkit::KERNEL_COMPARED_IMAGES {
        let image = built.image(name, extra);
        let (reference_root, kernel) = built.reference(&image, name);
        let expected = testkit::walk_disk(&reference_root);
        for transport in testkit::uring::transports() {
            let mnt = built.scratch(&format!("mnt-{name}-{}", transport.uring_option()));
            let mounted = mount(&image, &mnt, &MountConfig::default(), &transport);
            let actual = testkit::walk_disk(&mnt);
            testkit::assert_records_eq(
                &expected,
                &actual,
                &format!("{name} over {}", transport.status_name()),
            );
            drop(mounted);
        }
        if let Some(k) = kernel {
            testkit::umount(&k);
        }
    }
}

/// A tree of `dirs` directories (one nested in each) of `files` files each, and its image.
fn walk_image(dir: &Path, dirs: usize, files: usize) -> PathBuf {
    let src = dir.join("src");
    for d in 0..dirs {
        let sub = src.join(format!("d{d:03}"));
        fs::create_dir_all(sub.join("nested")).unwrap();
        for f in 0..files {
            fs::write(sub.join(format!("f{f:03}")), "x".repeat(d * 7 + f)).unwrap();
        }
    }
    let image = dir.join("walk.sqfs");
    testkit::mksquashfs(&src, &image, &["-comp", "gzip"]);
    image
}

/// Names (and kinds, from the listing's `d_type`) under `dir`, as `find` reads them: no stat.
fn names_under(dir: &Path, base: &Path, out: &mut Vec<(PathBuf, bool)>) {
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let is_dir = entry.file_type().unwrap().is_dir();
        out.push((
            entry.path().strip_prefix(base).unwrap().to_path_buf(),
            is_dir,
        ));
        if is_dir {
            names_under(&entry.path(), base, out);
        }
    }
}

/// Every entry under `dir` with its `lstat`, as `du` walks: each directory listed, then each
/// of its entries stat'ed.
fn stat_under(dir: &Path, base: &Path, out: &mut Vec<(PathBuf, fs::Metadata)>) {
    let entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    for path in entries {
        let meta = fs::symlink_metadata(&path).unwrap();
        let is_dir = meta.is_dir();
        out.push((path.strip_prefix(base).unwrap().to_path_buf(), meta));
        if is_dir {
            stat_under(&path, base, out);
        }
    }
}

/// A walk that reads names only (`find`) makes the kernel no inode per file: listings give
/// directories only their attributes, and no request is spent on files. A walk that stats
/// every entry (`du`) then pays LOOKUPs only until listings give every attribute again.
#[test]
fn a_names_walk_costs_no_request_per_file_and_a_stat_walk_few() {
    if !testkit::can_mount() {
        return;
    }
    let (dirs, files) = (40, 30);
    for transport in testkit::uring::transports() {
        let dir = tempfile::tempdir().unwrap();
        let image = walk_image(dir.path(), dirs, files);
        let src = dir.path().join("src");
        let mut want = Vec::new();
        names_under(&src, &src, &mut want);
        want.sort();

        // `find`: the names and kinds of the source, two listing requests per directory
        // (the entries, then their end) and nothing else but the root's.
        let mnt = dir.path().join("mnt");
        let m = mount(&image, &mnt, &MountConfig::default(), &transport);
        let mut got = Vec::new();
        names_under(&mnt, &mnt, &mut got);
        got.sort();
        assert_eq!(got, want, "{transport:?}");
        let listed_dirs = (dirs * 2 + 1) as u64;
        assert_eq!(m.probe.bare_entries(), (dirs * files) as u64);
        assert_eq!(m.probe.late_lookups(), 0);
        let asked = m.probe.requests();
        assert!(
            asked <= 2 * listed_dirs + 4,
            "{transport:?}: {asked} requests to list {listed_dirs} directories"
        );
        drop(m);

        // `du` on a fresh mount: each directory listed then its entries stat'ed. The first
        // 64 file stats are LOOKUPs; then listings give every attribute, and stats are free.
        let m = mount(&image, &mnt, &MountConfig::default(), &transport);
        let mut stated = Vec::new();
        stat_under(&mnt, &mnt, &mut stated);
        stated.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(stated.len(), want.len());
        for ((path, meta), (want_path, is_dir)) in stated.iter().zip(&want) {
            assert_eq!(path, want_path);
            let source = fs::symlink_metadata(src.join(path)).unwrap();
            assert_eq!(meta.is_dir(), *is_dir);
            assert_eq!(meta.mode(), source.mode(), "{}", path.display());
            if !is_dir {
                assert_eq!(meta.len(), source.len(), "{}", path.display());
            }
        }
        assert_eq!(m.probe.late_lookups(), 64, "{transport:?}");
        let asked = m.probe.requests();
        assert!(
            asked <= 2 * listed_dirs + 64 + 2 * files as u64 + 8,
            "{transport:?}: {asked} requests to stat {} entries",
            want.len()
        );
    }
}
