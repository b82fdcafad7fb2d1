//! FUSE over io_uring for a session: the choice (`uring=auto|on|off`), the INIT handshake that
//! accepts the ring, and the [`squashd_fuse_uring::Handler`] that runs the session's
//! [`Dispatcher`] on the ring's requests.
//!
//! The /dev/fuse threads keep running: INIT arrives there, and FORGET, INTERRUPT and
//! notifications stay there once the ring carries everything else.

use super::answering::with_own_mount_waits;
use super::dispatch::{Dispatcher, FuseFilesystem, MAX_WRITE};
use crate::listings::{with_listing_waits, FILL_WAIT};
use squashd_fuse_uring::{
    init_offers_uring, Handler, KernelSupport, ReplyWriter, Transport, UringConfig, IN_HEADER_SIZE,
};
use std::io::IoSlice;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};

/// Whether a mount uses FUSE over io_uring.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum UringMode {
    /// When the kernel offers it (`fuse.enable_uring=1`), else /dev/fuse. The kernel path's
    /// blob file system keeps /dev/fuse, its faster transport (`squashd_kernel::BlobMount`).
    Auto,
    /// Required: the mount fails unless the kernel offers it ([`UringMode::check`]).
    On,
    /// Never: /dev/fuse only. The default: the ring wins walks (0.84x of /dev/fuse's time for
    /// 16 parallel cold finds, quiet machine) and stat storms, but a daemon with 69 images is
    /// ready later over it (about 90 ms instead of 70 ms, even with the idle start:
    /// bench/results/2026-11-26-uring-s6.md), which issue 27 does not allow for `auto`.
    #[default]
    Off,
}

impl UringMode {
    /// `auto`, `on` or `off`.
    pub fn parse(text: &str) -> Option<UringMode> {
        match text {
            "auto" => Some(UringMode::Auto),
            "on" => Some(UringMode::On),
            "off" => Some(UringMode::Off),
            _ => None,
        }
    }

    /// The option's value, as [`UringMode::parse`] reads it.
    pub fn as_str(self) -> &'static str {
        match self {
            UringMode::Auto => "auto",
            UringMode::On => "on",
            UringMode::Off => "off",
        }
    }

    /// Before mounting: for `on`, the one-line error saying how to enable the ring when this
    /// kernel does not offer it.
    pub fn check(self) -> Result<(), String> {
        match self {
            UringMode::On => KernelSupport::probe().refusal().map_or(Ok(()), Err),
            UringMode::Auto | UringMode::Off => Ok(()),
        }
    }
}

/// Ring entries per CPU once a mount whose answers may wait
/// ([`super::FuseFilesystem::answers_may_wait`]: the kernel path's blob file system, a remote
/// image) is busy: two, each with a thread of its own. A request issued on a CPU goes to that
/// CPU's queue only, and one entry per CPU let a request that waits (a decompression, a read of
/// the image from disk) hold up every other of its CPU while the other CPU's entry sat free
/// (squashd-fuse-uring's test `a_slow_request_holds_only_its_own_entry_of_a_cpus_queue`). Two
/// per CPU let one wait while another is answered. Each entry holds a payload buffer for the
/// largest read, resident once used, and a daemon serves dozens of images, so no deeper; the
/// kernel queues the others of that CPU until one is answered.
pub const RING_QUEUE_DEPTH: u32 = 2;

/// Ring entries per CPU once any other mount is busy, all held by one thread per CPU
/// ([`squashd_fuse_uring::QueueThreads::PerCpu`]), which answers the requests that came while it
/// answered in one batch. Sixteen: a CPU running eight of sixteen parallel walkers (or readers)
/// hands each of their requests to the thread at once, instead of the kernel holding them until
/// an entry is answered (one thread with 8 entries walked usr with 16 walkers in 2.5-3.3 s, with
/// 16 in 2.5-2.9 s: bench/results/2026-12-07-s14.md). Payload buffers are resident only once
/// used, and the kernel gives a request to the entry answered last, so a mount with one or two
/// readers keeps touching the same few.
pub const RING_CPU_QUEUE_DEPTH: u32 = 16;

/// Listing requests of one CPU's queue that may wait at once for another opener's fill of
/// the same directory (squashd-fuse's `listings`): one fewer than the queue's per-CPU entries,
/// so that a request that ends a fill always finds a free entry on its CPU even without the
/// idle start's entry (a waiting request holds its entry and thread). Only where each entry has
/// a thread of its own (a remote image): a thread holding its whole queue must not wait, and
/// holding such requests in their entries instead made parallel walkers list in step
/// (bench/results/2026-12-07-s14.md, section 3).
pub const RING_LISTING_WAITS: u32 = RING_QUEUE_DEPTH - 1;

/// Request threads of a ring that may wait at once for requests of their own mount (a read
/// ahead of the kernel path's EROFS reads the blob through the same connection): once a mount
/// is busy, each CPU's queue is answered by its [`RING_QUEUE_DEPTH`] entry threads and the idle
/// start's thread, so this many waiting, wherever their requests go, leave one to answer them.
/// While the mount is idle its one thread answers every queue, and none may wait.
pub const RING_OWN_MOUNT_WAITS: usize = RING_QUEUE_DEPTH as usize;

/// Requests a mount answers over its idle start (one thread and one io_uring holding one entry
/// of every CPU's queue) before its per-CPU queue threads start. A daemon's idle image (the
/// readiness probe's stat and listing of its root, an `ls`, a walk of a small service image)
/// stays below it and so costs one thread and one ring instead of one per CPU; a walk or a read
/// of any size passes it within its first few percent (a `find` of /usr/include: 4,019
/// requests). `squashd status` shows the entries (`ring_entries`: one per CPU while idle, then
/// [`RING_CPU_QUEUE_DEPTH`] more per CPU, or [`RING_QUEUE_DEPTH`] for a file system whose
/// answers may wait).
pub const RING_PER_CPU_AFTER: u64 = 256;

/// How long a ring thread that just answered keeps looking for its next request before it
/// sleeps, while requests come that fast (`UringConfig::spin`). On a virtual machine whose idle
/// vCPUs halt, every sleep between two requests of a walk cost a wake-up through the
/// hypervisor: one cold `find` of usr took 1.59-1.68 s without spinning, 1.03-1.21 s with
/// 50 us and 0.99-1.06 s with 200 us, against 1.48-1.62 s over /dev/fuse
/// (bench/results/2026-12-07-s12.md). 50 us: the gain, with the least CPU spent at the end
/// of each burst.
pub const RING_SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// Pages of one read over the ring: 128 KiB, the kernel's default largest read and SquashFS's
/// default block size. The ring's payload buffers must hold the largest read the INIT answer
/// allows, so this (not /dev/fuse's [`super::MAX_PAGES`]) sizes them: 128 KiB per CPU per image.
pub const RING_MAX_PAGES: u16 = 32;

/// Which transport carries a session's requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransportInfo {
    /// Whether the ring carries them (else /dev/fuse).
    pub uring: bool,
    /// Bytes of the ring's buffers and queues allocated (0 on /dev/fuse). Payload buffers are
    /// resident only once used.
    pub ring_memory: usize,
    /// Ring entries registered with the kernel (0 on /dev/fuse).
    pub ring_entries: usize,
    /// Requests answered over the ring so far.
    pub ring_requests: u64,
    /// Of those, the requests answered on the CPU that issued them (the CPU of their queue):
    /// their requester was woken without a wake-up across CPUs.
    pub ring_local_requests: u64,
    /// Of those, the requests answered by the idle start's thread (pinned to no CPU).
    pub ring_idle_thread_requests: u64,
}

impl TransportInfo {
    /// "io-uring" or "dev-fuse".
    pub fn name(&self) -> &'static str {
        if self.uring {
            "io-uring"
        } else {
            "dev-fuse"
        }
    }
}

/// Which transport a running session uses, readable from outside it (a daemon's `status`).
/// Clones see the same session.
#[derive(Debug, Clone, Default)]
pub struct TransportProbe {
    ring: Option<Arc<RingState>>,
}

impl TransportProbe {
    pub(crate) fn new(ring: Option<Arc<RingState>>) -> Self {
        TransportProbe { ring }
    }

    /// The transport in use now (/dev/fuse until INIT accepted the ring).
    pub fn info(&self) -> TransportInfo {
        self.ring
            .as_ref()
            .map_or_else(TransportInfo::default, |ring| ring.info())
    }
}

/// A session's ring: what was asked, and the transport once INIT accepted it.
pub(crate) struct RingState {
    mode: UringMode,
    /// The connection's first descriptor, on which the ring is registered.
    device: Arc<OwnedFd>,
    transport: Mutex<Option<Transport>>,
}

impl std::fmt::Debug for RingState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingState")
            .field("mode", &self.mode)
            .field("transport", &self.info())
            .finish()
    }
}

impl RingState {
    pub(crate) fn new(mode: UringMode, device: Arc<OwnedFd>) -> Self {
        RingState {
            mode,
            device,
            transport: Mutex::new(None),
        }
    }

    /// The transport in use.
    pub(crate) fn info(&self) -> TransportInfo {
        let guard = self.transport.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_ref() {
            Some(transport) => {
                let stats = transport.stats();
                TransportInfo {
                    uring: true,
                    ring_memory: transport.memory(),
                    ring_entries: stats.entries,
                    ring_requests: stats.requests(),
                    ring_local_requests: stats.local_requests(),
                    ring_idle_thread_requests: stats.idle_thread_requests,
                }
            }
            None => TransportInfo::default(),
        }
    }

    /// Ends the ring's threads (after the connection ended, they have ended by themselves).
    pub(crate) fn shutdown(&self) {
        let transport = self
            .transport
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(transport) = transport {
            let stats = transport.stats();
            tracing::debug!(
                "FUSE over io_uring: requests={} local={} idle_thread={} per queue (answered/local): {}",
                stats.requests(),
                stats.local_requests(),
                stats.idle_thread_requests,
                stats
                    .requests_per_queue
                    .iter()
                    .zip(&stats.local_requests_per_queue)
                    .map(|(n, local)| format!("{n}/{local}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
            let end = transport.shutdown();
            for error in end.errors {
                tracing::warn!("FUSE over io_uring: {error}");
            }
        }
    }

    /// Whether `request` is an INIT this state must answer (the ring is not off).
    pub(crate) fn takes_init(&self, request: &[u8]) -> bool {
        self.mode != UringMode::Off && opcode(request) == Some(FUSE_INIT)
    }

    /// Answers INIT on `device`: prepares the ring before the answer if the kernel offers it,
    /// accepts it in the answer only if that worked, registers it after. Any failure leaves
    /// the connection on /dev/fuse, with one log line.
    pub(crate) fn answer_init<F: FuseFilesystem>(
        &self,
        dispatcher: &Arc<Dispatcher<F>>,
        request: &[u8],
        send: impl FnOnce(&[IoSlice<'_>]),
    ) {
        let offered = init_flags(request).is_some_and(|(f, f2)| init_offers_uring(f, f2));
        // How long the ring's two steps hold up INIT's thread (and so the mount's readiness).
        let started = std::time::Instant::now();
        let prepared = if offered {
            let handler = Arc::new(RingHandler {
                dispatcher: dispatcher.clone(),
            });
            let config = if dispatcher.fs().answers_may_wait() {
                UringConfig::for_init(RING_QUEUE_DEPTH, MAX_WRITE, RING_MAX_PAGES)
            } else {
                UringConfig::for_init(RING_CPU_QUEUE_DEPTH, MAX_WRITE, RING_MAX_PAGES)
                    .map(UringConfig::one_thread_per_cpu)
            };
            config
                .map(|config| config.idle_start(RING_PER_CPU_AFTER).spinning(RING_SPIN))
                .and_then(|config| Transport::prepare(self.device.as_fd(), &config, handler))
                .map_err(|e| tracing::warn!("{e}; serving over /dev/fuse instead"))
                .ok()
        } else {
            if self.mode == UringMode::On {
                tracing::warn!(
                    "uring=on but the kernel's INIT does not offer FUSE over io_uring; \
                     serving over /dev/fuse"
                );
            }
            None
        };
        let answer = match prepared {
            Some(_) => dispatcher.dispatch_accepting_ring(request, RING_MAX_PAGES),
            None => dispatcher.dispatch(request),
        };
        let Some(answer) = answer else { return };
        let prepare_time = started.elapsed();
        send(&answer.io_slices());
        let accepted = answer.errno() == 0;
        answer.replied();
        if let (Some(prepared), true) = (prepared, accepted) {
            let registering = std::time::Instant::now();
            match prepared.register() {
                Ok(transport) => {
                    tracing::debug!(
                        "FUSE over io_uring: prepared in {} us, registered in {} us",
                        prepare_time.as_micros(),
                        registering.elapsed().as_micros()
                    );
                    *self.transport.lock().unwrap_or_else(|e| e.into_inner()) = Some(transport)
                }
                Err(e) => tracing::warn!("{e}; the kernel serves over /dev/fuse instead"),
            }
        }
    }
}

/// `FUSE_INIT`.
const FUSE_INIT: u32 = 26;

fn opcode(request: &[u8]) -> Option<u32> {
    let bytes = request.get(4..8)?;
    Some(u32::from_ne_bytes(bytes.try_into().ok()?))
}

/// `fuse_init_in.flags` and `flags2` (0 from a kernel too old to send it).
fn init_flags(request: &[u8]) -> Option<(u32, u32)> {
    let word = |at: usize| -> Option<u32> {
        let bytes = request.get(IN_HEADER_SIZE + at..IN_HEADER_SIZE + at + 4)?;
        Some(u32::from_ne_bytes(bytes.try_into().ok()?))
    };
    Some((word(12)?, word(16).unwrap_or(0)))
}

/// Runs a session's dispatcher on the ring's requests.
struct RingHandler<F> {
    dispatcher: Arc<Dispatcher<F>>,
}

impl<F: FuseFilesystem> Handler for RingHandler<F> {
    fn handle(&self, request: &squashd_fuse_uring::Request<'_>, reply: &mut dyn ReplyWriter) {
        // The arguments are read where the ring put them (the entry's op_in area and payload).
        let dispatch = || self.dispatcher.dispatch_split(request);
        // Threads that wait for requests of their own mount: fewer than a queue's answerers.
        let own_mount_waits = if request.queue_shared {
            RING_OWN_MOUNT_WAITS
        } else {
            0
        };
        let dispatched = with_own_mount_waits(own_mount_waits, || match request.queue {
            // A thread that holds only this entry may wait in a listing for another opener's
            // fill (the idle start's thread holds an entry of every CPU: it must not).
            Some(queue) if request.thread_entries == 1 => {
                with_listing_waits(queue, RING_LISTING_WAITS, FILL_WAIT, dispatch)
            }
            _ => dispatch(),
        });
        let Some(answer) = dispatched else {
            // Only FORGET and INTERRUPT take no answer, and they never come over the ring.
            let _ = reply.error(libc::EIO);
            return;
        };
        let mut sent = match answer.errno() {
            0 => reply.ok(&[answer.body()]),
            errno => reply.error(errno),
        };
        // What `replied` does must follow the answer's arrival in the kernel: a listing turn
        // ends only once the listing is in the kernel's cache (else the duplicate request
        // waiting for the turn is answered too, in lockstep: twice the listing requests for
        // parallel walks), and a page store fills pages this read has locked until then. So
        // such answers are committed first; the others when this returns, with the wait for
        // the next request in the same system call.
        if sent.is_ok() && answer.acts_when_replied() {
            sent = reply.commit();
        }
        if let Err(e) = sent {
            tracing::debug!("FUSE answer to request {}: {e}", answer.unique());
        }
        answer.replied();
    }
}
