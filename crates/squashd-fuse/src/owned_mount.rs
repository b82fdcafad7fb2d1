//! Mounting for another user: what a privileged daemon does where fusermount3 would have
//! mounted for the user themselves.
//!
//! fuser mounts with the mounting process's own ids (`user_id` and `group_id` from getuid and
//! getgid) and, without `allow_other`, refuses in user space every request whose uid is not the
//! process's: a root daemon's mount made that way for a user admits root and refuses the user.
//! Here the mount is made with the user's ids and without `allow_other`, so that the kernel
//! itself admits that user alone (real, effective and saved ids all theirs), root included
//! among the refused, exactly as for a mount fusermount3 made. Requests are then served
//! unfiltered (`SessionACL::All`): what reaches the daemon is what the kernel let through.
//! `allow_root` has no kernel form: it mounts with `allow_other` and the adapter refuses the
//! users other than the owner and root (see [`crate::fuse::FuseAdapter`]), as libfuse does.

use crate::config::MountOwner;
use fuser::{Config, Filesystem, MountOption, Session, SessionACL};
use nix::mount::MsFlags;
use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Mounts a FUSE file system on `target` for `owner` with `options` (fuser's, as the session
/// would pass them; `allow_other` when `open_to_others`), and starts a session of `fs` on it.
pub(crate) fn session_for<FS: Filesystem>(
    fs: FS,
    target: &Path,
    owner: MountOwner,
    options: &[MountOption],
    open_to_others: bool,
    fuse_config: &Config,
) -> io::Result<Session<FS>> {
    let device: OwnedFd = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/dev/fuse")?
        .into();
    // The root's file type, as fusermount3 passes it (the file system answers the rest).
    let root_type = std::fs::metadata(target)?.mode() & libc::S_IFMT;
    let mut data = format!(
        "fd={},rootmode={root_type:o},user_id={},group_id={}",
        device.as_raw_fd(),
        owner.uid,
        owner.gid
    );
    if open_to_others {
        data.push_str(",allow_other");
    }
    // Not suid and not dev unless asked, as fuser and fusermount3 mount.
    let mut flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    let mut source = "squashd".to_string();
    for option in options {
        match option {
            MountOption::FSName(name) => source = name.clone(),
            MountOption::CUSTOM(text) => {
                data.push(',');
                data.push_str(text);
            }
            MountOption::DefaultPermissions => data.push_str(",default_permissions"),
            MountOption::RO => flags.insert(MsFlags::MS_RDONLY),
            MountOption::NoSuid => flags.insert(MsFlags::MS_NOSUID),
            MountOption::Suid => flags.remove(MsFlags::MS_NOSUID),
            MountOption::NoDev => flags.insert(MsFlags::MS_NODEV),
            MountOption::Dev => flags.remove(MsFlags::MS_NODEV),
            MountOption::NoExec => flags.insert(MsFlags::MS_NOEXEC),
            MountOption::Exec => flags.remove(MsFlags::MS_NOEXEC),
            MountOption::NoAtime => flags.insert(MsFlags::MS_NOATIME),
            MountOption::Atime => flags.remove(MsFlags::MS_NOATIME),
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "mount option {other:?} is not supported for a mount made for another user"
                    ),
                ))
            }
        }
    }
    nix::mount::mount(
        Some(source.as_str()),
        target,
        Some("fuse"),
        flags,
        Some(data.as_str()),
    )
    .map_err(io::Error::from)?;
    // Should the handshake fail, dropping the device ends the connection: what is left on the
    // target answers ENOTCONN and is cleared as a dead squashd mount by the next attach there.
    Session::from_fd(fs, device, SessionACL::All, fuse_config.clone())
}
