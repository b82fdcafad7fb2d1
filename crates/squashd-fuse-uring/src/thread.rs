//! A queue thread: which ring entries it holds and where it runs ([`QueueLayout`]: one entry,
//! or every entry, of one CPU's queue, pinned to that CPU if asked, or the idle start's thread
//! with one entry of every CPU's queue, which then follows its requests' CPUs), and its body:
//! pin, wait for the go-ahead, enable the ring made for it, register the entries, serve them
//! (`queue.rs`) until the kernel lets go of them.

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use crate::queue::Queue;
use crate::transport::QueueContext;
use crate::{Handler, QueueThreads, UringConfig, UringError};

/// How a queue thread ended.
#[derive(Debug, Default)]
pub(crate) struct QueueEnd {
    /// Bytes of entry buffers left allocated because the kernel might still hold them (the
    /// transport was shut down while the file system was still mounted).
    pub(crate) leaked_bytes: usize,
    /// An error other than the kernel's end of connection, if any.
    pub(crate) error: Option<String>,
}

/// Which entries a queue thread holds, and where it runs.
pub(crate) struct QueueLayout {
    /// The kernel queue (CPU) of each of the thread's entries.
    entry_qids: Vec<u16>,
    /// The CPU whose queue the thread serves, if one.
    cpu: Option<u16>,
    /// Which of that CPU's threads this is (the first, 0, registers last).
    index: usize,
    /// After how many answered requests the thread starts the per-CPU queues (idle start).
    per_cpu_after: Option<u64>,
    /// The pinned thread's wait for the other threads of its CPU to register: each holds a
    /// sender and drops it once registered (or failed), and the pinned thread registers when
    /// all are gone ([`QueueLayout::per_cpu`] says why).
    siblings_registered: Option<Receiver<()>>,
    /// Dropped once this thread registered (held by a CPU's threads but the first one).
    registered: Option<Sender<()>>,
    /// Whether the thread pins itself to its CPU, or (the idle start's) to each request's
    /// ([`UringConfig::pin_threads`]).
    pin: bool,
}

impl QueueLayout {
    /// `config.queue_depth` threads per CPU, each with one entry of its CPU's queue, or with
    /// [`QueueThreads::PerCpu`] one thread per CPU with all of them; pinned to that CPU if
    /// `config.pin_threads`.
    ///
    /// With a thread per entry (the default, [`QueueThreads::PerEntry`]), not one per queue: a
    /// thread answers one request at a time, and a request may wait (a decompression, a read of
    /// the image from disk). The kernel gives a request to any free entry of its CPU's queue, so
    /// entries of a thread busy with another request would hold theirs until it finished, while
    /// the CPU might be idle.
    ///
    /// When pinning, every thread is pinned, not only the first: the kernel queues a request on
    /// the CPU its requester runs on, and the requester sleeps there until the answer's commit
    /// wakes it; a commit from another CPU is a wake-up across CPUs (about 12 us on the
    /// benchmark VM, one per round trip). A walk does not stay on one entry (the kernel wakes
    /// the requester before it frees the entry, and a requester that preempts the answering
    /// thread sends its next request to another free entry), so an unpinned sibling answered a share of its
    /// CPU's requests from the other CPU: up to 90% of a queue's in one cold walk
    /// (bench/results/2026-11-27-ring-s10.md). Pinned, two slow requests of one CPU share its
    /// core; the requests of the other CPUs still run on theirs.
    ///
    /// The first thread registers its entry after the CPU's other threads: the kernel gives a
    /// queue's request to the entry that became free last (`fuse_uring_ent_avail` puts it at
    /// the head of the queue's free entries), registration included, so the entry registered
    /// last takes the first requests of a lone requester on that CPU, and keeps them as long as
    /// each answer frees it before the next request comes (bench/results/2026-11-27-ring-s9.md).
    pub(crate) fn per_cpu(config: &UringConfig) -> Result<Vec<QueueLayout>, UringError> {
        let depth = usize::try_from(config.queue_depth).unwrap_or(usize::MAX);
        let mut layouts = Vec::new();
        if config.threads == QueueThreads::PerCpu {
            for cpu in 0..config.cpus {
                let qid = qid(cpu)?;
                layouts.push(QueueLayout {
                    entry_qids: vec![qid; depth],
                    cpu: Some(qid),
                    index: 0,
                    per_cpu_after: None,
                    siblings_registered: None,
                    registered: None,
                    pin: config.pin_threads,
                });
            }
            return Ok(layouts);
        }
        for cpu in 0..config.cpus {
            let qid = qid(cpu)?;
            let (registered, siblings_registered) = mpsc::channel();
            let mut siblings_registered = Some(siblings_registered);
            for index in 0..depth {
                let first = index == 0;
                layouts.push(QueueLayout {
                    entry_qids: vec![qid],
                    cpu: Some(qid),
                    index,
                    per_cpu_after: None,
                    siblings_registered: if first {
                        siblings_registered.take()
                    } else {
                        None
                    },
                    registered: (!first).then(|| registered.clone()),
                    pin: config.pin_threads,
                });
            }
        }
        Ok(layouts)
    }

    /// The idle start's one thread: one entry of every CPU's queue (requests of every CPU come
    /// to it; it pins itself to each one's CPU as it answers), starting the per-CPU threads
    /// after `per_cpu_after` answers.
    pub(crate) fn all_cpus(
        config: &UringConfig,
        per_cpu_after: u64,
    ) -> Result<QueueLayout, UringError> {
        Ok(QueueLayout {
            entry_qids: (0..config.cpus).map(qid).collect::<Result<_, _>>()?,
            cpu: None,
            index: 0,
            per_cpu_after: Some(per_cpu_after),
            siblings_registered: None,
            registered: None,
            pin: config.pin_threads,
        })
    }

    /// `fuse-uring-N` for CPU N's first thread, `fuse-uring-N.K` for its others,
    /// `fuse-uring` for the idle start's.
    pub(crate) fn thread_name(&self) -> String {
        match (self.cpu, self.index) {
            (Some(cpu), 0) => format!("fuse-uring-{cpu}"),
            (Some(cpu), index) => format!("fuse-uring-{cpu}.{index}"),
            (None, _) => "fuse-uring".to_string(),
        }
    }

    /// The CPU the thread is pinned to, if any: with pinning, every thread of a CPU's queue is
    /// (the idle start's thread pins itself to each request's CPU as it answers: `queue.rs`).
    fn pinned_cpu(&self) -> Option<u16> {
        self.cpu.filter(|_| self.pin)
    }

    /// The CPU a per-CPU thread pins itself to while two requesters share its queue
    /// ([`crate::requesters`]): its own, unless it is pinned there for good already.
    pub(crate) fn pins_while_shared(&self) -> Option<u16> {
        self.cpu.filter(|_| !self.pin && !self.is_idle_start())
    }

    /// Whether the idle start's thread follows each request's CPU.
    pub(crate) fn follows_requests(&self) -> bool {
        self.pin && self.is_idle_start()
    }

    /// Whether this is the idle start's thread (pinned to no CPU, an entry of every queue).
    pub(crate) fn is_idle_start(&self) -> bool {
        self.cpu.is_none()
    }

    /// The kernel queue (CPU) of each of the thread's entries.
    pub(crate) fn entry_qids(&self) -> &[u16] {
        &self.entry_qids
    }

    /// How errors name this thread's queue.
    pub(crate) fn label(&self) -> String {
        match (self.cpu, self.index) {
            (Some(cpu), 0) => format!("queue {cpu}"),
            (Some(cpu), index) => format!("queue {cpu} (thread {index})"),
            (None, _) => "the idle queue thread".to_string(),
        }
    }
}

fn qid(cpu: usize) -> Result<u16, UringError> {
    u16::try_from(cpu).map_err(|_| UringError::Config(format!("CPU {cpu}: too many queues")))
}

/// A queue thread's link to the INIT reply: where it reports its registration, and the
/// go-ahead to register (closed to give up).
pub(crate) type Handshake = (Sender<Result<(), UringError>>, Receiver<()>);

/// Everything a queue thread needs.
pub(crate) struct QueueStart<H> {
    pub(crate) layout: QueueLayout,
    /// Its ring and buffers, made by the thread that starts it ([`Queue::new`]).
    pub(crate) queue: Queue,
    pub(crate) context: QueueContext<H>,
    /// Keeps the eventfd the queue reads (by number) open for the thread's life.
    pub(crate) wake: Arc<OwnedFd>,
    /// Told once the entries are registered (or why not), and the go-ahead to register (sent
    /// after the INIT reply; closed to give up). `None`: the connection is initialized
    /// already, register at once.
    pub(crate) handshake: Option<Handshake>,
}

/// The body of a queue thread.
pub(crate) fn run<H: Handler>(start: QueueStart<H>) -> QueueEnd {
    let QueueStart {
        mut layout,
        mut queue,
        context,
        wake: _wake,
        handshake,
    } = start;
    // The kernel picks the queue by the CPU the request is issued on; answering on that CPU
    // wakes the requester without a wake-up across CPUs and keeps the request's data in that
    // CPU's caches. A CPU that is offline or outside this process's
    // affinity leaves the thread unpinned: its queue still works, only without that locality.
    if let Some(cpu) = layout.pinned_cpu() {
        pin_to_cpu(usize::from(cpu));
    }
    let (shared, handler) = (Arc::clone(&context.shared), Arc::clone(&context.handler));
    let ready = match handshake {
        Some((ready, go)) => {
            if go.recv().is_err() {
                // The transport was dropped before INIT: nothing reached the kernel.
                return queue.close(None);
            }
            Some(ready)
        }
        None => None,
    };
    if let Some(siblings) = layout.siblings_registered.take() {
        // Disconnected once every sibling registered (or ended); the timeout only bounds a
        // sibling that is slow to start: the order is a preference, not a rule.
        let _ = siblings.recv_timeout(SIBLINGS_REGISTER_WITHIN);
    }
    // This thread becomes the ring's one submitter (it was made disabled elsewhere).
    let registered = queue.enable().and_then(|()| queue.register());
    drop(layout.registered.take());
    if let Err(error) = registered {
        // Entries registered before the failure stay with the kernel: close keeps their memory.
        let message = error.to_string();
        let end = queue.close(None);
        return match ready {
            Some(ready) => {
                let _ = ready.send(Err(error));
                end
            }
            None => QueueEnd {
                error: Some(message),
                ..end
            },
        };
    }
    shared
        .entries
        .fetch_add(queue.entry_count(), Ordering::Relaxed);
    if let Some(ready) = ready {
        let _ = ready.send(Ok(()));
    }
    let busy = layout.per_cpu_after.map(|after| {
        (after, move || {
            crate::transport::start_per_cpu_queues(&context).map_err(|e| e.to_string())
        })
    });
    queue.serve(&*handler, &shared, busy)
}

/// How long a CPU's pinned queue thread waits for its siblings to register before it does.
const SIBLINGS_REGISTER_WITHIN: Duration = Duration::from_secs(1);

/// Pins the calling thread to `cpu` (a CPU outside the process's allowed set leaves it as it
/// was: the queue still works, only without the locality).
pub(crate) fn pin_to_cpu(cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    if set.set(cpu).is_ok() {
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
    }
}

/// The CPUs the calling thread may run on now, to go back to after [`pin_to_cpu`].
pub(crate) fn allowed_cpus() -> Option<nix::sched::CpuSet> {
    nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).ok()
}

/// Lets the calling thread run on `cpus` again.
pub(crate) fn unpin(cpus: &nix::sched::CpuSet) {
    let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), cpus);
}
