//! The transport: its queue threads (one per CPU, or first one for all CPUs: see
//! [`UringConfig::per_cpu_after`]), started at INIT, ended by the kernel (unmount or abort) or
//! by [`Transport::shutdown`].

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::abi::FUSE_MIN_READ_BUFFER;
use crate::config::possible_cpus;
use crate::queue::Queue;
use crate::thread::{self, Handshake, QueueEnd, QueueLayout, QueueStart};
use crate::{Handler, UringConfig, UringError};

/// How long `prepare` and `register` wait for each queue.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// State shared by the transport and its queue threads.
pub(crate) struct Shared {
    pub(crate) stop: AtomicBool,
    requests: Vec<AtomicU64>,
    /// Of `requests`, those answered on the CPU whose queue carried them.
    local_requests: Vec<AtomicU64>,
    /// Requests answered by the idle start's thread (one entry of every CPU's queue).
    idle_thread_requests: AtomicU64,
    /// Requests a queue thread found while it spun after an answer ([`UringConfig::spin`]).
    pub(crate) spun_requests: AtomicU64,
    /// Queue threads answering a request or spinning for one now.
    busy_threads: AtomicUsize,
    pub(crate) refused_replies: AtomicU64,
    pub(crate) malformed_requests: AtomicU64,
    /// Entries the kernel accepted, over all queue threads.
    pub(crate) entries: AtomicUsize,
    /// Bytes of rings and entry buffers allocated, over all queue threads.
    pub(crate) memory: AtomicUsize,
    /// The per-CPU queue threads an idle start added once busy.
    grown: Mutex<Grown>,
}

/// The queue threads started after the transport was (an idle start's per-CPU queues).
#[derive(Default)]
struct Grown {
    /// Whether they were started (they are started once).
    started: bool,
    /// Set by [`Transport::shutdown`]: no more threads may start.
    closed: bool,
    queues: Vec<QueueThread>,
}

impl Shared {
    /// A queue thread starts answering a request.
    pub(crate) fn begin_busy(&self) {
        self.busy_threads.fetch_add(1, Ordering::AcqRel);
    }

    /// A queue thread starts spinning, if no other is answering or spinning: false if one is.
    pub(crate) fn begin_alone(&self) -> bool {
        self.busy_threads
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// A queue thread has answered, or stopped spinning.
    pub(crate) fn end_busy(&self) {
        self.busy_threads.fetch_sub(1, Ordering::AcqRel);
    }

    /// Counts a request of `queue` answered on `answered_on` (the CPU the answering thread ran
    /// on as it committed the answer, if known) by the idle start's thread or not.
    pub(crate) fn count_request(&self, queue: usize, answered_on: Option<usize>, idle: bool) {
        if let Some(count) = self.requests.get(queue) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        if answered_on == Some(queue) {
            if let Some(count) = self.local_requests.get(queue) {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
        if idle {
            self.idle_thread_requests.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Counters of a running transport.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TransportStats {
    /// Requests answered over each queue (index = CPU).
    pub requests_per_queue: Vec<u64>,
    /// Of those, the requests answered on the queue's own CPU (index = CPU): the answering
    /// thread ran there when it committed the answer (`sched_getcpu`), so the requester, asleep
    /// on that CPU, was woken without a wake-up across CPUs.
    pub local_requests_per_queue: Vec<u64>,
    /// Requests answered by the idle start's thread, which is pinned to no CPU and holds an
    /// entry of every queue (before and after the per-CPU threads start).
    pub idle_thread_requests: u64,
    /// Requests a queue thread found while it spun after an answer, without sleeping
    /// ([`UringConfig::spin`]).
    pub spun_requests: u64,
    /// Replies refused because they did not fit the payload buffer (answered with EIO).
    pub refused_replies: u64,
    /// Requests whose lengths did not add up (answered with EIO).
    pub malformed_requests: u64,
    /// Ring entries registered with the kernel, over all queues: the number of CPUs after an
    /// idle start, then that plus CPUs x depth once the per-CPU queues run.
    pub entries: usize,
    /// Queue threads running (each with its own io_uring).
    pub queue_threads: usize,
}

impl TransportStats {
    /// Requests answered over all queues.
    pub fn requests(&self) -> u64 {
        self.requests_per_queue.iter().sum()
    }

    /// Requests answered on the CPU whose queue carried them, over all queues.
    pub fn local_requests(&self) -> u64 {
        self.local_requests_per_queue.iter().sum()
    }
}

/// How the transport ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TransportEnd {
    /// Bytes of ring buffers left allocated because the kernel may still hold them: non-zero
    /// only when the transport was shut down while the file system was still mounted.
    pub leaked_bytes: usize,
    /// Errors other than the kernel's end of connection, one per queue that had one.
    pub errors: Vec<String>,
}

struct QueueThread {
    thread: Option<JoinHandle<QueueEnd>>,
    wake: Arc<OwnedFd>,
}

/// FUSE over io_uring for one mounted connection.
pub struct Transport {
    shared: Arc<Shared>,
    queues: Vec<QueueThread>,
    config: UringConfig,
}

/// A transport whose threads, rings and buffers exist but whose entries are not registered
/// yet: made before the INIT reply, registered after it.
///
/// Why two steps: once an INIT reply accepts `FUSE_OVER_IO_URING`, the kernel holds every
/// request of the connection until all queues have registered an entry, and falls back to
/// /dev/fuse only when a registration fails. A transport that failed before registering
/// anything (io_uring forbidden by a seccomp profile or `kernel.io_uring_disabled`, no
/// memory for the buffers) would leave the mount hanging. [`Transport::prepare`] does
/// everything that can fail on squashd's side, so that the INIT reply accepts the ring only
/// when it succeeded; what [`PreparedTransport::register`] can still meet is the kernel's
/// refusal, after which the kernel serves the connection over /dev/fuse (or, in theory, a
/// refusal to enable a ring, which the kernel gives only for a ring not made disabled).
///
/// `prepare` makes every ring (disabled) and buffer on the calling thread and starts the queue
/// threads without waiting for them to run: each enables its ring, becoming its one
/// submitter, once told to register. So the INIT reply waits for no other thread; measured
/// under a daemon attaching 69 images on 2 busy CPUs, each hand-off to a new thread and back
/// cost 0.3-1 ms (bench/results/2026-11-26-uring-s6.md).
pub struct PreparedTransport {
    /// The go-ahead of each queue thread; dropped (before `transport`) to give up.
    go: Vec<mpsc::Sender<()>>,
    ready: mpsc::Receiver<Result<(), UringError>>,
    transport: Transport,
}

impl PreparedTransport {
    /// Registers the entries of every queue thread; returns once every one has,
    /// from which point the kernel sends the connection's requests (all but FORGET, INTERRUPT
    /// and notification replies, which stay on /dev/fuse) to the handler over the rings.
    ///
    /// Call it after writing the INIT reply that accepted `FUSE_OVER_IO_URING` (the kernel
    /// refuses registrations before INIT with EAGAIN). An error means the kernel refused (see
    /// [`UringError::Register`]) and now serves the connection over /dev/fuse.
    pub fn register(mut self) -> Result<Transport, UringError> {
        for go in self.go.drain(..) {
            let _ = go.send(());
        }
        wait_ready(
            &self.ready,
            self.transport.queues.len(),
            "register their entries",
        )?;
        Ok(self.transport)
    }
}

fn wait_ready(
    ready: &mpsc::Receiver<Result<(), UringError>>,
    queues: usize,
    what: &str,
) -> Result<(), UringError> {
    for _ in 0..queues {
        match ready.recv_timeout(READY_TIMEOUT) {
            Ok(Ok(())) => {}
            // Dropping the transport stops the queues that did get ready.
            Ok(Err(error)) => return Err(error),
            Err(_) => {
                return Err(UringError::Config(format!(
                    "the ring queues did not {what} within {READY_TIMEOUT:?}"
                )))
            }
        }
    }
    Ok(())
}

impl Transport {
    /// Before the INIT reply: makes the rings and starts the queue threads, each with its
    /// io_uring and entries of
    /// `config.payload_size` bytes, and with `handler` to answer requests: `config.queue_depth`
    /// threads per CPU with one entry of its queue each or, for an idle start
    /// ([`UringConfig::per_cpu_after`]), one thread with one entry of every CPU's queue (it
    /// follows its requests' CPUs), which starts the per-CPU threads once busy. `config.payload_size` must be at least
    /// [`UringConfig::required_payload_size`] of the INIT reply to be sent. If this fails, the
    /// INIT reply must not accept `FUSE_OVER_IO_URING`.
    ///
    /// `dev_fuse` is duplicated: the caller keeps its descriptor and keeps reading it; the
    /// duplicate is closed when the transport ends.
    pub fn prepare<H: Handler>(
        dev_fuse: BorrowedFd<'_>,
        config: &UringConfig,
        handler: Arc<H>,
    ) -> Result<PreparedTransport, UringError> {
        validate(config)?;
        let dev_fuse =
            Arc::new(
                dev_fuse
                    .try_clone_to_owned()
                    .map_err(|source| UringError::Io {
                        what: "duplicate the /dev/fuse descriptor".to_string(),
                        source,
                    })?,
            );
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            requests: (0..config.cpus).map(|_| AtomicU64::new(0)).collect(),
            local_requests: (0..config.cpus).map(|_| AtomicU64::new(0)).collect(),
            idle_thread_requests: AtomicU64::new(0),
            spun_requests: AtomicU64::new(0),
            busy_threads: AtomicUsize::new(0),
            refused_replies: AtomicU64::new(0),
            malformed_requests: AtomicU64::new(0),
            entries: AtomicUsize::new(0),
            memory: AtomicUsize::new(0),
            grown: Mutex::new(Grown::default()),
        });
        let (ready_tx, ready_rx) = mpsc::channel();
        let layouts = match config.per_cpu_after {
            Some(after) => vec![QueueLayout::all_cpus(config, after)?],
            None => QueueLayout::per_cpu(config)?,
        };
        let mut prepared = PreparedTransport {
            go: Vec::with_capacity(layouts.len()),
            ready: ready_rx,
            transport: Transport {
                shared: Arc::clone(&shared),
                queues: Vec::with_capacity(layouts.len()),
                config: *config,
            },
        };
        for layout in layouts {
            let (go_tx, go_rx) = mpsc::channel();
            let context = QueueContext {
                dev_fuse: Arc::clone(&dev_fuse),
                config: *config,
                handler: Arc::clone(&handler),
                shared: Arc::clone(&shared),
            };
            let thread = spawn_queue(layout, &context, Some((ready_tx.clone(), go_rx)))?;
            prepared.go.push(go_tx);
            prepared.transport.queues.push(thread);
        }
        drop(ready_tx);
        Ok(prepared)
    }

    /// [`Transport::prepare`] and [`PreparedTransport::register`] in one, for a caller that
    /// has sent the INIT reply already: if this fails before registering (see
    /// [`PreparedTransport`]), the kernel keeps waiting for the ring, so prefer the two steps.
    pub fn start<H: Handler>(
        dev_fuse: BorrowedFd<'_>,
        config: &UringConfig,
        handler: Arc<H>,
    ) -> Result<Transport, UringError> {
        Transport::prepare(dev_fuse, config, handler)?.register()
    }

    /// The config the transport runs with.
    pub fn config(&self) -> &UringConfig {
        &self.config
    }

    /// The transport's counters.
    pub fn stats(&self) -> TransportStats {
        TransportStats {
            requests_per_queue: self
                .shared
                .requests
                .iter()
                .map(|count| count.load(Ordering::Relaxed))
                .collect(),
            local_requests_per_queue: self
                .shared
                .local_requests
                .iter()
                .map(|count| count.load(Ordering::Relaxed))
                .collect(),
            idle_thread_requests: self.shared.idle_thread_requests.load(Ordering::Relaxed),
            spun_requests: self.shared.spun_requests.load(Ordering::Relaxed),
            refused_replies: self.shared.refused_replies.load(Ordering::Relaxed),
            malformed_requests: self.shared.malformed_requests.load(Ordering::Relaxed),
            entries: self.shared.entries.load(Ordering::Relaxed),
            queue_threads: self.queues.len() + self.shared.lock_grown().queues.len(),
        }
    }

    /// Bytes of rings and entry buffers allocated so far (at most [`crate::ring_memory`] of
    /// the config). Payload buffers are anonymous mappings (one per queue), so of this only the
    /// pages that requests and replies used are resident.
    pub fn memory(&self) -> usize {
        self.shared.memory.load(Ordering::Relaxed)
    }

    /// Whether every queue thread has ended (after an unmount or abort, the kernel ends every
    /// entry with ENOTCONN and the threads return by themselves).
    pub fn is_finished(&self) -> bool {
        let finished = |queue: &QueueThread| queue.thread.as_ref().is_none_or(|t| t.is_finished());
        self.queues.iter().all(finished) && self.shared.lock_grown().queues.iter().all(finished)
    }

    /// Waits up to `timeout` for [`Transport::is_finished`].
    pub fn wait_finished(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.is_finished() {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    /// Stops the queues and joins their threads. After an unmount the threads have ended
    /// already; while still mounted, each queue closes its ring (the kernel cancels the
    /// commands it holds; requests that come later wait for the unmount or abort) and keeps
    /// the buffers the kernel may still address (reported in [`TransportEnd::leaked_bytes`]).
    /// Called (or dropped) on one of the transport's own queue threads, it joins the others and
    /// leaves that one, which is ending, out of the [`TransportEnd`].
    pub fn shutdown(mut self) -> TransportEnd {
        self.stop()
    }

    fn stop(&mut self) -> TransportEnd {
        self.shared.stop.store(true, Ordering::Release);
        // Threads added after this point cannot start: the ones there are all to stop.
        let grown = {
            let mut grown = self.shared.lock_grown();
            grown.closed = true;
            std::mem::take(&mut grown.queues)
        };
        self.queues.extend(grown);
        for queue in &self.queues {
            wake(&queue.wake);
        }
        let mut end = TransportEnd::default();
        let current = std::thread::current().id();
        for queue in &mut self.queues {
            let Some(thread) = queue.thread.take() else {
                continue;
            };
            if thread.thread().id() == current {
                // Stopped from one of its own queue threads: the handler owned the transport
                // (squashd's file system keeps the session's ring state) and this thread, ending,
                // let go of it last. That thread returns right after (its queue is closed or sees
                // `stop`); joining it from itself would fail (EDEADLK) and panic.
                continue;
            }
            match thread.join() {
                Ok(queue_end) => {
                    end.leaked_bytes += queue_end.leaked_bytes;
                    end.errors.extend(queue_end.error);
                }
                Err(_) => end.errors.push("a queue thread panicked".to_string()),
            }
        }
        end
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What every queue thread of a transport shares.
pub(crate) struct QueueContext<H> {
    pub(crate) dev_fuse: Arc<OwnedFd>,
    pub(crate) config: UringConfig,
    pub(crate) handler: Arc<H>,
    pub(crate) shared: Arc<Shared>,
}

impl<H> Clone for QueueContext<H> {
    fn clone(&self) -> Self {
        QueueContext {
            dev_fuse: Arc::clone(&self.dev_fuse),
            config: self.config,
            handler: Arc::clone(&self.handler),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl Shared {
    fn lock_grown(&self) -> std::sync::MutexGuard<'_, Grown> {
        self.grown.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Makes the ring and buffers of `layout` on this thread, then starts the queue thread that
/// enables the ring and serves it. `handshake`: the channel to report the registration and
/// the go-ahead to register (after the INIT reply); without it, the thread registers at once
/// (the connection is initialized already).
fn spawn_queue<H: Handler>(
    layout: QueueLayout,
    context: &QueueContext<H>,
    handshake: Option<Handshake>,
) -> Result<QueueThread, UringError> {
    let wake = Arc::new(eventfd()?);
    let queue = Queue::new(&layout, &context.dev_fuse, &wake, &context.config)?;
    context
        .shared
        .memory
        .fetch_add(queue.memory(), Ordering::Relaxed);
    let name = layout.thread_name();
    let start = QueueStart {
        layout,
        queue,
        context: context.clone(),
        wake: Arc::clone(&wake),
        handshake,
    };
    let thread = std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || thread::run(start))
        .map_err(|source| UringError::Io {
            what: format!("start the thread {name}"),
            source,
        })?;
    Ok(QueueThread {
        thread: Some(thread),
        wake,
    })
}

/// Starts the per-CPU queue threads of an idle start, once: called by its one thread when it
/// became busy. They register their entries at once; the kernel then spreads each CPU's
/// requests over that CPU's entries and the first thread's, which stay registered.
pub(crate) fn start_per_cpu_queues<H: Handler>(
    context: &QueueContext<H>,
) -> Result<(), UringError> {
    let mut grown = context.shared.lock_grown();
    if grown.started || grown.closed {
        return Ok(());
    }
    grown.started = true;
    for layout in QueueLayout::per_cpu(&context.config)? {
        let thread = spawn_queue(layout, context, None)?;
        grown.queues.push(thread);
    }
    Ok(())
}

fn validate(config: &UringConfig) -> Result<(), UringError> {
    // With a thread per entry, a deep queue is that many threads per CPU.
    if config.queue_depth == 0 || config.queue_depth > 64 {
        return Err(UringError::Config(format!(
            "queue depth {} is outside 1..=64",
            config.queue_depth
        )));
    }
    if config.payload_size < FUSE_MIN_READ_BUFFER {
        return Err(UringError::Config(format!(
            "payload size {} is below the kernel's minimum of {FUSE_MIN_READ_BUFFER}",
            config.payload_size
        )));
    }
    let cpus = possible_cpus()?;
    if config.cpus != cpus {
        return Err(UringError::Config(format!(
            "the kernel keeps one ring queue per possible CPU ({cpus}), the config has {}",
            config.cpus
        )));
    }
    Ok(())
}

fn eventfd() -> Result<OwnedFd, UringError> {
    // SAFETY: eventfd has no memory preconditions; it returns a new descriptor or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(UringError::Io {
            what: "create an eventfd".to_string(),
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: fd is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn wake(fd: &OwnedFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a live local array to a descriptor this transport owns.
    let _ = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
}
