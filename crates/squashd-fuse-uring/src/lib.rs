//! FUSE over io_uring (Linux 6.14+): squashd's second FUSE transport, beside /dev/fuse.
//!
//! With `fuse.enable_uring=1`, the kernel offers `FUSE_OVER_IO_URING` in the INIT request. A
//! server that accepts it registers ring entries (a header buffer and a payload buffer each)
//! with IORING_OP_URING_CMD commands on its /dev/fuse descriptor, in one queue per possible
//! CPU; from then on the kernel puts each request into a free entry of the queue of the CPU
//! the request was issued on and completes that entry's command, and the server answers in
//! the same buffers with COMMIT_AND_FETCH, which also waits for the next request. There is no
//! read and write per request and no wake-up of a reader on another CPU. /dev/fuse still
//! carries INIT, FORGET, INTERRUPT, and every notification the server sends (the kernel
//! refuses `unique` 0 over the ring), so the session keeps reading and writing it.
//!
//! The protocol is `fs/fuse/dev_uring.c`, `Documentation/filesystems/fuse-io-uring.rst` and
//! `include/uapi/linux/fuse.h` (`fuse_uring_req_header`, `fuse_uring_cmd_req`).
//!
//! # Using it
//!
//! The /dev/fuse session answers INIT itself. If [`init_offers_uring`] says the request offers
//! the ring and the mount wants it, the session prepares the transport (threads, rings and
//! buffers: everything that can fail on squashd's side) *before* replying, accepts the ring in
//! the reply only if that worked (`FUSE_INIT_EXT` in `flags`, [`INIT_FLAGS2_OVER_IO_URING`]
//! in `flags2`), and registers the entries after the reply. [`PreparedTransport`] says why
//! the order matters (a connection that accepted the ring waits for it).
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use squashd_fuse_uring::*;
//! # struct Dispatcher;
//! # impl Handler for Dispatcher {
//! #     fn handle(&self, request: &Request<'_>, reply: &mut dyn ReplyWriter) {
//! #         let _ = reply.error(libc::ENOSYS);
//! #     }
//! # }
//! # fn write_init_reply(accept_ring: bool) {}
//! # fn on_init(dev_fuse: std::os::fd::BorrowedFd<'_>, flags: u32, flags2: u32) -> Result<(), UringError> {
//! // max_write and max_pages as the INIT reply will send them; 2 requests in flight per CPU.
//! let config = UringConfig::for_init(2, 128 << 10, 32)?;
//! let prepared = if init_offers_uring(flags, flags2) {
//!     Transport::prepare(dev_fuse, &config, Arc::new(Dispatcher)).ok()
//! } else {
//!     None
//! };
//! write_init_reply(prepared.is_some());
//! if let Some(prepared) = prepared {
//!     // An error here: the kernel refused and serves the connection over /dev/fuse.
//!     let transport = prepared.register()?;
//!     println!("ring memory: {} bytes", ring_memory(transport.config()));
//!     // ... the session keeps reading /dev/fuse (FORGET, INTERRUPT) until it ends ...
//!     transport.wait_finished(std::time::Duration::from_secs(5)); // ends by itself on unmount
//!     let end = transport.shutdown();
//! }
//! # Ok(()) }
//! ```
//!
//! # The handler interface, and why
//!
//! A [`Handler`] gets a [`Request`] (the `fuse_in_header` and the in arguments) and answers
//! through a [`ReplyWriter`] (`ok` with out-argument parts, `ok_with` to fill the reply buffer
//! in place, or `error`; then, if what the handler does next must follow the answer's arrival in
//! the kernel, `commit`). The same two types serve /dev/fuse: [`Request::from_dev_fuse`] wraps
//! the bytes read from the device, and the session's writer puts the out header and the parts
//! into one `writev`. The ring splits a request's in arguments in two (the first, per-opcode
//! struct in the entry's `op_in` area, the rest in the payload) while /dev/fuse sends them in
//! one piece; both are the same byte stream, so the dispatcher reads them with
//! [`Request::args`] and never needs to know which transport carried the request. Replies
//! are symmetric: the out header goes to the header buffer or the front of the write, the out
//! arguments (all of them, concatenated) to the payload buffer or the rest of the write; a
//! reply larger than the payload buffer is refused with [`ReplyError::TooLarge`] and the
//! request fails with EIO. The writer is a `dyn` trait so that the dispatcher is compiled
//! once for both transports; the cost is one indirect call per reply.
//!
//! # Threads and memory
//!
//! Each queue thread has its own io_uring (single issuer, deferred task work: the kernel copies
//! requests into a thread's buffers only while it waits for completions, never while the
//! handler reads or writes them). By default there are `queue_depth` per CPU, each with one
//! entry of that CPU's queue. With an idle start ([`UringConfig::idle_start`]), for mounts
//! that may stay idle, one thread first holds one entry of every CPU's queue, and starts the
//! per-CPU threads once it has answered the given number of requests: an idle mount costs one
//! thread, one io_uring and one entry per CPU. With [`UringConfig::pinned`], each CPU's
//! threads are pinned to it and the idle start's thread pins itself to each request's CPU as
//! it answers, so that every answer is committed on the CPU its requester sleeps on and the
//! requester's wake-up does not cross CPUs (worth it only for a server in its requesters'
//! scheduling group: [`UringConfig::pin_threads`]);
//! [`TransportStats::local_requests_per_queue`] counts the answers that were. Memory is
//! entries x (payload + 288 bytes) plus the rings: at most [`ring_memory`], so far
//! [`Transport::memory`]; a queue's payloads are one anonymous mapping, resident once
//! used. A thread answers one request at a time: the idle start's thread answers its entries
//! one after another; busy, each entry has a thread, so a slow request holds only its own.
//!
//! # Ending
//!
//! On unmount (or abort), the kernel completes every entry with ENOTCONN; each queue thread
//! returns once all its entries are back ([`Transport::wait_finished`]). [`Transport::shutdown`]
//! (and drop) also stop a transport whose file system is still mounted: each queue closes its
//! ring, which makes the kernel cancel the commands it holds; their buffers are then left
//! allocated, because the kernel keeps their addresses until the connection ends.

mod abi;
mod buffers;
mod config;
mod detect;
mod queue;
mod reply;
mod request;
mod requesters;
mod sqe;
mod thread;
mod transport;

pub use abi::{
    out_header, InHeader, FUSE_INIT_EXT, FUSE_MIN_READ_BUFFER, FUSE_OVER_IO_URING, IN_HEADER_SIZE,
    OUT_HEADER_SIZE, RING_HEADER_SIZE,
};
pub use config::{possible_cpus, ring_memory, QueueThreads, UringConfig};
pub use detect::{
    init_offers_uring, KernelSupport, ENABLE_HINT, ENABLE_URING_PARAMETER,
    INIT_FLAGS2_OVER_IO_URING,
};
pub use request::{ArgReader, Handler, ReplyError, ReplyWriter, Request};
pub use transport::{PreparedTransport, Transport, TransportEnd, TransportStats};

/// Why the transport could not start.
#[derive(Debug, thiserror::Error)]
pub enum UringError {
    /// A system call failed.
    #[error("FUSE over io_uring: cannot {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// The kernel refused to register a queue's entries (EINVAL: a payload buffer smaller than
    /// the connection's requests, see [`UringConfig::required_payload_size`]; EOPNOTSUPP:
    /// `enable_uring` is off).
    #[error("FUSE over io_uring: the kernel refused the entries of queue {queue}: {source}")]
    Register {
        /// The queue (CPU).
        queue: u16,
        /// The kernel's error.
        source: std::io::Error,
    },
    /// The configuration does not fit this machine or the kernel's rules.
    #[error("FUSE over io_uring: {0}")]
    Config(String),
}
