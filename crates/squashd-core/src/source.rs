//! Where image bytes come from. A [`Source`] answers positioned reads from any number of threads
//! at once: there is no file position, so there is no seek lock.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Positioned, thread-safe reads of an image's bytes.
pub trait Source: Send + Sync {
    /// Fills `buf` from absolute position `pos`; fails if fewer bytes are available.
    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> std::io::Result<()>;
    /// Current length of the underlying file in bytes.
    fn len(&self) -> std::io::Result<u64>;
    /// Hints that bytes `pos..pos + len` will be read soon, so the source may fetch them in the
    /// background. The default does nothing.
    fn will_need(&self, _pos: u64, _len: u64) {}
    /// Whether a read may wait for something much slower than a local disk (a network): a
    /// server then keeps a waiting read from holding up its other requests. The default: no.
    fn may_stall(&self) -> bool {
        false
    }
    /// Whether the source is empty.
    fn is_empty(&self) -> std::io::Result<bool> {
        Ok(self.len()? == 0)
    }
}

/// A local file read with `pread(2)`, counting the bytes it reads.
#[derive(Debug)]
pub struct FileSource {
    file: File,
    bytes_read: AtomicU64,
    reads: AtomicU64,
}

impl FileSource {
    /// Opens `path` read-only.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        Ok(FileSource {
            file: File::open(path)?,
            bytes_read: AtomicU64::new(0),
            reads: AtomicU64::new(0),
        })
    }

    /// Reads an already open file: one opened with someone else's rights and passed over a
    /// socket, for instance.
    pub fn from_file(file: File) -> Self {
        FileSource {
            file,
            bytes_read: AtomicU64::new(0),
            reads: AtomicU64::new(0),
        }
    }

    /// Bytes read from the file so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }

    /// Number of reads issued so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
}

impl Source for FileSource {
    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> std::io::Result<()> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.bytes_read
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.file.read_exact_at(buf, pos)
    }

    fn len(&self) -> std::io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn will_need(&self, pos: u64, len: u64) {
        // A failure only means no prefetch. (A zero length would mean "to the end of the
        // file": nothing is asked for instead.)
        if let Some(len) = std::num::NonZeroU64::new(len) {
            let _ = rustix::fs::fadvise(&self.file, pos, Some(len), rustix::fs::Advice::WillNeed);
        }
    }
}

/// An image held in memory: tests, fuzzing, and images fetched whole from elsewhere.
///
/// ```
/// use squashd_core::source::{MemorySource, Source};
/// let source = MemorySource::new(vec![1u8, 2, 3]);
/// let mut buf = [0u8; 2];
/// source.read_exact_at(&mut buf, 1).unwrap();
/// assert_eq!(buf, [2, 3]);
/// assert!(source.read_exact_at(&mut buf, 2).is_err());
/// ```
#[derive(Debug, Clone)]
pub struct MemorySource {
    bytes: Arc<[u8]>,
}

impl MemorySource {
    /// A source reading from `bytes`.
    pub fn new(bytes: impl Into<Arc<[u8]>>) -> Self {
        MemorySource {
            bytes: bytes.into(),
        }
    }

    /// The bytes it reads from.
    pub fn bytes(&self) -> &Arc<[u8]> {
        &self.bytes
    }
}

impl Source for MemorySource {
    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> std::io::Result<()> {
        let slice = usize::try_from(pos)
            .ok()
            .and_then(|start| self.bytes.get(start..start.checked_add(buf.len())?))
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!(
                        "{} bytes at {pos} run past the end of a {}-byte buffer",
                        buf.len(),
                        self.bytes.len()
                    ),
                )
            })?;
        buf.copy_from_slice(slice);
        Ok(())
    }

    fn len(&self) -> std::io::Result<u64> {
        Ok(self.bytes.len() as u64)
    }
}
