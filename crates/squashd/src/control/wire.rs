//! One request on the wire: a JSON line, with at most one open file passed beside it
//! (SCM_RIGHTS) — the image a client opened with its own rights, so that the daemon never opens
//! an image path on behalf of a user who could not read it. Reading a request and writing its
//! answer each have a [`Deadline`] for the whole, not a timeout per read or write: a client
//! that sends or reads a byte now and then cannot hold its connection for longer.

use anyhow::{bail, Context};
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use std::fs::File;
use std::io::{BufRead, BufReader, ErrorKind, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Largest request accepted: an attach with long paths and options fits in far less.
const MAX_REQUEST: usize = 64 * 1024;

/// Sends `line` (one JSON request, newline-terminated) on `conn`, with `file` passed beside it.
pub(crate) fn send_request(
    conn: &UnixStream,
    line: &str,
    file: Option<&File>,
) -> anyhow::Result<()> {
    let bytes = line.as_bytes();
    let fds = file.map(|f| [f.as_raw_fd()]);
    let cmsgs: Vec<ControlMessage<'_>> = fds
        .iter()
        .map(|fds| ControlMessage::ScmRights(fds))
        .collect();
    let sent = sendmsg::<()>(
        conn.as_raw_fd(),
        &[IoSlice::new(bytes)],
        &cmsgs,
        MsgFlags::empty(),
        None,
    )
    .context("cannot send the request to the daemon")?;
    // The descriptor went with the first bytes; the rest of a long line follows plainly.
    if sent < bytes.len() {
        (&*conn)
            .write_all(&bytes[sent..])
            .context("cannot send the request to the daemon")?;
    }
    Ok(())
}

/// A time by which a whole read or write must be done, and how long it allowed (for the error).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    at: Instant,
    allowed: Duration,
}

impl Deadline {
    /// `allowed` from `start`.
    pub(crate) fn after(start: Instant, allowed: Duration) -> Deadline {
        Deadline {
            at: start + allowed,
            allowed,
        }
    }

    /// The time left, or the error `what` (e.g. "no complete request") once there is none.
    fn left(&self, what: &str) -> std::io::Result<Duration> {
        let left = self.at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(self.missed(what));
        }
        Ok(left)
    }

    fn missed(&self, what: &str) -> std::io::Error {
        std::io::Error::new(
            ErrorKind::TimedOut,
            format!("{what} within {} s", self.allowed.as_secs_f64()),
        )
    }

    /// `e`, or the deadline's error when `e` is the timeout of a socket option it set.
    fn explain(&self, e: std::io::Error, what: &str) -> std::io::Error {
        match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => self.missed(what),
            _ => e,
        }
    }
}

/// A connection read from with each read's timeout set to the time left until a deadline.
struct ReadBy<'a> {
    conn: &'a UnixStream,
    deadline: Deadline,
}

/// What a request that misses its deadline is told.
const NO_REQUEST: &str = "no complete request (one JSON line, sent at once)";

impl Read for ReadBy<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.conn
            .set_read_timeout(Some(self.deadline.left(NO_REQUEST)?))?;
        self.conn
            .read(buf)
            .map_err(|e| self.deadline.explain(e, NO_REQUEST))
    }
}

/// Reads one request line from `conn`, and the file passed with it, if any, all by
/// `deadline`. More than one descriptor, or anything but a descriptor, is refused (and
/// closed).
pub(crate) fn receive_request(
    conn: &UnixStream,
    deadline: Deadline,
) -> anyhow::Result<(String, Option<File>)> {
    let mut first = vec![0u8; 4096];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 4]);
    conn.set_read_timeout(Some(deadline.left(NO_REQUEST)?))?;
    let (n, mut passed) = {
        let mut iov = [IoSliceMut::new(&mut first)];
        let msg = recvmsg::<()>(
            conn.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .map_err(|e| deadline.explain(e.into(), NO_REQUEST))
        .context("cannot read the request")?;
        let mut passed: Vec<OwnedFd> = Vec::new();
        if let Ok(cmsgs) = msg.cmsgs() {
            for cmsg in cmsgs {
                if let ControlMessageOwned::ScmRights(fds) = cmsg {
                    // SAFETY: the kernel installed these descriptors in this process for this
                    // message; nothing else owns them.
                    passed.extend(
                        fds.into_iter()
                            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                    );
                }
            }
        }
        (msg.bytes, passed)
    };
    if passed.len() > 1 {
        bail!(
            "{} descriptors were passed with the request: at most one (the image) is accepted",
            passed.len()
        );
    }
    first.truncate(n);
    if !first.contains(&b'\n') && n > 0 {
        let limit = MAX_REQUEST.saturating_sub(n) as u64;
        BufReader::new(ReadBy { conn, deadline }.take(limit))
            .read_until(b'\n', &mut first)
            .context("cannot read the request")?;
    }
    let line = String::from_utf8(first).context("the request is not UTF-8")?;
    Ok((line, passed.pop().map(File::from)))
}

/// What is logged of an answer that misses its deadline.
const NO_ANSWER: &str = "the client did not take the answer";

/// Writes `answer` to `conn`, all of it by `deadline`.
pub(crate) fn send_response(
    conn: &UnixStream,
    answer: &[u8],
    deadline: Deadline,
) -> std::io::Result<()> {
    let mut rest = answer;
    while !rest.is_empty() {
        conn.set_write_timeout(Some(deadline.left(NO_ANSWER)?))?;
        match (&*conn).write(rest) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(deadline.explain(e, NO_ANSWER)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_sent_a_byte_at_a_time_misses_its_deadline() {
        let (client, server) = UnixStream::pair().unwrap();
        let dribble = std::thread::spawn(move || {
            for byte in br#"{"op": "status"                     "#.iter() {
                if (&client).write_all(&[*byte]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let start = Instant::now();
        let deadline = Deadline::after(start, Duration::from_millis(400));
        let err = receive_request(&server, deadline).unwrap_err();
        let took = start.elapsed();
        assert!(format!("{err:#}").contains("within 0.4 s"), "{err:#}");
        assert!(took < Duration::from_millis(1000), "{took:?}");
        drop(server);
        dribble.join().unwrap();
    }

    #[test]
    fn an_answer_nobody_reads_misses_its_deadline() {
        let (_client, server) = UnixStream::pair().unwrap();
        let start = Instant::now();
        let deadline = Deadline::after(start, Duration::from_millis(300));
        let err = send_response(&server, &vec![b'x'; 8 << 20], deadline).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
        assert!(start.elapsed() < Duration::from_millis(1000));
    }
}
