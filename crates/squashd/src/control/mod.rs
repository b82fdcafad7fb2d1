//! The control socket of `squashd serve`, and of a `squashd mount -o control=SOCKET`: a Unix
//! stream socket, mode 0600 (root-only by default; 0666 when the daemon's config's `allow_uids`
//! names other users), where each connection carries one JSON request and gets one JSON
//! response. The peer's credentials are taken from the kernel (SO_PEERCRED) on every
//! connection, and an attach may carry the image as an open descriptor (SCM_RIGHTS): what a
//! caller may do with them is decided by [`crate::serve`]'s access policy.
//!
//! The socket may be open to every local user, so what a connection costs is bounded before
//! anything else: its peer is checked on the accepting thread as soon as it is accepted, and a
//! refused peer is answered there and closed by one shared thread ([`refusal`]); an accepted
//! one gets a thread only within the limits per uid and in all ([`limits`]), and must send its
//! whole request, and take its whole answer, each within a deadline ([`wire::Deadline`]).

mod limits;
pub(crate) mod protocol;
mod refusal;
pub(crate) mod report;
mod wire;

use anyhow::Context;
use limits::Admission;
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use protocol::{Request, Response};
use refusal::Refusals;
use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wire::Deadline;

pub(crate) use wire::send_request;

/// How long a client may take to send its whole request, from when it is accepted. A client
/// sends its request in one write right after connecting; ten seconds is for a machine so
/// loaded that the client waits for a core, not for a client that sends a byte at a time.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client may take to read its whole answer (a status report may fill the socket's
/// buffer several times over).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Who sent a request, as the kernel vouches for it, and what they handed over with it.
#[derive(Debug)]
pub(crate) struct Caller {
    /// The peer's effective uid when it connected.
    pub(crate) uid: u32,
    /// The peer's effective gid when it connected.
    pub(crate) gid: u32,
    /// The image file the peer opened itself and passed with an attach (SCM_RIGHTS).
    pub(crate) image: Option<File>,
}

impl Caller {
    /// A request the daemon makes of itself (its config): the daemon's own rights.
    pub(crate) fn daemon() -> Caller {
        Caller {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
            image: None,
        }
    }

    /// Whether the caller may do anything the daemon may: root, or the daemon's own user.
    pub(crate) fn is_privileged(&self) -> bool {
        is_privileged(self.uid)
    }
}

/// Whether `uid` may do anything the daemon may: root, or the daemon's own user.
fn is_privileged(uid: u32) -> bool {
    uid == 0 || uid == nix::unistd::geteuid().as_raw()
}

/// What answers the requests of a control socket: the daemon's registry, or a lone mount.
pub(crate) trait Controller: Send + Sync + 'static {
    /// Carries out one request of `caller`.
    fn dispatch(&self, request: Request, caller: Caller) -> Response;
}

/// Binds the control socket at `path` (replacing a stale one) and serves it on a thread.
pub(crate) fn listen(
    path: &Path,
    allow_uids: Vec<u32>,
    registry: Arc<dyn Controller>,
) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{}: cannot create", dir.display()))?;
    }
    if UnixStream::connect(path).is_ok() {
        anyhow::bail!("{}: another daemon is listening there", path.display());
    }
    let _ = std::fs::remove_file(path);
    let listener =
        UnixListener::bind(path).with_context(|| format!("{}: cannot listen", path.display()))?;
    // Root-only unless the config names other users: they must be able to connect for the
    // peer check to let them in, so the socket is then open to all (0666) and the check on
    // every connection (SO_PEERCRED against allow_uids) is what refuses the others.
    let mode = if allow_uids.is_empty() { 0o600 } else { 0o666 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("{}: cannot set its mode to {mode:o}", path.display()))?;
    let gate = Gate {
        allow_uids,
        admission: Arc::new(Admission::default()),
        refusals: Refusals::start().context("cannot start the control socket's threads")?,
        registry,
    };
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(conn) => gate.admit(conn),
                    // Out of descriptors (or memory): let some connections finish rather
                    // than spin on the error.
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            }
        })?;
    Ok(())
}

/// What the accepting thread decides with: who may connect, how many are being served, where
/// refused connections go.
struct Gate {
    allow_uids: Vec<u32>,
    admission: Arc<Admission>,
    refusals: Refusals,
    registry: Arc<dyn Controller>,
}

impl Gate {
    /// Checks a new connection's peer and either refuses it (on this thread, without waiting
    /// for the client) or serves it on a thread of its own. The peer is checked first, before
    /// anything is read or any thread started: a uid that may not control the daemon, or one
    /// that has too many connections already, costs the daemon no thread.
    fn admit(&self, conn: UnixStream) {
        let accepted = Instant::now();
        let (uid, gid) = match getsockopt(&conn, PeerCredentials) {
            Ok(cred) => (cred.uid(), cred.gid()),
            Err(e) => {
                return self.refuse(conn, format!("cannot check the peer's credentials: {e}"))
            }
        };
        let privileged = is_privileged(uid);
        if !privileged && !self.allow_uids.contains(&uid) {
            return self.refuse(
                conn,
                format!(
                    "permission denied: uid {uid} may not control this daemon (see allow_uids)"
                ),
            );
        }
        let ticket = match self.admission.admit(uid, privileged) {
            Ok(ticket) => ticket,
            Err(why) => return self.refuse(conn, why),
        };
        // Kept to refuse the connection with if no thread can be started for it.
        let spare = conn.try_clone();
        let registry = self.registry.clone();
        // An attach waits for its mount to answer: serve each client on its own thread so a
        // slow one does not hold up the others.
        let started = std::thread::Builder::new()
            .name("control-client".into())
            .spawn(move || {
                serve(conn, uid, gid, accepted, registry.as_ref());
                drop(ticket);
            });
        if let (Err(e), Ok(spare)) = (started, spare) {
            self.refuse(
                spare,
                format!("the daemon cannot start a thread for this request ({e}): try again"),
            );
        }
    }

    /// Answers `conn` with the error `message` and closes it without holding this thread.
    fn refuse(&self, conn: UnixStream, message: String) {
        if let Ok(mut line) = serde_json::to_string(&Response::Error { message }) {
            line.push('\n');
            self.refusals.refuse(conn, &line);
        }
    }
}

/// Reads the request of `uid` (primary group `gid`) on `conn` (by [`REQUEST_TIMEOUT`] after it was `accepted`),
/// carries it out and writes the answer (by [`ANSWER_TIMEOUT`]).
fn serve(conn: UnixStream, uid: u32, gid: u32, accepted: Instant, registry: &dyn Controller) {
    let received = wire::receive_request(&conn, Deadline::after(accepted, REQUEST_TIMEOUT));
    let response = match received.and_then(|(line, image)| {
        let request = serde_json::from_str::<Request>(&line).context("malformed request")?;
        Ok((request, image))
    }) {
        Ok((request, image)) => registry.dispatch(request, Caller { uid, gid, image }),
        Err(e) => Response::Error {
            message: format!("{e:#}"),
        },
    };
    if let Ok(mut text) = serde_json::to_string(&response) {
        text.push('\n');
        let deadline = Deadline::after(Instant::now(), ANSWER_TIMEOUT);
        let _ = wire::send_response(&conn, text.as_bytes(), deadline);
    }
}
