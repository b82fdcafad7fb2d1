//! Where a user may mount: the mount point is found with the user's own rights, and must be a
//! directory on a file system where user mounts make sense, writable, and not itself the root
//! of a mount. (That it is the user's own directory is checked in access.rs.)

use super::as_user;
use anyhow::bail;
use squashd_fuse::MountOwner;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// File systems a user may mount on, by their statfs magic number: fusermount3's list
/// (libfuse `util/fuser_conf.c`, `check_nonroot_fstype`): disk, network and cluster file
/// systems, tmpfs and ramfs, overlays, and FUSE. Pseudo file systems are not on it: a user owns
/// `/proc/PID` of their own processes and, with delegation, cgroup directories, and a mount
/// there would hide a process from `ps` or stand in for kernel files root trusts. Unlike
/// fusermount3, autofs is left out too: a directory still of type autofs is a trigger the
/// automounter serves to everyone, not a place of the user's (opening the mount point with
/// O_DIRECTORY has already triggered it, so a mounted home shows its real file system).
const USER_MOUNTABLE: &[(u64, &str)] = &[
    (0x6175_6673, "aufs"),
    (0xCA45_1A4E, "bcachefs"),
    (0x9123_683E, "btrfs"),
    (0x00C3_6400, "ceph"),
    (0xFF53_4D42, "cifs"),
    (0x0000_F15F, "ecryptfs"),
    (0x2011_BAB0, "exfat"),
    (0x0000_EF53, "ext2/ext3/ext4"),
    (0xF2F5_2010, "f2fs"),
    (0x6573_5546, "fuse"),
    (0x0116_1970, "gfs2"),
    (0x4750_4653, "gpfs"),
    (0x0000_482B, "hfsplus"),
    (0x0000_72B6, "jffs2"),
    (0x3153_464A, "jfs"),
    (0x0BD0_0BD0, "lustre"),
    (0x0000_4D44, "vfat"),
    (0x0000_564C, "ncpfs"),
    (0x0000_6969, "nfs"),
    (0x0000_3434, "nilfs2"),
    (0x5346_544E, "ntfs"),
    (0x7366_746E, "ntfs3"),
    (0x5346_414F, "openafs"),
    (0x794C_7630, "overlay"),
    (0xAAD7_AAEA, "panfs"),
    (0x5265_4973, "reiserfs"),
    (0xFE53_4D42, "smb2"),
    (0x7371_7368, "squashfs"),
    (0x0102_1994, "tmpfs"),
    (0x2405_1905, "ubifs"),
    (0x1803_1977, "wekafs"),
    (0x7366_7500_5346_544E, "ufsd"),
    (0x5846_5342, "xfs"),
    (0x2FC1_2FC1, "zfs"),
    (0x8584_58F6, "ramfs"),
];

/// Pseudo file systems, named in the refusal (they are refused for not being in
/// [`USER_MOUNTABLE`], like every type not named there).
const PSEUDO: &[(u64, &str)] = &[
    (0x0000_9FA0, "proc"),
    (0x6265_6572, "sysfs"),
    (0x0027_E0EB, "cgroup"),
    (0x6367_7270, "cgroup2"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x7363_6673, "securityfs"),
    (0x6265_6570, "configfs"),
    (0xCAFE_4A11, "bpf"),
    (0x6165_676C, "pstore"),
    (0xDE5E_81E4, "efivarfs"),
    (0x0000_1CD1, "devpts"),
    (0x1980_0202, "mqueue"),
    (0x9584_58F6, "hugetlbfs"),
    (0x6573_5543, "fusectl"),
    (0x4249_4E4D, "binfmt_misc"),
    (0xF97C_FF8C, "selinuxfs"),
    (0x0000_0187, "autofs"),
    (0x6E73_6673, "nsfs"),
];

/// Opens the mount point `path` as `user` would (O_PATH), so that its errors are the ones the
/// user would get and tell nothing of paths they cannot reach; returns it with its canonical
/// path. A dead squashd mount there (its daemon gone) that the user can reach is detached
/// first, as the daemon does for root at every attach.
pub(crate) fn open_for_user(user: MountOwner, path: &Path) -> io::Result<(OwnedFd, PathBuf)> {
    let mut opened = as_user::open_dir(user, path)?;
    if opened.dead_mount && crate::dead_mounts::detach_dead_mount_at(&opened.dir) {
        opened = as_user::open_dir(user, path)?;
    }
    let resolved = path_of(&opened.dir)?;
    Ok((opened.dir, resolved))
}

/// The path the kernel knows `dir` by. Unlike [`crate::real_path::open_resolved`], no fallback
/// to resolving the path given: that would walk it as root.
fn path_of(dir: &OwnedFd) -> io::Result<PathBuf> {
    let path = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd()))?;
    if !path.is_absolute() || path.as_os_str().as_bytes().ends_with(b" (deleted)") {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "it was removed or lies outside the daemon's root",
        ));
    }
    Ok(path)
}

/// Refuses a mount point (open as `dir`, known as `path`) that a user may not mount on: the
/// root of a mount (covering a whole mount hides it from everyone; a directory inside it
/// serves as well), on a file system not in [`USER_MOUNTABLE`], or on a read-only mount
/// (fusermount3 asks for write access, which a read-only mount refuses: a directory inside an
/// image is not the user's to cover, whatever owner the image gives it). Root can make these
/// checks even on a user's own FUSE mount, which refuses it everything else.
pub(crate) fn check_for_user(dir: &OwnedFd, path: &Path, uid: u32) -> anyhow::Result<()> {
    // An empty mask: the answer needs no attribute the file system would be asked for (so a
    // FUSE mount that refuses root still answers).
    let stx = rustix::fs::statx(
        dir,
        "",
        rustix::fs::AtFlags::EMPTY_PATH,
        rustix::fs::StatxFlags::empty(),
    )
    .map_err(io::Error::from)
    .map_err(|e| anyhow::Error::new(e).context(format!("{}: cannot stat", path.display())))?;
    let root = rustix::fs::StatxAttributes::MOUNT_ROOT;
    if stx.stx_attributes_mask.contains(root) && stx.stx_attributes.contains(root) {
        bail!(
            "permission denied: {} is the root of a mount, which uid {uid} may not cover; \
             attach onto a directory inside it",
            path.display()
        );
    }
    let fs = rustix::fs::fstatfs(dir)
        .map_err(io::Error::from)
        .map_err(|e| anyhow::Error::new(e).context(format!("{}: cannot statfs", path.display())))?;
    let raw = fs.f_type;
    // A 32-bit kernel long holds magic numbers of the high bit set as negative numbers.
    #[allow(clippy::unnecessary_cast)]
    let magic = if std::mem::size_of_val(&raw) == 4 {
        raw as u32 as u64
    } else {
        raw as u64
    };
    if !USER_MOUNTABLE.iter().any(|(m, _)| *m == magic) {
        let kind = PSEUDO
            .iter()
            .find(|(m, _)| *m == magic)
            .map(|(_, name)| format!("a {name} file system"))
            .unwrap_or_else(|| format!("a file system of type {magic:#x}"));
        bail!(
            "permission denied: {} is on {kind}, where uid {uid} may not mount (as for \
             fusermount3); attach onto a directory on a disk, network or tmpfs file system",
            path.display()
        );
    }
    #[allow(clippy::unnecessary_cast)]
    if fs.f_flags as u64 & libc::ST_RDONLY as u64 != 0 {
        bail!(
            "permission denied: {} is on a read-only mount, where uid {uid} may not mount; \
             attach onto a directory of a writable file system",
            path.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_disjoint_and_pseudo_file_systems_are_refused() {
        for (magic, name) in PSEUDO {
            assert!(
                !USER_MOUNTABLE.iter().any(|(m, _)| m == magic),
                "{name} is on both lists"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let open = |p: &Path| -> OwnedFd { std::fs::File::open(p).unwrap().into() };
        assert!(check_for_user(&open(dir.path()), dir.path(), 1).is_ok());
        let proc_self = Path::new("/proc/self");
        let e = check_for_user(&open(proc_self), proc_self, 1).unwrap_err();
        assert!(e.to_string().contains("on a proc file system"), "{e}");
    }
}
