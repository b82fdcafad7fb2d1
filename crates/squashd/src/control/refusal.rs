//! Refusing a connection of the control socket without a thread for it: the refusal is
//! written at once on the accepting thread, and the connection then waits a moment on one
//! shared thread before it is closed.
//!
//! Why wait: a client sends its request right after connecting, and may not have sent it
//! yet when the refusal is written. Closed at once, the connection would make that send fail
//! ("broken pipe"), or close with the request unread, which resets the connection: either
//! way the client would report that instead of the refusal. So the write side is shut
//! (the client reads the refusal, then the end), and the connection is kept open, its
//! incoming bytes read and thrown away, until the client has sent its request (a newline) or
//! gone away, or [`LINGER`] has passed. A well-behaved client takes a round trip; a client
//! that never finishes costs a slot among [`MAX_LINGERING`] for two seconds, and when they are
//! all taken the oldest is closed first: refused peers can only crowd out each other.

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{send, MsgFlags};
use std::collections::VecDeque;
use std::io::{ErrorKind, Read};
use std::net::Shutdown;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::time::{Duration, Instant};

/// How long a refused connection is kept open for its client to finish sending.
const LINGER: Duration = Duration::from_secs(2);

/// Refused connections kept open at once: a few dozen peers refused in the same two seconds
/// is already more than a misconfigured host produces; beyond that they are a flood, and the
/// oldest are closed early (their refusal has been written all the same).
const MAX_LINGERING: usize = 64;

/// How often the lingering thread looks for newly refused connections while it holds some.
const TICK: Duration = Duration::from_millis(50);

/// Bytes read from one refused connection before it is closed: a request is at most this
/// long (see wire.rs), so a client sending more is not waiting for its refusal.
const MAX_DRAINED: usize = 64 * 1024;

/// Where refused connections go to be closed.
pub(crate) struct Refusals {
    lingering: SyncSender<UnixStream>,
}

impl Refusals {
    /// Starts the thread that holds refused connections until they may be closed.
    pub(crate) fn start() -> std::io::Result<Refusals> {
        let (sender, receiver) = sync_channel(MAX_LINGERING);
        std::thread::Builder::new()
            .name("control-refuse".into())
            .spawn(move || linger(receiver))?;
        Ok(Refusals { lingering: sender })
    }

    /// Writes `line` (one JSON response, newline-terminated) to `conn` without waiting, and
    /// hands the connection to the lingering thread. Never blocks.
    pub(crate) fn refuse(&self, conn: UnixStream, line: &str) {
        // A new connection's send buffer is empty, so a line of this size goes at once; if it
        // does not, the client is not reading and loses nothing it would have read.
        let _ = send(
            conn.as_raw_fd(),
            line.as_bytes(),
            MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
        );
        let _ = conn.shutdown(Shutdown::Write);
        if conn.set_nonblocking(true).is_err() {
            return;
        }
        // When the thread is behind, the connection is closed now instead.
        if let Err(TrySendError::Full(conn) | TrySendError::Disconnected(conn)) =
            self.lingering.try_send(conn)
        {
            drop(conn);
        }
    }
}

/// A refused connection kept open.
struct Lingering {
    conn: UnixStream,
    until: Instant,
    drained: usize,
}

impl Lingering {
    /// Reads what has arrived and throws it away; whether the connection may now be closed.
    fn drain(&mut self) -> bool {
        let mut buf = [0u8; 4096];
        loop {
            match (&self.conn).read(&mut buf) {
                Ok(0) => return true,
                Ok(n) => {
                    self.drained += n;
                    if buf[..n].contains(&b'\n') || self.drained > MAX_DRAINED {
                        return true;
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
                Err(_) => return true,
            }
        }
    }
}

/// The lingering thread: holds refused connections until each may be closed.
fn linger(refused: Receiver<UnixStream>) {
    let mut held: VecDeque<Lingering> = VecDeque::new();
    loop {
        if held.is_empty() {
            // Nothing to watch: sleep until the next refusal.
            match refused.recv() {
                Ok(conn) => hold(&mut held, conn),
                Err(_) => return,
            }
        }
        while let Ok(conn) = refused.try_recv() {
            hold(&mut held, conn);
        }
        let ready: Vec<bool> = {
            let mut fds: Vec<PollFd<'_>> = held
                .iter()
                .map(|l| PollFd::new(l.conn.as_fd(), PollFlags::POLLIN))
                .collect();
            let timeout = PollTimeout::try_from(TICK).unwrap_or(PollTimeout::ZERO);
            match poll(&mut fds, timeout) {
                Ok(_) => fds
                    .iter()
                    .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
                    .collect(),
                Err(_) => vec![false; fds.len()],
            }
        };
        let now = Instant::now();
        let mut ready = ready.into_iter();
        held.retain_mut(|l| {
            let done = ready.next().unwrap_or(false) && l.drain();
            !done && now < l.until
        });
    }
}

/// Keeps `conn` open for a while, closing the oldest of `held` first when they are too many.
fn hold(held: &mut VecDeque<Lingering>, conn: UnixStream) {
    if held.len() >= MAX_LINGERING {
        held.pop_front();
    }
    held.push_back(Lingering {
        conn,
        until: Instant::now() + LINGER,
        drained: 0,
    });
}
