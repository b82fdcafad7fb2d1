//! Mounts a dead squashd left behind (killed, crashed): a FUSE mount whose daemon is gone
//! answers everything with ENOTCONN, and a kernel-path EROFS mount whose blob file system is gone
//! fails every read that misses the page cache. Both serve no one and block their mount points,
//! so `squashd serve` (at start and before each attach) and a kernel-path `squashd mount` clear
//! them. Found through /proc/self/mountinfo.

use squashd_fuse::MountPoint;
use std::path::Path;

/// A squashd mount whose daemon died (killed, crashed) answers everything with ENOTCONN and
/// would block its mount point forever: a restarted daemon (systemd's Restart=on-failure)
/// could attach nothing there. Such a mount serves no one, so it is detached.
///
/// The path may be a user's: the mount is found once ([`MountPoint::at`]), and what is checked
/// (dead, and squashd's by /proc/self/mountinfo) and unmounted is that mount, by its id, not
/// whatever the path leads to a moment later.
pub(crate) fn clear_dead_mount(mountpoint: &Path) {
    let Ok(found) = MountPoint::at(mountpoint) else {
        return;
    };
    // statfs, not stat: the kernel answers a stat of the root from attributes it keeps forever
    // (an image never changes), even once the daemon is gone; statfs always asks the daemon.
    if found.server_gone() && is_fuse_mount(found.reusable_id()) {
        match found.unmount(true) {
            Ok(()) => log_line!(
                "squashd: {}: detached a dead squashd mount left there",
                mountpoint.display()
            ),
            Err(e) => log_line!(
                "squashd: {}: cannot detach the dead mount left there: {e}",
                mountpoint.display()
            ),
        }
    }
}

/// Detaches the dead squashd mount whose root `root` is open, found dead by whoever could
/// reach it (a user's own mount refuses root, so its statfs answered ENOTCONN to that user).
/// Unmounts through the descriptor: the mount detached is the one found, wherever its path
/// leads by now. Returns whether it did.
pub(crate) fn detach_dead_mount_at(root: &std::os::fd::OwnedFd) -> bool {
    use std::os::fd::AsRawFd;
    // An empty mask: a FUSE mount that refuses root still answers (mount id and root flag
    // come from the mount, not the file system).
    let Ok(stx) = rustix::fs::statx(
        root,
        "",
        rustix::fs::AtFlags::EMPTY_PATH,
        rustix::fs::StatxFlags::empty(),
    ) else {
        return false;
    };
    let mount_root = rustix::fs::StatxAttributes::MOUNT_ROOT;
    let squashd = std::fs::read("/proc/self/mountinfo")
        .is_ok_and(|info| mount_type(&info, stx.stx_mnt_id).as_deref() == Some(b"fuse.squashd"));
    if !(stx.stx_attributes.contains(mount_root) && squashd) {
        return false;
    }
    let through = format!("/proc/self/fd/{}", root.as_raw_fd());
    let name = std::fs::read_link(&through).unwrap_or_default();
    match nix::mount::umount2(through.as_str(), nix::mount::MntFlags::MNT_DETACH) {
        Ok(()) => {
            log_line!(
                "squashd: {}: detached a dead squashd mount left there",
                name.display()
            );
            true
        }
        Err(e) => {
            log_line!(
                "squashd: {}: cannot detach the dead mount left there: {e}",
                name.display()
            );
            false
        }
    }
}

/// The file system type of the mount numbered `id` in the mountinfo text `info`.
fn mount_type(info: &[u8], id: u64) -> Option<Vec<u8>> {
    let id = id.to_string();
    info.split(|&b| b == b'\n').find_map(|line| {
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        if fields.first() != Some(&id.as_bytes()) {
            return None;
        }
        let separator = fields.iter().skip(6).position(|f| *f == b"-")?;
        fields.get(7 + separator).map(|t| t.to_vec())
    })
}

/// Detaches what a dead daemon's kernel path left behind: EROFS mounts whose metadata image
/// lies in `blob_dir` (the daemon serving it is gone, so they would fail every read that misses
/// the page cache), then the dead blob file system itself. Called before this daemon mounts
/// anything there, so every such mount is a leftover.
pub(crate) fn clear_dead_kernel_mounts(blob_dir: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let Ok(info) = std::fs::read("/proc/self/mountinfo") else {
        return;
    };
    let mut prefix = blob_dir.as_os_str().as_bytes().to_vec();
    prefix.push(b'/');
    for (id, mountpoint) in mounts_from(&info, b"erofs", &prefix) {
        let path = Path::new(std::ffi::OsStr::from_bytes(&mountpoint));
        // That very mount, if the path still leads to it.
        let unmounted = MountPoint::at(path).and_then(|found| {
            if found.reusable_id() == id {
                found.unmount(true)
            } else {
                Err(std::io::Error::other(
                    "the mount point now leads to another mount",
                ))
            }
        });
        match unmounted {
            Ok(()) => log_line!(
                "squashd: {}: detached a kernel-path mount a dead daemon left there",
                path.display()
            ),
            Err(e) => log_line!(
                "squashd: {}: cannot detach the dead kernel-path mount left there: {e}",
                path.display()
            ),
        }
    }
    if mountinfo_has(
        &info,
        blob_dir.as_os_str().as_bytes(),
        b"fuse.squashd-blobs",
    ) {
        let _ = nix::mount::umount2(blob_dir, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// (mount id, mount point) of the mounts of type `fs_type` whose source starts with
/// `source_prefix`.
fn mounts_from(info: &[u8], fs_type: &[u8], source_prefix: &[u8]) -> Vec<(u64, Vec<u8>)> {
    info.split(|&b| b == b'\n')
        .filter_map(|line| {
            let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
            let separator = fields.iter().skip(6).position(|f| *f == b"-")?;
            let source = unescape(fields.get(8 + separator)?);
            let id = std::str::from_utf8(fields[0]).ok()?.parse().ok()?;
            (fields.get(7 + separator) == Some(&fs_type) && source.starts_with(source_prefix))
                .then(|| (id, unescape(fields[4])))
        })
        .collect()
}

/// Whether /proc/self/mountinfo shows the mount numbered `id` as a squashd FUSE mount.
fn is_fuse_mount(id: u64) -> bool {
    std::fs::read("/proc/self/mountinfo").is_ok_and(|info| {
        info.split(|&b| b == b'\n').any(|line| {
            let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
            let Some(separator) = fields.iter().skip(6).position(|f| *f == b"-") else {
                return false;
            };
            fields[0] == id.to_string().as_bytes()
                && fields.get(7 + separator) == Some(&&b"fuse.squashd"[..])
        })
    })
}

/// Whether the mountinfo text `info` has a mount of type `fs_type` on `mountpoint`.
///
/// Written here rather than taken from a crate: procfs-core 0.18 leaves mountinfo's mount
/// points escaped and, for /proc/mounts, decodes tabs and backslashes but not `\040`, the
/// space this is about; lfs-core brings a regex engine. The format is the kernel's
/// (proc(5)): fields split by spaces, the mount point the fifth, optional fields ended by a
/// lone `-`, then the file system type.
fn mountinfo_has(info: &[u8], mountpoint: &[u8], fs_type: &[u8]) -> bool {
    info.split(|&b| b == b'\n').any(|line| {
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let Some(separator) = fields.iter().skip(6).position(|f| *f == b"-") else {
            return false;
        };
        fields.get(7 + separator) == Some(&fs_type)
            && fields.get(4).is_some_and(|m| unescape(m) == mountpoint)
    })
}

/// Undoes the kernel's escaping of a mount point in mountinfo: space, tab, newline, backslash
/// (and `#` in some versions) are written as a backslash and three octal digits.
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field.get(i + 1..i + 4).filter(|d| {
            field[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)) && d[0] <= b'3'
        });
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') << 6 | (d[1] - b'0') << 3 | (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_with_escapes_are_found() {
        let info = b"22 1 0:21 / /proc rw,nosuid - proc proc rw\n\
613 29 0:60 / /tmp/a\\040b\\011c\\134d rw,nosuid,nodev shared:300 master:1 - fuse.squashd /x.sqfs ro\n\
614 29 0:61 / /tmp/plain rw - fuse.other /y rw\n";
        assert!(mountinfo_has(info, b"/tmp/a b\tc\\d", b"fuse.squashd"));
        assert!(!mountinfo_has(
            info,
            b"/tmp/a\\040b\\011c\\134d",
            b"fuse.squashd"
        ));
        assert!(!mountinfo_has(info, b"/tmp/plain", b"fuse.squashd"));
        assert!(mountinfo_has(info, b"/tmp/plain", b"fuse.other"));
        assert!(!mountinfo_has(info, b"/tmp/a", b"fuse.squashd"));
        assert_eq!(
            mounts_from(info, b"fuse.squashd", b"/x"),
            vec![(613, b"/tmp/a b\tc\\d".to_vec())]
        );
        assert!(mounts_from(info, b"fuse.squashd", b"/y").is_empty());
        assert_eq!(unescape(b"a\\04"), b"a\\04");
        assert_eq!(unescape(b"\\999x"), b"\\999x");
        assert_eq!(mount_type(info, 613).as_deref(), Some(&b"fuse.squashd"[..]));
        assert_eq!(mount_type(info, 22).as_deref(), Some(&b"proc"[..]));
        assert_eq!(mount_type(info, 61), None);
    }
}
