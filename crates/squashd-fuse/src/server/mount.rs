//! Making a FUSE mount: mount(2) with a /dev/fuse descriptor of our own, or, for a user who may
//! not call mount(2), the setuid helper fusermount3, which mounts and hands the descriptor back
//! over a socket (`_FUSE_COMMFD`), as libfuse does.
//!
//! A privileged process may mount for another user ([`FuseMount::owner`]): the mount is then
//! made with that user's ids, so that the kernel admits that user alone (others only with
//! `allow_other`), exactly as for a mount fusermount3 made for them. `allow_root` has no kernel
//! form: the caller mounts with `allow_other` and refuses the other users itself, as libfuse
//! does.
//!
//! No thread is started and no request read: the kernel's INIT waits on the descriptor until a
//! session serves it (a daemon may fork in between).

use crate::config::MountOwner;
use nix::mount::MsFlags;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// How to mount a FUSE file system.
#[derive(Debug, Clone)]
pub struct FuseMount {
    /// The source shown in /proc/mounts.
    pub fsname: String,
    /// The type shown as `fuse.SUBTYPE`.
    pub subtype: String,
    /// Options as mount(8) and fusermount3 take them: flags (`ro`, `nosuid`, `dev`,
    /// `noexec`, `noatime`...) and the kernel's FUSE options (`default_permissions`...).
    /// Without `dev` and `suid`, the mount is `nodev` and `nosuid`.
    pub options: Vec<String>,
    /// Let every user in (the kernel's `allow_other`).
    pub allow_other: bool,
    /// Mount for this user (a privileged process only); None: for the process's own ids, through
    /// fusermount3 where mount(2) is not allowed.
    pub owner: Option<MountOwner>,
}

/// The mount flag an option names, and whether it sets or clears it.
fn flag(option: &str) -> Option<(MsFlags, bool)> {
    Some(match option {
        "ro" => (MsFlags::MS_RDONLY, true),
        "rw" => (MsFlags::MS_RDONLY, false),
        "nosuid" => (MsFlags::MS_NOSUID, true),
        "suid" => (MsFlags::MS_NOSUID, false),
        "nodev" => (MsFlags::MS_NODEV, true),
        "dev" => (MsFlags::MS_NODEV, false),
        "noexec" => (MsFlags::MS_NOEXEC, true),
        "exec" => (MsFlags::MS_NOEXEC, false),
        "noatime" => (MsFlags::MS_NOATIME, true),
        "atime" => (MsFlags::MS_NOATIME, false),
        "nodiratime" => (MsFlags::MS_NODIRATIME, true),
        "diratime" => (MsFlags::MS_NODIRATIME, false),
        "sync" => (MsFlags::MS_SYNCHRONOUS, true),
        "async" => (MsFlags::MS_SYNCHRONOUS, false),
        "dirsync" => (MsFlags::MS_DIRSYNC, true),
        _ => return None,
    })
}

impl FuseMount {
    /// Mounts on `target` (a directory, or `/proc/self/fd/N` of one) and returns the
    /// connection's /dev/fuse descriptor.
    pub fn mount(&self, target: &Path) -> io::Result<OwnedFd> {
        tracing::info!("Mounting {}", target.display());
        match self.mount_directly(target) {
            Err(e) if e.raw_os_error() == Some(libc::EPERM) && self.owner.is_none() => {
                self.mount_with_fusermount(target)
            }
            other => other,
        }
    }

    /// mount(2) with a descriptor of our own.
    fn mount_directly(&self, target: &Path) -> io::Result<OwnedFd> {
        let device = super::dev_fuse::open_device()?;
        // The root's file type, as fusermount3 passes it (the file system answers the rest).
        let root_type = std::fs::metadata(target)?.mode() & libc::S_IFMT;
        let (uid, gid) = match self.owner {
            Some(owner) => (owner.uid, owner.gid),
            None => (
                rustix::process::getuid().as_raw(),
                rustix::process::getgid().as_raw(),
            ),
        };
        let mut data = format!(
            "fd={},rootmode={root_type:o},user_id={uid},group_id={gid}",
            device.as_raw_fd()
        );
        if self.allow_other {
            data.push_str(",allow_other");
        }
        data.push_str(",subtype=");
        data.push_str(&self.subtype);
        // Not suid and not dev unless asked, as fusermount3 mounts.
        let mut flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
        for option in &self.options {
            match flag(option) {
                Some((f, true)) => flags.insert(f),
                Some((f, false)) => flags.remove(f),
                None => {
                    data.push(',');
                    data.push_str(option);
                }
            }
        }
        nix::mount::mount(
            Some(self.fsname.as_str()),
            target,
            Some("fuse"),
            flags,
            Some(data.as_str()),
        )?;
        Ok(device)
    }

    /// Has fusermount3 mount for this (unprivileged) user, and receives the descriptor.
    fn mount_with_fusermount(&self, target: &Path) -> io::Result<OwnedFd> {
        let mut options = vec![
            format!("fsname={}", self.fsname),
            format!("subtype={}", self.subtype),
        ];
        options.extend(self.options.iter().cloned());
        if self.allow_other {
            options.push("allow_other".into());
        }
        let (ours, theirs) = UnixStream::pair()?;
        let their_fd: RawFd = theirs.as_raw_fd();
        let mut command = Command::new("fusermount3");
        command
            .arg("-o")
            .arg(options.join(","))
            .arg("--")
            .arg(target)
            .env("_FUSE_COMMFD", their_fd.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // SAFETY: the closure runs in the child between fork and exec and calls only fcntl,
        // which is async-signal-safe, on a descriptor the child inherited (`theirs` lives
        // until after `spawn` returns). It clears close-on-exec so that fusermount3 gets it.
        unsafe {
            command.pre_exec(move || {
                if libc::fcntl(their_fd, libc::F_SETFD, 0) == -1 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command.spawn().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot run fusermount3 (package fuse3) to mount: {e}"),
            )
        })?;
        drop(theirs);
        let received = receive_fd(&ours);
        drop(ours);
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            let _ = pipe.read_to_string(&mut stderr);
        }
        let status = child.wait()?;
        match received {
            Ok(device) => Ok(device),
            Err(e) => {
                let said = stderr.trim();
                let kind = if said.contains("user_allow_other") || said.contains("ermission") {
                    io::ErrorKind::PermissionDenied
                } else {
                    e.kind()
                };
                Err(io::Error::new(
                    kind,
                    if said.is_empty() {
                        format!("fusermount3 failed ({status}): {e}")
                    } else {
                        said.to_string()
                    },
                ))
            }
        }
    }
}

/// Receives the descriptor fusermount3 sends (SCM_RIGHTS, with one byte of data).
fn receive_fd(socket: &UnixStream) -> io::Result<OwnedFd> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, UnixAddr};
    let mut byte = [0u8; 1];
    let mut iov = [io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!(RawFd);
    let msg = loop {
        match recvmsg::<UnixAddr>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(msg) => break msg,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = cmsg {
            let mut fds = fds.into_iter();
            if let Some(fd) = fds.next().filter(|&fd| fd >= 0) {
                // SAFETY: the kernel just installed `fd` in this process's table for this
                // message (close-on-exec); nothing else knows of it, so it has one owner.
                let device = unsafe { OwnedFd::from_raw_fd(fd) };
                for extra in fds.filter(|&fd| fd >= 0) {
                    // SAFETY: as above; a descriptor we did not ask for is closed at once.
                    drop(unsafe { OwnedFd::from_raw_fd(extra) });
                }
                return Ok(device);
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "fusermount3 sent no /dev/fuse descriptor",
    ))
}
