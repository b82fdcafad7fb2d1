//! Errors as Python users expect them: `OSError` with an errno (which Python turns into
//! `FileNotFoundError`, `NotADirectoryError`, `IsADirectoryError`...), a message that names the
//! image (and, for a corrupt one, the byte), and the path asked about as `filename`.

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use squashd_core::{Error, ErrorKind};

/// An operation's failure, built without the GIL (inside `Python::detach`) and turned into a
/// Python exception once it is held again.
#[derive(Debug)]
pub enum OpError {
    /// An error of the library: its kind gives the errno, its message names image and byte.
    Core(Error),
    /// An errno and what to say about it (the image's name is put before it).
    Errno(i32, String),
}

impl From<Error> for OpError {
    fn from(e: Error) -> Self {
        OpError::Core(e)
    }
}

/// The result of an operation on an image.
pub type OpResult<T> = Result<T, OpError>;

impl OpError {
    /// An errno with the C library's text for it.
    pub fn errno(errno: i32) -> Self {
        OpError::Errno(errno, std::io::Error::from_raw_os_error(errno).to_string())
    }

    /// The errno Python sees.
    fn code(&self) -> i32 {
        match self {
            OpError::Errno(errno, _) => *errno,
            OpError::Core(e) => match e.kind() {
                ErrorKind::NotFound => libc::ENOENT,
                ErrorKind::NotADirectory => libc::ENOTDIR,
                ErrorKind::IsADirectory => libc::EISDIR,
                ErrorKind::InvalidInput => libc::EINVAL,
                ErrorKind::Unsupported => libc::EOPNOTSUPP,
                // A file that vanished or a disk that failed keeps its own errno.
                ErrorKind::Io => e
                    .io_error()
                    .and_then(|e| e.raw_os_error())
                    .unwrap_or(libc::EIO),
                // The kernel answers EIO for a corrupt image too.
                ErrorKind::Corrupt => libc::EIO,
            },
        }
    }

    /// The Python exception: `OSError(errno, message[, filename])`, which Python makes the
    /// subclass that matches the errno. Library errors name the image already; others get
    /// `image` put before them.
    pub fn into_pyerr(self, py: Python<'_>, image: &str, path: Option<&Bound<'_, PyAny>>) -> PyErr {
        let code = self.code();
        let message = match self {
            OpError::Core(e) => e.to_string(),
            OpError::Errno(_, what) => strip_os_suffix(&format!("{image}: {what}")),
        };
        match path {
            Some(path) => PyOSError::new_err((code, message, path.clone().unbind())),
            None => {
                let _ = py;
                PyOSError::new_err((code, message))
            }
        }
    }
}

/// `io::Error`'s text ends with " (os error N)", which Python's "[Errno N]" already says.
fn strip_os_suffix(text: &str) -> String {
    match text.rfind(" (os error ") {
        Some(at) if text.ends_with(')') => text[..at].to_string(),
        _ => text.to_string(),
    }
}
