//! File-system calls made with a user's rights, for a daemon that runs as root: each in a
//! short-lived child process that has become the user (uid, primary gid, no supplementary
//! groups) before it touches the path.
//!
//! Why a child process, not a thread of the daemon that switches its ids: on Linux ids are per
//! thread, but a thread whose real or saved uid is the user's may be signalled by that user
//! (`tgkill` with SIGSTOP or SIGKILL stops or kills the whole daemon) and traced by them;
//! switching only the file-system ids (setfsuid) avoids that, but then the kernel's FUSE
//! check, which looks at the real, effective and saved ids, still sees root: a user's own
//! mount (made without `allow_other`) refuses it, so a dead one could not be told from a live
//! one. A child that has fully become the user gets exactly the answers the user would get,
//! a user who stops or kills it stops only it, and one that hangs (a path through a stuck
//! file system of the user's) is killed after a timeout.
//!
//! Supplementary groups are dropped, not taken from the caller: so a path the user reaches
//! only through one of them is refused (the error says so), never the other way round.
//!
//! Between fork and exit the child makes only async-signal-safe system calls on memory
//! prepared before the fork (the daemon has many threads, and one may hold the allocator's
//! lock at the moment of the fork).

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, Signal};
use nix::sys::socket::{
    recvmsg, socketpair, AddressFamily, ControlMessageOwned, MsgFlags, SockFlag, SockType,
};
use nix::sys::wait::waitpid;
use nix::unistd::{fork, ForkResult, Pid};
use squashd_fuse::MountOwner;
use std::ffi::CString;
use std::io::{self, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long opening a mount point as the user may take: a path through a stuck file system is
/// given up on, not waited for.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// What a child sends back: the errno of becoming the user (0: it became them), the errno of
/// its job (0: done), and a flag the job sets.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Report {
    become_errno: i32,
    errno: i32,
    flag: i32,
}

const REPORT_BYTES: usize = std::mem::size_of::<Report>();

/// A directory opened with a user's rights.
#[derive(Debug)]
pub(crate) struct OpenedDir {
    /// The directory, open with O_PATH.
    pub(crate) dir: OwnedFd,
    /// Whether it is the root of a FUSE mount whose server is gone (its statfs answers
    /// ENOTCONN to the user).
    pub(crate) dead_mount: bool,
}

/// Opens the directory `path` (O_PATH, following symbolic links) as `user` would: the errors
/// are the ones they would get (e.g. EACCES under a directory they cannot search, whether or
/// not the path exists).
pub(crate) fn open_dir(user: MountOwner, path: &Path) -> io::Result<OpenedDir> {
    let path = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let (report, fd) = in_child(user, OPEN_TIMEOUT, &|sock| {
        // SAFETY (of every call here): raw system calls on `path`, prepared before the fork,
        // and on stack memory; all async-signal-safe.
        let fd = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return child_send(sock, errno_report(), None);
        }
        // SAFETY: a zeroed statfs is a valid value to be overwritten.
        let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open, `fs` is writable memory of the right type.
        let dead = unsafe { libc::fstatfs(fd, &mut fs) } != 0 && last_errno() == libc::ENOTCONN;
        let report = Report {
            flag: dead as i32,
            ..Report::default()
        };
        child_send(sock, report, Some(fd))
    })?;
    if report.errno != 0 {
        return Err(io::Error::from_raw_os_error(report.errno));
    }
    let dir = fd.ok_or_else(|| io::Error::other("the opening helper sent no descriptor"))?;
    Ok(OpenedDir {
        dir,
        dead_mount: report.flag != 0,
    })
}

/// Opens the file `path` for reading (following symbolic links) as `user` would: the
/// descriptor the daemon then reads is one the user could have opened.
pub(crate) fn open_file(user: MountOwner, path: &Path) -> io::Result<OwnedFd> {
    let path = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let (report, fd) = in_child(user, OPEN_TIMEOUT, &|sock| {
        // SAFETY: a raw open of `path`, prepared before the fork; async-signal-safe.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return child_send(sock, errno_report(), None);
        }
        child_send(sock, Report::default(), Some(fd))
    })?;
    if report.errno != 0 {
        return Err(io::Error::from_raw_os_error(report.errno));
    }
    fd.ok_or_else(|| io::Error::other("the opening helper sent no descriptor"))
}

/// Whether the new mount on `mountpoint` answers `user` within `timeout`: the test of
/// [`crate::readiness::root_answers`] (the root stats as node 1, and lists), made in system
/// calls a forked child may make. Root cannot make it: the kernel refuses root a user's mount
/// made without `allow_other`.
pub(crate) fn answers(user: MountOwner, mountpoint: &Path, timeout: Duration) -> bool {
    let Ok(path) = CString::new(mountpoint.as_os_str().as_bytes()) else {
        return false;
    };
    let result = in_child(user, timeout + Duration::from_secs(1), &|sock| {
        let deadline = monotonic_ns().saturating_add(timeout.as_nanos() as i64);
        let mut answered = false;
        while monotonic_ns() < deadline {
            // SAFETY (of every call here): raw system calls on `path`, prepared before the
            // fork, and on stack memory; all async-signal-safe.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            if unsafe { libc::stat(path.as_ptr(), &mut st) } == 0 && st.st_ino == 1 {
                answered = lists(&path);
                break;
            }
            let pause = libc::timespec {
                tv_sec: 0,
                tv_nsec: 1_000_000,
            };
            unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
        }
        let report = Report {
            flag: answered as i32,
            ..Report::default()
        };
        child_send(sock, report, None)
    });
    matches!(result, Ok((report, _)) if report.flag == 1)
}

/// Whether the directory `path` lists to the end (in the child: raw getdents64 into a stack
/// buffer).
fn lists(path: &CString) -> bool {
    // SAFETY: `path` is a NUL-terminated string; open, getdents64 and close are system calls
    // on it and on a stack buffer of the length given.
    unsafe {
        let fd = libc::open(
            path.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return false;
        }
        let mut buf = [0u8; 4096];
        let listed = loop {
            let n = libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len());
            if n <= 0 {
                break n == 0;
            }
        };
        libc::close(fd);
        listed
    }
}

/// Runs `job` in a child process that has become `user`, and returns what it sent: its report
/// and at most one descriptor. A child that sends nothing within `timeout` is killed.
///
/// `job` runs between fork and exit: it must make only async-signal-safe calls, allocate
/// nothing and not panic, and it ends by sending its report with [`child_send`].
fn in_child(
    user: MountOwner,
    timeout: Duration,
    job: &dyn Fn(RawFd),
) -> io::Result<(Report, Option<OwnedFd>)> {
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?;
    // SAFETY: the child makes only async-signal-safe system calls (setgroups, setresgid,
    // setresuid and what `job` makes, which its callers keep to the same rule) on memory
    // prepared before the fork, and leaves with _exit: no allocation, no lock, no unwinding,
    // no destructor runs in it.
    let child = match unsafe { fork() }? {
        ForkResult::Child => {
            let sock = theirs.as_raw_fd();
            match become_user(user) {
                Ok(()) => job(sock),
                Err(errno) => child_send(
                    sock,
                    Report {
                        become_errno: errno,
                        ..Report::default()
                    },
                    None,
                ),
            }
            // SAFETY: _exit ends the child at once, running nothing of the parent's.
            unsafe { libc::_exit(0) }
        }
        ForkResult::Parent { child } => child,
    };
    // Only the child holds its end now: its exit ends the stream.
    drop(theirs);
    let received = receive(&ours, timeout);
    if received.is_err() {
        let _ = kill(child, Signal::SIGKILL);
    }
    reap(child);
    let (report, fd) = received?;
    if report.become_errno != 0 {
        return Err(io::Error::other(format!(
            "cannot take the rights of uid {} (gid {}): {}",
            user.uid,
            user.gid,
            io::Error::from_raw_os_error(report.become_errno)
        )));
    }
    Ok((report, fd))
}

/// Drops every privilege of this (child) process: no supplementary groups, then the user's
/// gid and uid as real, effective and saved ids (which also clears its capabilities). Raw
/// system calls: glibc's wrappers would signal the parent's threads, which the child has not.
///
/// The child then belongs to the user but holds a copy of the daemon's memory and
/// descriptors: it is made non-dumpable (the kernel does so on the id change unless
/// fs.suid_dumpable says otherwise), so that the user can neither trace it, read its
/// /proc/PID/mem or fd/, nor make it dump core.
fn become_user(user: MountOwner) -> Result<(), i32> {
    let (uid, gid) = (user.uid as libc::c_long, user.gid as libc::c_long);
    // SAFETY: system calls that take plain integers (and a null list of no groups).
    let failed = unsafe {
        libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) != 0
            || libc::syscall(libc::SYS_setresgid, gid, gid, gid) != 0
            || libc::syscall(libc::SYS_setresuid, uid, uid, uid) != 0
            || libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong) != 0
    };
    if failed {
        Err(last_errno())
    } else {
        Ok(())
    }
}

/// The child's side: sends `report`, and `fd` beside it (SCM_RIGHTS), on `sock`. Builds the
/// message on the stack and makes one sendmsg: async-signal-safe.
fn child_send(sock: RawFd, report: Report, fd: Option<RawFd>) {
    // Room for one control message carrying one descriptor, aligned as cmsghdr needs.
    #[repr(C)]
    union Control {
        header: libc::cmsghdr,
        bytes: [u8; 64],
    }
    let mut bytes = [0u8; REPORT_BYTES];
    for (i, word) in [report.become_errno, report.errno, report.flag]
        .iter()
        .enumerate()
    {
        bytes[i * 4..i * 4 + 4].copy_from_slice(&word.to_ne_bytes());
    }
    let mut iov = libc::iovec {
        iov_base: bytes.as_mut_ptr().cast(),
        iov_len: bytes.len(),
    };
    let mut control = Control { bytes: [0; 64] };
    // SAFETY: a zeroed msghdr is valid; the pointers set below are to live stack memory of the
    // lengths given; CMSG_* compute within `control`, whose 64 bytes exceed CMSG_SPACE of one
    // int (24 on 64-bit Linux); sendmsg reads them and copies.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if let Some(fd) = fd {
            let space = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
            msg.msg_control = std::ptr::addr_of_mut!(control).cast();
            msg.msg_controllen = space;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        }
        libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL);
    }
}

/// The parent's side: the child's report and descriptor, or an error if it sent nothing
/// within `timeout` (or died first).
fn receive(sock: &OwnedFd, timeout: Duration) -> io::Result<(Report, Option<OwnedFd>)> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let wait = PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(
            std::os::fd::AsFd::as_fd(sock),
            PollFlags::POLLIN,
        )];
        match poll(&mut fds, wait) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no answer within {} s", timeout.as_secs()),
                ))
            }
            Ok(_) => break,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    let mut bytes = [0u8; REPORT_BYTES];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let mut iov = [IoSliceMut::new(&mut bytes)];
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    let mut fd = None;
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = cmsg {
            for raw in fds {
                // SAFETY: the kernel installed this descriptor in this process for this
                // message; nothing else owns it.
                let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                fd.get_or_insert(owned);
            }
        }
    }
    if msg.bytes != REPORT_BYTES {
        return Err(io::Error::other(
            "the helper process ended without answering",
        ));
    }
    let word = |i: usize| {
        let mut w = [0u8; 4];
        w.copy_from_slice(&bytes[i * 4..i * 4 + 4]);
        i32::from_ne_bytes(w)
    };
    Ok((
        Report {
            become_errno: word(0),
            errno: word(1),
            flag: word(2),
        },
        fd,
    ))
}

/// Waits for `child` to end; one stuck where SIGKILL cannot reach it yet (a hung network file
/// system) is waited for on a thread of its own rather than by the attach.
fn reap(child: Pid) {
    use nix::sys::wait::WaitPidFlag;
    for _ in 0..100 {
        match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
            Ok(nix::sys::wait::WaitStatus::StillAlive) => {
                std::thread::sleep(Duration::from_millis(1))
            }
            _ => return,
        }
    }
    let _ = std::thread::Builder::new()
        .name("as-user-reaper".into())
        .spawn(move || {
            let _ = waitpid(child, None);
        });
}

/// The calling thread's errno.
fn last_errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno slot, valid for reading.
    unsafe { *libc::__errno_location() }
}

/// The report of a failed call: its errno.
fn errno_report() -> Report {
    Report {
        errno: last_errno(),
        ..Report::default()
    }
}

/// The monotonic clock in nanoseconds (clock_gettime: async-signal-safe).
fn monotonic_ns() -> i64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `now`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec.saturating_mul(1_000_000_000) + now.tv_nsec
}
