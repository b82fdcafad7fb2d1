//! The control socket of a lone mount (`-o control=SOCKET`): `squashd status` shows its
//! counters as the daemon shows each of its images'; attach and detach are refused.

use crate::control::protocol::{Request, Response};
use crate::control::report::{status, ServedImage};
use crate::control::Controller;
use std::path::{Path, PathBuf};

/// Answers the control socket of a lone mount.
pub(crate) struct LoneMountControl {
    mountpoint: PathBuf,
    served: ServedImage,
}

/// Removes the control socket when the mount ends.
pub(super) struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl LoneMountControl {
    /// Listens on `socket` (on a thread of its own) until the returned guard is dropped, which
    /// removes the socket.
    pub(super) fn listen(
        socket: &Path,
        served: ServedImage,
        mountpoint: &Path,
    ) -> anyhow::Result<SocketFile> {
        let control = LoneMountControl {
            mountpoint: mountpoint.to_path_buf(),
            served,
        };
        crate::control::listen(socket, Vec::new(), std::sync::Arc::new(control))?;
        Ok(SocketFile(socket.to_path_buf()))
    }
}

impl Controller for LoneMountControl {
    fn dispatch(&self, request: Request, _caller: crate::control::Caller) -> Response {
        match request {
            Request::Status => Response::Status(Box::new(status(
                &self.served.image.caches().stats(),
                std::iter::once((self.mountpoint.as_path(), &self.served)),
            ))),
            Request::Attach { .. } | Request::Detach { .. } => Response::Error {
                message: format!(
                    "{} is a lone `squashd mount`: attach and detach need `squashd serve`",
                    self.mountpoint.display()
                ),
            },
        }
    }
}
