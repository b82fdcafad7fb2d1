//! squashd's FUSE server framework, under both of its FUSE servers (the FUSE path's
//! [`crate::SquashFs`] and the kernel path's blob file system): the session that talks the
//! FUSE protocol to the kernel, with no FUSE library in between.
//!
//! - [`abi`]: the wire structures of `include/uapi/linux/fuse.h` (zerocopy-derived).
//! - `request`, `reply`: one request's bytes parsed (bounds-checked), one answer's built.
//! - [`Dispatcher`]: one request's bytes in, one [`Reply`] out, calling a
//!   [`FuseFilesystem`]. It touches no descriptor: a transport reads requests, hands them to
//!   [`Dispatcher::dispatch`], writes the reply's [`Reply::io_slices`] and then calls
//!   [`Reply::replied`].
//! - [`dev_fuse`]: the /dev/fuse transport (request threads, one cloned descriptor each) and
//!   the [`Notifier`] for page-cache stores and invalidations. The io_uring transport
//!   (FUSE_OVER_IO_URING, `ring.rs` over the `squashd-fuse-uring` crate) is a second one
//!   beside it, calling the same dispatcher from its ring entries; /dev/fuse still carries
//!   FORGET, INTERRUPT and the notifications then.
//! - [`FuseMount`]: mount(2), or fusermount3 for a user who may not mount.
//!
//! Why not a FUSE library: fuser 0.18 owns its transport (no io_uring, whose support is an
//! open issue there) and its unmount-on-drop guard, whose inverted "still mounted" check had to
//! be worked around with `unsafe`. Its plain types (`INodeNo`, `FileAttr`, `FopenFlags`...)
//! are still used by the file-system layer: they are stable, and the layer's answers keep
//! their shape.

pub mod abi;
mod answering;
pub mod dev_fuse;
mod dispatch;
mod mount;
mod reply;
mod request;
mod ring;

pub use answering::{own_mount_waits, with_own_mount_waits};
pub use dev_fuse::Notifier;
pub use dispatch::{
    Dispatcher, FsReply, FuseFilesystem, InitSettings, KernelOffer, RequestContext, MAX_PAGES,
    MAX_WRITE, REQUEST_BUFFER,
};
pub use mount::FuseMount;
pub use reply::{DirentBuffer, ReadData, Reply};
use ring::RingState;
pub use ring::{
    TransportInfo, TransportProbe, UringMode, RING_CPU_QUEUE_DEPTH, RING_MAX_PAGES,
    RING_PER_CPU_AFTER, RING_QUEUE_DEPTH,
};

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::thread::JoinHandle;

/// A mounted FUSE connection and the file system to serve on it, not served yet.
#[derive(Debug)]
pub struct Session<F> {
    dispatcher: Arc<Dispatcher<F>>,
    device: Arc<OwnedFd>,
    uring: UringMode,
}

impl<F: FuseFilesystem> Session<F> {
    /// A session serving `fs` on the connection `device` (from [`FuseMount::mount`]).
    pub fn new(fs: F, device: OwnedFd) -> Self {
        Session {
            dispatcher: Arc::new(Dispatcher::new(fs)),
            device: Arc::new(device),
            uring: UringMode::Off,
        }
    }

    /// Whether to move requests onto FUSE over io_uring at INIT (default: off). `On` is
    /// checked before mounting ([`UringMode::check`]); here it acts as `Auto`.
    pub fn with_uring(mut self, mode: UringMode) -> Self {
        self.uring = mode;
        self
    }

    /// Writes notifications to this connection.
    pub fn notifier(&self) -> Notifier {
        Notifier::new(self.device.clone())
    }

    /// The file system served.
    pub fn fs(&self) -> &F {
        self.dispatcher.fs()
    }

    /// Starts `threads` request threads named `name-N` on /dev/fuse; they serve until the
    /// connection ends.
    pub fn start(self, threads: usize, name: &str) -> io::Result<Running> {
        let ring = (self.uring != UringMode::Off)
            .then(|| Arc::new(RingState::new(self.uring, self.device.clone())));
        let threads =
            dev_fuse::start_threads(self.dispatcher, self.device, threads, name, ring.clone())?;
        Ok(Running { threads, ring })
    }
}

/// A session being served by its request threads.
#[derive(Debug)]
pub struct Running {
    threads: Vec<JoinHandle<io::Result<()>>>,
    ring: Option<Arc<RingState>>,
}

impl Running {
    /// Whether every request thread has ended (the connection is gone).
    pub fn is_over(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    /// Which transport carries the requests (/dev/fuse until INIT accepted the ring).
    pub fn transport_probe(&self) -> TransportProbe {
        TransportProbe::new(self.ring.clone())
    }

    /// Waits for every request thread to end; the first error, if any. The connection's
    /// descriptors close once the file system served (and its notifier) are dropped.
    pub fn wait(self) -> io::Result<()> {
        let mut result = Ok(());
        for thread in self.threads {
            let ended = thread
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a FUSE request thread panicked")));
            if let (Ok(()), Err(e)) = (&result, ended) {
                result = Err(e);
            }
        }
        if let Some(ring) = &self.ring {
            ring.shutdown();
        }
        result
    }
}
