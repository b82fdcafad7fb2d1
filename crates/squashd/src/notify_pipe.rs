//! `-o notify_pipe=PATH`: squashfuse's way of telling a caller that a mount is ready. The caller
//! makes a named pipe (mkfifo), starts the mount and reads one byte from the pipe: `s` once the
//! mount answers, `f` when it failed. Apptainer-style wrappers and AppImage launchers use it
//! instead of polling /proc/mounts.
//!
//! As with squashfuse, a path that is not a named pipe, or a pipe nobody reads, costs the mount
//! nothing but a warning. Unlike squashfuse (whose failure path opens the pipe with a blocking
//! open and hangs until some reader comes), the writer gives up after [`WAIT_FOR_READER`].

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long to wait for the caller to open the pipe for reading.
const WAIT_FOR_READER: Duration = Duration::from_secs(30);

/// The byte written to the pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// `s`: the mount answers.
    Ready,
    /// `f`: the mount failed.
    Failed,
}

impl Outcome {
    fn byte(self) -> u8 {
        match self {
            Outcome::Ready => b's',
            Outcome::Failed => b'f',
        }
    }
}

/// Writes the outcome's byte to the named pipe at `path`, waiting up to [`WAIT_FOR_READER`]
/// for a reader. Problems are logged, never returned: the pipe only informs the caller.
pub(crate) fn tell(path: &Path, outcome: Outcome) {
    if let Err(why) = write_byte(path, outcome.byte(), WAIT_FOR_READER) {
        log_line!("squashd: notify_pipe {}: {why}", path.display());
    }
}

/// [`tell`] on a thread of its own, for a process that must not wait for the reader (a mount
/// that has just become ready keeps serving meanwhile).
pub(crate) fn tell_in_background(path: PathBuf, outcome: Outcome) {
    let spawned = std::thread::Builder::new()
        .name("notify-pipe".into())
        .spawn(move || tell(&path, outcome));
    if let Err(e) = spawned {
        log_line!("squashd: notify_pipe: cannot start its thread: {e}");
    }
}

fn write_byte(path: &Path, byte: u8, wait: Duration) -> Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot stat: {e}"))?;
    if !meta.file_type().is_fifo() {
        return Err("not a named pipe (make one with mkfifo); not notified".into());
    }
    // Non-blocking, so that a pipe nobody opens cannot hold us: open(2) then fails with ENXIO
    // until a reader is there (a reader blocked in its own open counts).
    let deadline = Instant::now() + wait;
    let mut pipe = loop {
        match OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
        {
            Ok(pipe) => break pipe,
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                return Err(format!("nobody opened it for reading within {wait:?}"));
            }
            Err(e) => return Err(format!("cannot open for writing: {e}")),
        }
    };
    // One byte into an empty pipe with a reader never blocks; a reader gone meanwhile is EPIPE
    // (Rust ignores SIGPIPE).
    pipe.write_all(&[byte])
        .map_err(|e| format!("cannot write: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn fifo(dir: &Path) -> PathBuf {
        let path = dir.join("pipe");
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        path
    }

    #[test]
    fn a_reader_gets_the_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = fifo(dir.path());
        let reader = {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut byte = Vec::new();
                std::fs::File::open(path)
                    .unwrap()
                    .read_to_end(&mut byte)
                    .unwrap();
                byte
            })
        };
        write_byte(&path, b'f', Duration::from_secs(10)).unwrap();
        assert_eq!(reader.join().unwrap(), b"f");
    }

    #[test]
    fn no_reader_or_no_pipe_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        let path = fifo(dir.path());
        let start = Instant::now();
        let e = write_byte(&path, b's', Duration::from_millis(100)).unwrap_err();
        assert!(e.contains("nobody opened it"), "{e}");
        assert!(start.elapsed() < Duration::from_secs(5));
        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        let e = write_byte(&file, b's', Duration::from_millis(100)).unwrap_err();
        assert!(e.contains("not a named pipe"), "{e}");
        let e = write_byte(&dir.path().join("none"), b's', Duration::ZERO).unwrap_err();
        assert!(e.contains("cannot stat"), "{e}");
    }
}
