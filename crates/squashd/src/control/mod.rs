//! The control socket of `squashd serve`, and of a `squashd mount -o control=SOCKET`: a Unix
//! stream socket, mode 0600 (root-only by default; 0666 when the daemon's config's `allow_uids`
//! names other users), where each connection carries one JSON request and gets one JSON
//! response. The peer's credentials are taken from the kernel (SO_PEERCRED) on every
//! connection, and an attach may carry the image as an open descriptor (SCM_RIGHTS): what a
//! caller may do with them is decided by [`crate::serve`]'s access policy.

pub(crate) mod protocol;
pub(crate) mod report;
mod wire;

use anyhow::Context;
use protocol::{Request, Response};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;

pub(crate) use wire::send_request;

/// How long a client may take to send its request.
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

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
        self.uid == 0 || self.uid == nix::unistd::geteuid().as_raw()
    }
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
                    .spawn(move || handle(conn, &allowed, registry.as_ref()));
            }
        })?;
    Ok(())
}

fn handle(conn: UnixStream, allowed: &[u32], registry: &dyn Controller) {
    // The request is read before the peer check, refused or not: closing a Unix socket with
    // unread data resets it, and the client would see "broken pipe" or "connection reset"
    // instead of the refusal. A client that sends nothing cannot hold the thread for long.
    let _ = conn.set_read_timeout(Some(REQUEST_TIMEOUT));
    let received = wire::receive_request(&conn);
    let peer = nix::sys::socket::getsockopt(&conn, nix::sys::socket::sockopt::PeerCredentials);
    let response = match peer {
        Ok(cred) => {
            let (uid, gid) = (cred.uid(), cred.gid());
            let caller = Caller {
                uid,
                gid,
                image: None,
            };
            if caller.is_privileged() || allowed.contains(&uid) {
                match received.and_then(|(line, image)| {
                    let request =
                        serde_json::from_str::<Request>(&line).context("malformed request")?;
                    Ok((request, image))
                }) {
                    Ok((request, image)) => registry.dispatch(request, Caller { uid, gid, image }),
                    Err(e) => Response::Error {
                        message: format!("{e:#}"),
                    },
                }
            } else {
                Response::Error {
                    message: format!(
                        "permission denied: uid {uid} may not control this daemon (see allow_uids)"
                    ),
                }
            }
        }
        Err(e) => Response::Error {
            message: format!("cannot check the peer's credentials: {e}"),
        },
    };
    if let Ok(mut text) = serde_json::to_string(&response) {
        text.push('\n');
        let _ = (&conn).write_all(text.as_bytes());
    }
}
