//! The /dev/fuse transport: request threads that each read requests from a descriptor of the
//! connection, hand them to the [`Dispatcher`] and write its answers back; and the
//! [`Notifier`], which writes notifications (page-cache stores, invalidations).
//!
//! Each thread but the first reads from its own clone of the connection's descriptor
//! (FUSE_DEV_IOC_CLONE): requests still come from one queue per mount, but each clone keeps its
//! own list of requests being answered, so answers from different threads do not contend on
//! one lock in the kernel.

use super::dispatch::{Dispatcher, FuseFilesystem, REQUEST_BUFFER};
use super::reply;
use super::ring::RingState;
use rustix::io::Errno;
use std::fs::OpenOptions;
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Arc;
use std::thread::JoinHandle;

/// `FUSE_DEV_IOC_CLONE`: `_IOR(229, 0, uint32_t)`.
const FUSE_DEV_IOC_CLONE: libc::c_ulong = 0x8004_e500;

/// Opens /dev/fuse (close-on-exec: no child inherits the connection).
pub fn open_device() -> io::Result<OwnedFd> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/dev/fuse")
        .map(OwnedFd::from)
}

/// A new descriptor of the connection `device` belongs to, with its own processing list.
fn clone_device(device: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let clone = open_device()?;
    let mut source =
        u32::try_from(device.as_raw_fd()).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: FUSE_DEV_IOC_CLONE reads one u32 (the source descriptor) through the pointer,
    // which points at a live u32 for the whole call; `clone` is an open descriptor we own.
    let rc = unsafe { libc::ioctl(clone.as_raw_fd(), FUSE_DEV_IOC_CLONE, &mut source) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(clone)
}

/// Writes notifications to the kernel over one connection. Clones share the descriptor, which
/// is closed when the last of them (and the session's threads) are gone: a notification can
/// never go to a descriptor number reused for something else.
#[derive(Debug, Clone)]
pub struct Notifier {
    device: Arc<OwnedFd>,
}

impl Notifier {
    /// A notifier writing to `device`.
    pub fn new(device: Arc<OwnedFd>) -> Self {
        Notifier { device }
    }

    /// FUSE_NOTIFY_STORE: puts `bytes` into the page cache of `node` at `offset`. The kernel
    /// waits for the locks of the pages it fills: never call this while a read of them may be
    /// in flight and unanswered on the calling thread.
    pub fn store(&self, node: u64, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let head = reply::notify_store(node, offset, bytes.len())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFBIG))?;
        write_all(
            self.device.as_fd(),
            &[IoSlice::new(&head), IoSlice::new(bytes)],
        )
    }

    /// FUSE_NOTIFY_INVAL_INODE: drops `len` bytes at `offset` of `node`'s page cache (`len`
    /// 0: to the end; `offset` negative: only its attributes).
    pub fn inval_inode(&self, node: u64, offset: i64, len: i64) -> io::Result<()> {
        let head = reply::notify_inval_inode(node, offset, len);
        write_all(self.device.as_fd(), &[IoSlice::new(&head)])
    }
}

/// One write of a whole message: the device takes a message in one write or not at all.
fn write_all(device: BorrowedFd<'_>, slices: &[IoSlice<'_>]) -> io::Result<()> {
    loop {
        match rustix::io::writev(device, slices) {
            Ok(_) => return Ok(()),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Serves requests from `device` until the connection ends (the file system was unmounted,
/// or the connection aborted): the loop of one request thread.
pub fn serve_device<F: FuseFilesystem>(
    dispatcher: &Dispatcher<F>,
    device: BorrowedFd<'_>,
) -> io::Result<()> {
    serve(dispatcher, device, None)
}

/// [`serve_device`], answering INIT through `ring` (which may accept FUSE over io_uring).
fn serve<F: FuseFilesystem>(
    dispatcher: &Dispatcher<F>,
    device: BorrowedFd<'_>,
    ring: Option<(&Arc<Dispatcher<F>>, &RingState)>,
) -> io::Result<()> {
    // Zeroed once; a request touches the first pages only.
    let mut buffer = vec![0u8; REQUEST_BUFFER];
    loop {
        let len = match rustix::io::read(device, &mut buffer) {
            Ok(len) => len,
            // ENOENT: the request was interrupted before it was read; EINTR, EAGAIN: again.
            Err(Errno::NOENT | Errno::INTR | Errno::AGAIN) => continue,
            // The connection is gone: the file system was unmounted (ENODEV) or the kernel
            // ended the connection as aborted (ECONNABORTED; CI saw it once when SIGTERM's
            // unmount met reads in flight). Either way nothing is left to serve.
            Err(Errno::NODEV | Errno::CONNABORTED) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let Some(request) = buffer.get(..len) else {
            continue;
        };
        if let Some((shared, ring)) = ring.filter(|(_, ring)| ring.takes_init(request)) {
            ring.answer_init(shared, request, |slices| {
                if let Err(e) = write_all(device, slices) {
                    tracing::warn!("FUSE INIT answer: {e}");
                }
            });
            continue;
        }
        let Some(answer) = dispatcher.dispatch(request) else {
            continue;
        };
        if let Err(e) = write_all(device, &answer.io_slices()) {
            // ENOENT: the request was interrupted and the kernel stopped waiting for it.
            if e.raw_os_error() != Some(libc::ENOENT) {
                tracing::debug!("FUSE answer to request {}: {e}", answer.unique());
            }
        }
        answer.replied();
    }
}

/// Request threads serving one connection: `threads` of them, named `name-N`, the first
/// reading from `device` itself and each other from a clone of it; with `ring`, the one that
/// reads INIT may move the connection's requests onto FUSE over io_uring.
pub(crate) fn start_threads<F: FuseFilesystem>(
    dispatcher: Arc<Dispatcher<F>>,
    device: Arc<OwnedFd>,
    threads: usize,
    name: &str,
    ring: Option<Arc<RingState>>,
) -> io::Result<Vec<JoinHandle<io::Result<()>>>> {
    let mut descriptors = vec![device.clone()];
    for _ in 1..threads.max(1) {
        descriptors.push(Arc::new(clone_device(device.as_fd())?));
    }
    let mut handles = Vec::with_capacity(descriptors.len());
    for (i, fd) in descriptors.into_iter().enumerate() {
        let dispatcher = dispatcher.clone();
        let ring = ring.clone();
        let handle = std::thread::Builder::new()
            .name(format!("{name}-{i}"))
            .spawn(move || {
                let ring = ring.as_deref().map(|ring| (&dispatcher, ring));
                serve(&dispatcher, fd.as_fd(), ring)
            })?;
        handles.push(handle);
    }
    Ok(handles)
}
