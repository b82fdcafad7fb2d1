//! The control socket of `squashd serve`, and of a `squashd mount -o control=SOCKET`: a Unix
//! stream socket, mode 0600 (root-only by default; 0666 when the daemon's config's `allow_uids`
//! names other users), where each connection carries one JSON request and gets one JSON
//! response. The peer's credentials are checked on every connection.

pub(crate) mod protocol;
pub(crate) mod report;

use anyhow::Context;
use protocol::{Request, Response};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;

/// Largest request accepted: an attach with long paths and options fits in far less.
const MAX_REQUEST: u64 = 64 * 1024;

/// How long a client may take to send its request.
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What answers the requests of a control socket: the daemon's registry, or a lone mount.
pub(crate) trait Controller: Send + Sync + 'static {
    /// Carries out one request.
    fn dispatch(&self, request: Request) -> Response;
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
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                let registry = registry.clone();
                let allowed = allow_uids.clone();
                // An attach waits for its mount to answer: serve each client on its own thread
                // so a slow one does not hold up the others.
                let _ = std::thread::Builder::new()
                    .name("control-client".into())
                    .spawn(move || handle(conn, me, &allowed, registry.as_ref()));
            }
        })?;
    Ok(())
}

/// The uid of the process at the other end of `conn`.
fn peer_uid(conn: &UnixStream) -> std::io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of the sizes given, and the descriptor is
    // owned by `conn` for the duration of the call.
    let rc = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(cred.uid)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn handle(conn: UnixStream, me: u32, allowed: &[u32], registry: &dyn Controller) {
    // The request is read before the peer check, refused or not: closing a Unix socket with
    // unread data resets it, and the client would see "broken pipe" or "connection reset"
    // instead of the refusal. A client that sends nothing cannot hold the thread for long.
    let _ = conn.set_read_timeout(Some(REQUEST_TIMEOUT));
    let mut line = String::new();
    let read = BufReader::new((&conn).take_limited()).read_line(&mut line);
    let response = match peer_uid(&conn) {
        Ok(uid) if uid == 0 || uid == me || allowed.contains(&uid) => {
            match read
                .map_err(anyhow::Error::from)
                .and_then(|_| serde_json::from_str::<Request>(&line).context("malformed request"))
            {
                Ok(request) => registry.dispatch(request),
                Err(e) => Response::Error {
                    message: format!("{e:#}"),
                },
            }
        }
        Ok(uid) => Response::Error {
            message: format!(
                "permission denied: uid {uid} may not control this daemon (see allow_uids)"
            ),
        },
        Err(e) => Response::Error {
            message: format!("cannot check the peer's credentials: {e}"),
        },
    };
    if let Ok(mut text) = serde_json::to_string(&response) {
        text.push('\n');
        let _ = (&conn).write_all(text.as_bytes());
    }
}

/// Reading at most [`MAX_REQUEST`] bytes of a request.
trait TakeLimited: std::io::Read + Sized {
    fn take_limited(self) -> std::io::Take<Self> {
        self.take(MAX_REQUEST)
    }
}

impl<R: std::io::Read> TakeLimited for R {}
