//! What a file-system operation fails with: the errno the kernel is answered with, and the
//! library error behind it, if any.

use fuser::Errno;
use squashd_core::ErrorKind;

/// Why a file-system operation failed: the errno for the kernel, and the library error that
/// caused it (its [`source`](std::error::Error::source)), if one did.
#[derive(Debug)]
pub struct FsError {
    errno: Errno,
    source: Option<squashd_core::Error>,
}

impl FsError {
    /// The errno to answer the request with.
    pub fn errno(&self) -> Errno {
        self.errno
    }

    /// The errno as a number (`libc::ENOENT`...).
    pub fn code(&self) -> i32 {
        self.errno.code()
    }

    /// The error for a library error. Damaged or unreadable images give EIO, as a disk
    /// would; those (and unsupported features) are logged, one line naming the image and the
    /// offset, while the others are ordinary answers to ordinary requests.
    pub fn from_image(e: squashd_core::Error) -> FsError {
        let errno = match e.kind() {
            ErrorKind::Io | ErrorKind::Corrupt => {
                tracing::error!("{e}");
                Errno::EIO
            }
            ErrorKind::Unsupported => {
                tracing::error!("{e}");
                Errno::from_i32(libc::EOPNOTSUPP)
            }
            ErrorKind::NotFound => Errno::ENOENT,
            ErrorKind::NotADirectory => Errno::ENOTDIR,
            ErrorKind::IsADirectory => Errno::EISDIR,
            ErrorKind::InvalidInput => Errno::EINVAL,
        };
        FsError {
            errno,
            source: Some(e),
        }
    }
}

impl From<Errno> for FsError {
    fn from(errno: Errno) -> Self {
        FsError {
            errno,
            source: None,
        }
    }
}

impl std::fmt::Display for FsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The errno's own text ("No such file or directory (os error 2)"); the library error,
        // if any, is the source, so that a chain printer shows each once.
        write!(
            f,
            "{}",
            std::io::Error::from_raw_os_error(self.errno.code())
        )
    }
}

impl std::error::Error for FsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Shorthand for the results of file-system operations.
pub type FsResult<T> = std::result::Result<T, FsError>;
