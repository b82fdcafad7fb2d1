//! Where a mount squashd made is, and which mount it is: so that unmounting reaches that mount
//! and nothing else.
//!
//! A mount point's path is not squashd's to trust: a user who owns a directory above it can
//! rename that directory and put a symbolic link to another place where it was, and umount2(2)
//! on the path then unmounts whatever is mounted at the other place (root's tmpfs, for one).
//! So a mount is remembered as
//! - an `O_PATH` descriptor of the directory that holds the mount point, and the mount point's
//!   name in it. While something is mounted on it, the mount point can be neither renamed nor
//!   removed (the kernel answers EBUSY), so that name in that directory leads to it whatever
//!   is done to the path above;
//! - the mount's id (`statx` `STATX_MNT_ID_UNIQUE`, Linux 6.8+; the reusable `STATX_MNT_ID`
//!   where the kernel or the file system gives no other), taken right after mounting.
//!
//! Unmounting looks the name up in that directory again (never following a symbolic link),
//! and unmounts only a mount root whose id is the one recorded: anything else is reported
//! and left alone.
//!
//! No descriptor inside the mount itself is kept: it would hold the mount busy, and every
//! unmount but a lazy one would fail with EBUSY.

use rustix::fs::{AtFlags, Mode, OFlags, StatxAttributes, StatxFlags};
use rustix::mount::UnmountFlags;
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Which mount is mounted somewhere, as the kernel tells mounts apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MountId {
    /// `STATX_MNT_ID_UNIQUE`, never reused while the system runs (Linux 6.8+; None where the
    /// kernel, or a FUSE mount that lets root in on nothing, does not give it).
    unique: Option<u64>,
    /// `STATX_MNT_ID`, the id /proc/self/mountinfo shows, reused once that mount is gone.
    reusable: u64,
    /// The device of its file system (major, minor).
    dev: (u32, u32),
}

/// What lies at a mount point now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Found {
    mount: MountId,
    /// Whether it is the root of a mount (false: a plain directory, a symbolic link...).
    mount_root: bool,
}

/// How far squashd has unmounted the mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unmounted {
    No,
    /// Detached from the namespace (lazily), perhaps still in use.
    Lazily,
    /// Gone.
    Fully,
}

/// A mount squashd made, and how to reach that mount (and only it) to unmount it.
#[derive(Debug)]
pub struct MountPoint {
    /// The mount point's canonical path when it was mounted, for messages.
    path: PathBuf,
    /// The directory holding the mount point (`O_PATH`).
    parent: OwnedFd,
    /// The mount point's name in `parent`.
    name: OsString,
    mount: MountId,
    /// Serializes unmounts (the idle timer, a signal, a detach), so that none of them acts on
    /// a mount point another has already unmounted.
    unmounted: Mutex<Unmounted>,
}

/// The error of an unmount that found something other than squashd's mount at the mount
/// point (see [`MountPoint::unmount`]).
#[derive(Debug, thiserror::Error)]
#[error(
    "{}: the mount point no longer leads to the mount squashd made there (moved, detached by \
     someone else, or covered by another mount); nothing was unmounted",
    .0.display()
)]
pub struct NotOurMount(PathBuf);

impl NotOurMount {
    /// Whether `error` is this one.
    pub fn is(error: &io::Error) -> bool {
        error.get_ref().is_some_and(|e| e.is::<NotOurMount>())
    }
}

impl MountPoint {
    /// Records the mount just made on `target`, known as `path`: `target` is either the
    /// canonical path of the mount point or `/proc/self/fd/N`, a descriptor of the directory
    /// mounted on (as a daemon mounts what it checked). Call it right after mounting, before
    /// anyone else could unmount it.
    ///
    /// Nothing here walks from inside the new mount: a FUSE mount whose requests are not served
    /// yet would make the walk wait for ever (a permission check of its root asks the server).
    pub fn record(target: &Path, path: &Path) -> io::Result<MountPoint> {
        let context = |e: io::Error| {
            io::Error::new(
                e.kind(),
                format!(
                    "{}: cannot record the mount made there: {e}",
                    path.display()
                ),
            )
        };
        let (parent, name) = if target.parent() == Some(Path::new("/proc/self/fd")) {
            // Through the descriptor, not the path again: its link leads to the very directory
            // mounted on (a /proc/self/fd link does not cross into what is mounted there), and
            // that directory's ".." is the directory it is in, however either is named now.
            let parent = rustix::fs::open(
                target.join(".."),
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(io::Error::from)
            .map_err(context)?;
            // The name: it cannot change while something is mounted on it.
            let here = std::fs::read_link(target).map_err(context)?;
            (parent, here.file_name().map(|n| n.to_os_string()))
        } else {
            let dir = target.parent().unwrap_or(target);
            let parent = rustix::fs::open(
                dir,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(io::Error::from)
            .map_err(context)?;
            (parent, target.file_name().map(|n| n.to_os_string()))
        };
        let name = name.ok_or_else(|| {
            context(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a mount point without a name (the root) cannot be told apart",
            ))
        })?;
        let found = look_up(&parent, &name).map_err(context)?;
        if !found.mount_root {
            return Err(context(io::Error::other("nothing is mounted there")));
        }
        Ok(MountPoint {
            path: path.to_path_buf(),
            parent,
            name,
            mount: found.mount,
            unmounted: Mutex::new(Unmounted::No),
        })
    }

    /// The mount at `path` now, whoever made it (to clear one a dead daemon left): the
    /// directories above `path` are followed once, here, and never again.
    pub fn at(path: &Path) -> io::Result<MountPoint> {
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: not a mount point squashd can unmount", path.display()),
            ));
        };
        let parent = rustix::fs::open(
            dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let found = look_up(&parent, name)?;
        if !found.mount_root {
            return Err(io::Error::other(format!(
                "{}: nothing is mounted there",
                path.display()
            )));
        }
        Ok(MountPoint {
            path: path.to_path_buf(),
            parent,
            name: name.to_os_string(),
            mount: found.mount,
            unmounted: Mutex::new(Unmounted::No),
        })
    }

    /// The mount point's canonical path when it was mounted.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The mount's id as /proc/self/mountinfo shows it (its first field).
    pub fn reusable_id(&self) -> u64 {
        self.mount.reusable
    }

    /// Whether the mount is a FUSE mount whose server is gone (statfs answers ENOTCONN): it
    /// serves no one. Asked of the mount recorded, through a descriptor of its root; false if
    /// the mount point leads elsewhere now.
    pub fn server_gone(&self) -> bool {
        let Ok(root) = self.open_root() else {
            return false;
        };
        look_up(&root, "").is_ok_and(|found| self.check(&found).is_ok())
            && rustix::fs::fstatfs(&root).err() == Some(rustix::io::Errno::NOTCONN)
    }

    /// The root of what is mounted on the mount point now (`O_PATH`), not following a
    /// symbolic link. It keeps that mount busy while open.
    fn open_root(&self) -> io::Result<OwnedFd> {
        rustix::fs::openat(
            &self.parent,
            self.name.as_os_str(),
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| self.not_ours_if_gone(e.into()))
    }

    /// The path of the mount point as it is now (its directory may have been renamed since),
    /// through this process's descriptor of that directory: `/proc/self/fd/N/name`.
    fn through_descriptor(&self) -> PathBuf {
        let mut path = format!("/proc/self/fd/{}/", self.parent.as_raw_fd()).into_bytes();
        path.extend_from_slice(self.name.as_encoded_bytes());
        PathBuf::from(OsString::from_vec(path))
    }

    /// Unmounts the mount recorded, if the mount point still leads to it; `lazy` detaches it
    /// even while busy (as `umount -l`). Anything else found there is left mounted and the
    /// error is a [`NotOurMount`]. A mount already unmounted through this `MountPoint`
    /// (another thread's unmount, the idle timer's) is not unmounted again.
    ///
    /// As root, with umount2(2). Otherwise (a user's own `squashd mount`) through the setuid
    /// `fusermount3 -u`, on the mount point's path as it is now.
    pub fn unmount(&self, lazy: bool) -> io::Result<()> {
        let mut unmounted = self.unmounted.lock().unwrap_or_else(|e| e.into_inner());
        match (*unmounted, lazy) {
            (Unmounted::Fully, _) | (Unmounted::Lazily, true) => return Ok(()),
            (Unmounted::Lazily, false) => {
                return Err(io::Error::new(
                    io::ErrorKind::ResourceBusy,
                    format!(
                        "{}: already detached lazily, and still in use",
                        self.path.display()
                    ),
                ))
            }
            (Unmounted::No, _) => {}
        }
        if rustix::process::geteuid().is_root() {
            if lazy {
                self.detach_checked()?;
            } else {
                self.unmount_checked()?;
            }
        } else {
            self.check(&look_up(&self.parent, &self.name)?)?;
            self.fusermount(lazy)?;
        }
        *unmounted = if lazy {
            Unmounted::Lazily
        } else {
            Unmounted::Fully
        };
        Ok(())
    }

    /// Whether `found` is the mount recorded.
    fn check(&self, found: &Found) -> io::Result<()> {
        if found.mount_root && found.mount == self.mount {
            Ok(())
        } else {
            Err(io::Error::other(NotOurMount(self.path.clone())))
        }
    }

    /// A lazy unmount, with no window between the check and the unmount: the mount root is
    /// opened (`O_PATH`, not following a symbolic link), checked through that descriptor, and
    /// unmounted through the same descriptor's `/proc/self/fd` link, which leads to exactly
    /// the mount the descriptor holds. (A lazy unmount does not mind that the descriptor keeps
    /// the mount busy.)
    fn detach_checked(&self) -> io::Result<()> {
        let root = self.open_root()?;
        self.check(&look_up(&root, "")?)?;
        rustix::mount::unmount(
            format!("/proc/self/fd/{}", root.as_raw_fd()),
            UnmountFlags::DETACH,
        )?;
        Ok(())
    }

    /// A plain unmount, which fails (EBUSY) while the mount is in use. It cannot go through a
    /// descriptor of the mount root as [`MountPoint::detach_checked`] does: that descriptor
    /// would itself keep the mount busy. So the mount point is checked and then unmounted by
    /// `/proc/self/fd/<parent>/<name>`, with `UMOUNT_NOFOLLOW`.
    ///
    /// Why the moment between the check and umount2 is safe: that path walks from a directory
    /// this process holds open to one name in it, never through a symbolic link, and that
    /// name is the mount point of the checked mount, which no one can rename or remove while
    /// it is mounted. So umount2 can only reach the topmost mount on that very mount point.
    /// squashd's own unmounts of this mount are serialized (`unmounted`), so that is ours
    /// unless, in that moment, someone else unmounted ours and mounted something else on the
    /// same directory, or mounted something over ours: only root, or the user who owns the
    /// directory with their own `fusermount3` mount, can mount there, and unmounting a
    /// user's own mount on their own directory gives them nothing they could not do
    /// themselves. Had a mount come over ours in that moment, that one went and ours is still
    /// there: this is looked at afterwards and reported, so that no one waits for ours to end.
    fn unmount_checked(&self) -> io::Result<()> {
        let found = look_up(&self.parent, &self.name).map_err(|e| self.not_ours_if_gone(e))?;
        self.check(&found)?;
        rustix::mount::unmount(self.through_descriptor(), UnmountFlags::NOFOLLOW)?;
        if look_up(&self.parent, &self.name).is_ok_and(|after| self.check(&after).is_ok()) {
            return Err(io::Error::other(NotOurMount(self.path.clone())));
        }
        Ok(())
    }

    /// A mount point that is no longer there was not ours to find.
    fn not_ours_if_gone(&self, e: io::Error) -> io::Error {
        if matches!(
            e.raw_os_error(),
            Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
        ) {
            io::Error::other(NotOurMount(self.path.clone()))
        } else {
            e
        }
    }

    /// `fusermount3 -u`, for a user's own mount (the setuid helper checks that it is theirs).
    fn fusermount(&self, lazy: bool) -> io::Result<()> {
        // The path as it is now: the directory may have been renamed since the mount.
        let now = std::fs::read_link(format!("/proc/self/fd/{}", self.parent.as_raw_fd()))
            .map(|dir| dir.join(&self.name))
            .unwrap_or_else(|_| self.path.clone());
        let mut cmd = Command::new("fusermount3");
        cmd.arg("-u").arg("-q");
        if lazy {
            cmd.arg("-z");
        }
        let status = cmd.arg(&now).status()?;
        if status.success() {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "{}: fusermount3 -u failed: {status}",
                now.display()
            )))
        }
    }
}

/// What is at `name` in `dir` (`""`: `dir` itself), not following a symbolic link and not
/// asking the file system anything (`AT_STATX_DONT_SYNC`): the mount's ids are the kernel's,
/// and a FUSE mount whose server is stopped, dead or not started yet must not hang this.
fn look_up(dir: &impl AsFd, name: impl rustix::path::Arg) -> io::Result<Found> {
    let mut flags = AtFlags::SYMLINK_NOFOLLOW | AtFlags::STATX_DONT_SYNC;
    let name = name.as_cow_c_str()?;
    if name.is_empty() {
        flags |= AtFlags::EMPTY_PATH;
    }
    // Asking for nothing: a FUSE mount refuses every attribute to a process its options do not
    // let in (root, on a user's mount without allow_root), but answers that, and the kernel
    // adds the mount's (reusable) id and whether it is a mount root.
    let plain = rustix::fs::statx(dir, &*name, flags, StatxFlags::empty())?;
    if plain.stx_mask & libc::STATX_MNT_ID == 0 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this kernel does not tell mounts apart (statx gives mount ids from Linux 5.8)",
        ));
    }
    let unique = rustix::fs::statx(
        dir,
        &*name,
        flags,
        StatxFlags::from_bits_retain(libc::STATX_MNT_ID_UNIQUE),
    )
    .ok()
    .filter(|u| u.stx_mask & libc::STATX_MNT_ID_UNIQUE != 0)
    .map(|u| u.stx_mnt_id);
    Ok(Found {
        mount: MountId {
            unique,
            reusable: plain.stx_mnt_id,
            dev: (plain.stx_dev_major, plain.stx_dev_minor),
        },
        mount_root: plain.stx_attributes.contains(StatxAttributes::MOUNT_ROOT),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::mount::{mount, MountFlags};

    fn mount_tmpfs(at: &Path) {
        std::fs::create_dir_all(at).unwrap();
        mount("tmpfs", at, "tmpfs", MountFlags::empty(), None).unwrap();
    }

    /// A scratch directory whose mounts are detached, however the test ends, before it goes.
    struct Scratch(tempfile::TempDir);

    impl Drop for Scratch {
        fn drop(&mut self) {
            for mnt in ["a/mnt", "b/mnt", "other/mnt"] {
                let path = self.0.path().join(mnt);
                while is_mounted(&path) {
                    if rustix::mount::unmount(&path, UnmountFlags::DETACH).is_err() {
                        break;
                    }
                }
            }
        }
    }

    /// Whether a mount root is at `path` (following it, as a user's path would be).
    fn is_mounted(path: &Path) -> bool {
        let stx = rustix::fs::statx(rustix::fs::CWD, path, AtFlags::empty(), StatxFlags::empty());
        stx.is_ok_and(|s| s.stx_attributes.contains(StatxAttributes::MOUNT_ROOT))
    }

    /// A mount point whose directory was renamed and replaced by a symbolic link to where
    /// another mount is: the recorded mount is unmounted, the other one stays. A mount
    /// replaced behind the record's back, or covered by another, is not unmounted.
    #[test]
    fn unmounts_the_mount_recorded_and_nothing_else() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("SKIPPED: mounting a tmpfs needs root");
            return;
        }
        let scratch = Scratch(tempfile::tempdir().unwrap());
        let dir = scratch.0.path();
        let (ours, theirs) = (dir.join("a/mnt"), dir.join("other/mnt"));
        mount_tmpfs(&ours);
        mount_tmpfs(&theirs);
        let recorded = MountPoint::record(&ours, &ours).unwrap();
        std::fs::rename(dir.join("a"), dir.join("b")).unwrap();
        std::os::unix::fs::symlink(dir.join("other"), dir.join("a")).unwrap();
        recorded.unmount(false).unwrap();
        assert!(is_mounted(&theirs), "the mount the path leads to now went");
        assert!(!is_mounted(&dir.join("b/mnt")), "the mount recorded stays");
        // Done once: a second unmount (the idle timer after a detach) touches nothing.
        mount_tmpfs(&dir.join("b/mnt"));
        recorded.unmount(false).unwrap();
        assert!(is_mounted(&dir.join("b/mnt")));
        rustix::mount::unmount(dir.join("b/mnt"), UnmountFlags::empty()).unwrap();

        // Replaced: unmounted behind the record's back and another mount made in its place
        // (which may well get the same reusable id).
        let replaced = MountPoint::record(&theirs, &theirs).unwrap();
        rustix::mount::unmount(&theirs, UnmountFlags::empty()).unwrap();
        mount_tmpfs(&theirs);
        for lazy in [false, true] {
            let e = replaced.unmount(lazy).unwrap_err();
            assert!(NotOurMount::is(&e), "{e}");
            assert!(is_mounted(&theirs));
        }
        // Covered by another mount: that one is not ours either, and both stay.
        let covered = MountPoint::record(&theirs, &theirs).unwrap();
        mount("tmpfs", &theirs, "tmpfs", MountFlags::empty(), None).unwrap();
        let e = covered.unmount(true).unwrap_err();
        assert!(NotOurMount::is(&e), "{e}");
        for _ in 0..2 {
            rustix::mount::unmount(&theirs, UnmountFlags::empty()).unwrap();
        }
        assert!(!is_mounted(&theirs));
        // A lazy unmount through the descriptor of the root it checked.
        mount_tmpfs(&theirs);
        let busy = std::fs::File::open(&theirs).unwrap();
        let lazy = MountPoint::record(&theirs, &theirs).unwrap();
        assert_eq!(
            lazy.unmount(false).unwrap_err().raw_os_error(),
            Some(libc::EBUSY)
        );
        lazy.unmount(true).unwrap();
        assert!(!is_mounted(&theirs));
        drop(busy);
    }
}
