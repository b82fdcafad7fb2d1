//! One queue thread's io_uring and entries registered with the kernel, answering each request
//! and fetching the next in one command (the thread around it: `thread.rs`). Either one entry
//! of one CPU's queue, or the idle start's one entry of every CPU's queue ([`QueueLayout`]).
//!
//! The life of an entry: REGISTER (the kernel keeps the command until a request of this CPU
//! comes) -> completion with result 0: the request is in the entry's buffers -> the handler
//! answers into the same buffers -> COMMIT_AND_FETCH (the kernel reads the answer and keeps the
//! command for the next request) -> ... -> a completion with an error (-ENOTCONN when the file
//! system is unmounted or aborted): the kernel let go of the entry. Between a completion and the
//! next submission the entry's buffers are the thread's alone; at all other times the kernel may
//! write them, and nothing here touches them then.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::abi::{
    out_header, read_u32, read_u64, InHeader, CMD_COMMIT_AND_FETCH, CMD_REGISTER, IN_HEADER_SIZE,
    OUT_HEADER_SIZE, RING_ENT_IN_OUT_OFFSET, RING_IN_OUT_SIZE, RING_OP_IN_SIZE,
};
use crate::buffers::{QueueBuffers, RawBuffer};
use crate::config::{queue_memory, sq_entries};
use crate::reply::RingReply;
use crate::requesters::RecentRequesters;
use crate::thread::{QueueEnd, QueueLayout};
use crate::transport::Shared;
use crate::{Handler, Request, UringConfig, UringError};

/// user_data of the read of the queue's eventfd (entries use their index).
const WAKE: u64 = u64::MAX;
/// Offsets in `fuse_uring_ent_in_out`.
const COMMIT_ID_OFFSET: usize = RING_ENT_IN_OUT_OFFSET + 8;
const PAYLOAD_SZ_OFFSET: usize = RING_ENT_IN_OUT_OFFSET + 16;

/// A queue thread's io_uring and entries.
pub(crate) struct Queue {
    /// How errors name this queue thread.
    label: String,
    /// The kernel queue (CPU) of each entry.
    entry_qids: Vec<u16>,
    /// Whether this is the idle start's thread (entries of every CPU's queue, counted apart in
    /// the stats).
    idle_start: bool,
    /// Whether this thread holds several entries of its CPU's queue
    /// ([`crate::QueueThreads::PerCpu`]): a request of its queue that comes while it answers
    /// one goes to one of its own free entries ([`crate::Request::queue_shared`]).
    whole_queue: bool,
    /// Whether this thread pins itself to each request's CPU as it answers (the idle start's,
    /// with [`crate::UringConfig::pin_threads`]).
    follows_requests: bool,
    /// How long to look for the next request after an answer before sleeping
    /// ([`crate::UringConfig::spin`]).
    spin: Duration,
    /// The process (thread) that sent the request answered last, and whether the one before
    /// came from it too: the spin is for a lone requester ([`Spin`]).
    last_requester: u32,
    lone_requester: bool,
    /// The CPU the idle start's thread pinned itself to last.
    pinned_to: Option<u16>,
    /// A per-CPU thread's own CPU, where it pins itself while two requesters share its queue
    /// ([`crate::requesters`]).
    pins_while_shared: Option<u16>,
    /// Who sent this thread's last requests.
    requesters: RecentRequesters,
    /// The CPUs this thread ran on before it pinned itself while its queue was shared.
    unpinned_cpus: Option<nix::sched::CpuSet>,
    /// The /dev/fuse descriptor the commands name, kept open as long as the queue is (the
    /// commands carry its number, not a reference).
    _dev_fuse_owner: Arc<OwnedFd>,
    dev_fuse: RawFd,
    wake_fd: RawFd,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    /// Every entry's header and payload buffers (one heap block, one mapping).
    entries: QueueBuffers,
    /// Entries whose command the kernel holds.
    in_kernel: Vec<bool>,
    /// The eventfd read lands here.
    wake_buffer: RawBuffer,
    wake_armed: bool,
    /// Copy of the current request's payload (names, write data): the reply is written into the
    /// payload buffer, which must not be read and written through two slices at once.
    request_payload: Vec<u8>,
}

impl Queue {
    /// The ring (disabled: the queue thread enables it, becoming its single issuer, see
    /// [`Queue::enable`]) and the entries' buffers of `layout`. Made by the thread that starts
    /// the queue thread, so that a failure here is known before the INIT reply without waiting
    /// for the new thread to run.
    pub(crate) fn new(
        layout: &QueueLayout,
        dev_fuse: &Arc<OwnedFd>,
        wake: &OwnedFd,
        config: &UringConfig,
    ) -> Result<Queue, UringError> {
        let label = layout.label();
        let depth = layout.entry_qids().len();
        let sq_entries = u32::try_from(sq_entries(depth))
            .map_err(|_| UringError::Config(format!("{label}: {depth} entries are too many")))?;
        // Single issuer and deferred task work: only this thread submits, and the kernel copies
        // requests into this queue's buffers only when the thread waits for completions, never
        // while it is reading or writing them.
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_r_disabled()
            .build(sq_entries)
            .map_err(|source| UringError::Io {
                what: format!("create the io_uring of {label}"),
                source,
            })?;
        let entries = QueueBuffers::new(depth, config.payload_size).ok_or_else(|| {
            UringError::Config(format!(
                "{label}: cannot map {depth} ring buffers of {} bytes",
                config.payload_size
            ))
        })?;
        let wake_buffer = RawBuffer::new(8, 8)
            .ok_or_else(|| UringError::Config("cannot allocate 8 bytes".to_string()))?;
        Ok(Queue {
            label,
            entry_qids: layout.entry_qids().to_vec(),
            idle_start: layout.is_idle_start(),
            whole_queue: !layout.is_idle_start() && depth > 1,
            last_requester: 0,
            lone_requester: false,
            follows_requests: layout.follows_requests(),
            spin: config.spin,
            pinned_to: None,
            // A thread with a single entry of its queue is never the one a second requester
            // waits behind: the kernel gives that request another entry.
            pins_while_shared: layout.pins_while_shared().filter(|_| depth > 1),
            requesters: RecentRequesters::default(),
            unpinned_cpus: None,
            _dev_fuse_owner: Arc::clone(dev_fuse),
            dev_fuse: dev_fuse.as_raw_fd(),
            wake_fd: wake.as_raw_fd(),
            ring,
            in_kernel: vec![false; depth],
            entries,
            wake_buffer,
            wake_armed: false,
            request_payload: Vec::new(),
        })
    }

    /// Enables the ring, made disabled by [`Queue::new`] on another thread: the calling thread
    /// becomes its single issuer, the only one that may submit to it from now on.
    pub(crate) fn enable(&self) -> Result<(), UringError> {
        self.ring
            .submitter()
            .register_enable_rings()
            .map_err(|source| UringError::Io {
                what: format!("enable the io_uring of {}", self.label),
                source,
            })
    }

    /// Bytes of this queue's ring and entry buffers, as [`crate::ring_memory`] counts them.
    pub(crate) fn memory(&self) -> usize {
        queue_memory(self.entries.len(), self.entries.payload_size())
    }

    /// The number of entries.
    pub(crate) fn entry_count(&self) -> usize {
        self.entries.len()
    }

    /// The kernel queue of entry `index`.
    fn qid(&self, index: usize) -> u16 {
        self.entry_qids.get(index).copied().unwrap_or(0)
    }

    fn push(&mut self, entry: &squeue::Entry128) -> Result<(), UringError> {
        push_sqe(&mut self.ring, &self.label, entry)
    }

    fn arm_wake(&mut self) -> Result<(), UringError> {
        let read = opcode::Read::new(types::Fd(self.wake_fd), self.wake_buffer.as_ptr(), 8)
            .build()
            .user_data(WAKE);
        self.push(&read.into())?;
        self.wake_armed = true;
        Ok(())
    }

    fn push_entry_cmd(
        &mut self,
        index: usize,
        cmd_op: u32,
        commit_id: u64,
    ) -> Result<(), UringError> {
        let Some(iovecs) = self.entries.iovecs(index) else {
            return Err(UringError::Config(format!(
                "{}: no entry {index}",
                self.label
            )));
        };
        let sqe = crate::sqe::fuse_uring_cmd(
            self.dev_fuse,
            cmd_op,
            iovecs,
            commit_id,
            self.qid(index),
            index as u64,
        );
        self.push(&sqe)?;
        if let Some(flag) = self.in_kernel.get_mut(index) {
            *flag = true;
        }
        Ok(())
    }

    /// Registers every entry. A refusal shows as an immediate completion (the kernel answers
    /// a REGISTER it accepts only when a request comes).
    pub(crate) fn register(&mut self) -> Result<(), UringError> {
        self.arm_wake()?;
        for index in 0..self.entries.len() {
            self.push_entry_cmd(index, CMD_REGISTER, 0)?;
        }
        self.ring.submit().map_err(|source| UringError::Io {
            what: format!("register the entries of {}", self.label),
            source,
        })?;
        let mut refused = None;
        let completions: Vec<(u64, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (user_data, result) in completions {
            if user_data == WAKE {
                // The transport is stopping already: serve sees it, and re-arms the read.
                self.wake_armed = false;
                continue;
            }
            if result < 0 {
                let index = usize::try_from(user_data).unwrap_or(usize::MAX);
                if let Some(flag) = self.in_kernel.get_mut(index) {
                    *flag = false;
                }
                refused.get_or_insert((self.qid(index), -result));
            }
        }
        match refused {
            None => Ok(()),
            Some((queue, errno)) => Err(UringError::Register {
                queue,
                source: std::io::Error::from_raw_os_error(errno),
            }),
        }
    }

    /// Serves requests until the kernel has let go of every entry, or the transport stops.
    /// `busy`: after how many answers to call what starts the per-CPU queues (idle start).
    pub(crate) fn serve<H: Handler>(
        mut self,
        handler: &H,
        shared: &Shared,
        busy: Option<(u64, impl FnOnce() -> Result<(), String>)>,
    ) -> QueueEnd {
        let mut completions: Vec<(u64, i32)> = Vec::with_capacity(self.entries.len() + 1);
        let mut error = None;
        let mut answered = 0u64;
        let mut busy = busy;
        let mut spin = Spin::new(self.spin);
        while self.in_kernel.iter().any(|&held| held) {
            // Checked before each wait, not only after a completion: a transport stopped while
            // this thread was starting (an idle start's per-CPU threads) may have woken it
            // before it waited, or while it registered.
            if shared.stop.load(Ordering::Acquire) {
                return self.close(error);
            }
            if !self.wake_armed {
                if let Err(e) = self.arm_wake() {
                    error.get_or_insert(e.to_string());
                }
            }
            // An answer committed early (ReplyWriter::commit) was submitted from inside the
            // handler, and when the kernel had the entry's next request queued, that submission
            // already put it in the completion queue: nothing to submit and a completion to
            // handle, so no system call to wait for it. (Every other answer is queued, not yet
            // submitted, and goes in with the wait.)
            let nothing_to_submit = self.ring.submission().is_empty();
            let completed = !self.ring.completion().is_empty();
            // A thread spins only for a lone requester (its last two requests came from one
            // thread of one process), one thread of the transport at a time, and only while no
            // other is answering: with many requesters the threads have requests to answer,
            // and spinning ones would take the CPU they need (16 cold walkers of usr: 5.6-7.7 s
            // with every thread spinning, 3.9-4.4 s with one: bench/results/2026-12-07-s12.md;
            // 3.2 s with lone requesters only, median of 7: 2026-12-07-s13.md).
            let spun = !completed
                && self.lone_requester
                && spin.should_spin()
                && self.spin_alone(shared, spin.length);
            let waited_from = (!spun && !completed).then(Instant::now);
            let entered = if (nothing_to_submit && completed) || spun {
                Ok(0)
            } else {
                self.ring.submit_and_wait(1)
            };
            spin.after_wait(spun, waited_from.map(|from| from.elapsed()));
            if let Err(source) = entered {
                match source.raw_os_error() {
                    Some(libc::EINTR) | Some(libc::EBUSY) | Some(libc::EAGAIN) => {}
                    _ => {
                        error = Some(format!("{}: io_uring_enter: {source}", self.label));
                        break;
                    }
                }
            }
            completions.clear();
            completions.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
            for &(user_data, result) in &completions {
                if user_data == WAKE {
                    self.wake_armed = false;
                    continue;
                }
                let Ok(index) = usize::try_from(user_data) else {
                    continue;
                };
                if result < 0 {
                    // The kernel let go of this entry: ENOTCONN when the connection is torn
                    // down (unmount, abort), ECANCELED when the ring is cancelled.
                    if let Some(flag) = self.in_kernel.get_mut(index) {
                        *flag = false;
                    }
                    if !matches!(
                        -result,
                        libc::ENOTCONN | libc::ECONNABORTED | libc::ECANCELED
                    ) {
                        error.get_or_insert(format!(
                            "{}: the kernel ended entry {index}: {}",
                            self.label,
                            std::io::Error::from_raw_os_error(-result)
                        ));
                    }
                    continue;
                }
                if let Some(flag) = self.in_kernel.get_mut(index) {
                    *flag = false;
                }
                // Counted busy only where a thread may spin: the count gates the spin.
                let counted = !self.spin.is_zero();
                if counted {
                    shared.begin_busy();
                }
                let answered_now = self.answer(index, handler, shared);
                if counted {
                    shared.end_busy();
                }
                if let Err(e) = answered_now {
                    error.get_or_insert(e.to_string());
                }
                answered += 1;
            }
            self.follow_requesters();
            // Busy: start the per-CPU queues (once), after this batch's answers were queued
            // (they are submitted by the next wait, so starting threads delays no caller).
            if busy.as_ref().is_some_and(|(after, _)| answered >= *after) {
                if let Some((_, start)) = busy.take() {
                    if let Err(e) = start() {
                        error.get_or_insert(format!("start the per-CPU ring queues: {e}"));
                    }
                }
            }
        }
        self.close(error)
    }

    /// Pins a per-CPU thread to its CPU, or lets it go, as the requesters of its last requests
    /// say ([`RecentRequesters::pin_wanted`]): one system call when that changes.
    fn follow_requesters(&mut self) {
        let Some(cpu) = self.pins_while_shared else {
            return;
        };
        match (self.requesters.pin_wanted(), self.unpinned_cpus.take()) {
            (Some(true), None) => {
                // The thread's own set, read here: it may differ from its starter's.
                if let Some(allowed) = crate::thread::allowed_cpus() {
                    crate::thread::pin_to_cpu(usize::from(cpu));
                    self.unpinned_cpus = Some(allowed);
                }
            }
            (Some(false), Some(allowed)) => crate::thread::unpin(&allowed),
            (_, unchanged) => self.unpinned_cpus = unchanged,
        }
    }

    /// Whether this thread alone answers the requests of its queues
    /// ([`crate::Request::queue_shared`]): the idle start's, until one of the per-CPU threads it
    /// started has registered its entries. They register on their own threads, after their
    /// start returned; alone, this one asks for no fill and waits in no listing, since what it
    /// would wait for would have no other thread to answer it.
    fn alone(&self, shared: &Shared) -> bool {
        self.idle_start && shared.entries.load(Ordering::Relaxed) <= self.entries.len()
    }

    /// Spins for a request ([`Queue::spin_for_request`]) if no other thread of the transport is
    /// answering or spinning; true if one came, counted in the stats.
    fn spin_alone(&mut self, shared: &Shared, length: Duration) -> bool {
        if !shared.begin_alone() {
            return false;
        }
        let found = self.spin_for_request(length);
        shared.end_busy();
        if found {
            shared.spun_requests.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    /// Submits what is queued and looks for a request for up to `length`, without sleeping:
    /// true if one came (its completion is in the queue).
    fn spin_for_request(&mut self, length: Duration) -> bool {
        let mut looked = Instant::now();
        let until = looked + length;
        loop {
            // Runs the deferred task work that delivers requests to this thread's entries.
            if submit_running_task_work(&mut self.ring).is_err() {
                return false;
            }
            if !self.ring.completion().is_empty() {
                return true;
            }
            // A long time since the last look means the yield ran another thread: the CPU is
            // wanted (16 walkers on two CPUs), and the spin would take from them what a sleep's
            // wake-up costs only when the CPU is idle. (Checked after the look, so that a
            // request the other thread sent meanwhile still counts as found.)
            let now = Instant::now();
            if now >= until || now - looked >= YIELD_CONTENDED {
                return false;
            }
            looked = now;
            // Keeps the CPU out of idle without holding it from another runnable thread.
            std::thread::yield_now();
        }
    }

    /// Reads the request in entry `index`, has `handler` answer it into the entry, and queues
    /// the entry's COMMIT_AND_FETCH (submitted by the next wait), or submits it at once if the
    /// handler asked to commit early ([`crate::ReplyWriter::commit`]).
    fn answer<H: Handler>(
        &mut self,
        index: usize,
        handler: &H,
        shared: &Shared,
    ) -> Result<(), UringError> {
        let Some(iovecs) = self.entries.iovecs(index) else {
            return Ok(());
        };
        // SAFETY: the entry's command has completed and the next is not submitted yet, so the
        // kernel does not write these buffers now, and these are their only slices: they are
        // read first, then written (an early commit submits the entry from inside the handler,
        // after which neither is written: RingReply).
        let Some((header_out, payload_out)) = (unsafe { self.entries.entry_mut(index) }) else {
            return Ok(());
        };
        let payload_capacity = payload_out.len();
        let commit_id = read_u64(header_out, COMMIT_ID_OFFSET).unwrap_or(0);
        let parsed = parse_request(header_out, payload_out);
        let mut op_in = [0u8; RING_OP_IN_SIZE];
        let (in_header, op_in_len) = match parsed {
            Some((in_header, op_in_bytes, payload)) => {
                op_in[..op_in_bytes.len()].copy_from_slice(op_in_bytes);
                self.request_payload.clear();
                self.request_payload.extend_from_slice(payload);
                (Some(in_header), op_in_bytes.len())
            }
            None => (None, 0),
        };
        let Some(in_header) = in_header else {
            shared.malformed_requests.fetch_add(1, Ordering::Relaxed);
            write_out_header(header_out, commit_id, libc::EIO, 0);
            return self.push_entry_cmd(index, CMD_COMMIT_AND_FETCH, commit_id);
        };
        self.lone_requester = in_header.pid == self.last_requester;
        if self.pins_while_shared.is_some() {
            self.requesters.note(in_header.pid);
        }
        self.last_requester = in_header.pid;
        let (qid, dev_fuse, unique) = (self.qid(index), self.dev_fuse, in_header.unique);
        let idle_start = self.idle_start;
        let alone = self.alone(shared);
        if self.follows_requests && self.pinned_to != Some(qid) {
            // Answer on the requester's CPU (the queue's): its wake-up then stays on that CPU.
            // Left to the scheduler, this thread answered whole walks from the other CPU, and
            // kept them: an answer from afar frees the entry before the requester wakes, so the
            // requester's next request finds this entry first again (bench/results/
            // 2026-11-27-ring-s10.md). One system call when the requests' CPU changes; a
            // lone requester's requests stay on one CPU for thousands of requests.
            crate::thread::pin_to_cpu(usize::from(qid));
            self.pinned_to = Some(qid);
        }
        let entries_held = self.entry_count();
        let label = &self.label;
        let ring = &mut self.ring;
        let mut early: Option<Result<(), UringError>> = None;
        // Where the answer is committed: the CPU whose scheduler wakes the requester.
        let mut answered_on = None;
        let (errno, len, committed) = {
            let mut commit_now = |errno: i32, len: usize| -> Result<(), String> {
                let len = if len > payload_capacity { 0 } else { len };
                write_out_header(header_out, unique, errno, len);
                answered_on = current_cpu();
                let sqe = crate::sqe::fuse_uring_cmd(
                    dev_fuse,
                    CMD_COMMIT_AND_FETCH,
                    iovecs,
                    commit_id,
                    qid,
                    index as u64,
                );
                let sent = push_sqe(ring, label, &sqe).and_then(|()| {
                    // Submitting runs the commit: the request ends (its caller wakes) in this
                    // call; the wait for the next request comes after the handler returns.
                    submit_running_task_work(ring).map_err(|source| UringError::Io {
                        what: format!("commit an answer on {label}"),
                        source,
                    })
                });
                let message = sent.as_ref().map_err(|e| e.to_string()).copied();
                early = Some(sent);
                message
            };
            let request = Request {
                header: in_header,
                op_in: &op_in[..op_in_len],
                payload: &self.request_payload,
                queue: Some(usize::from(qid)),
                thread_entries: entries_held,
                queue_shared: !alone && !self.whole_queue,
            };
            let mut reply = RingReply::new(payload_out, Some(&mut commit_now));
            let outcome = catch_unwind(AssertUnwindSafe(|| handler.handle(&request, &mut reply)));
            if reply.refused() {
                shared.refused_replies.fetch_add(1, Ordering::Relaxed);
            }
            let (errno, len) = match outcome {
                Ok(()) => reply.outcome(),
                // A panicking handler fails its request, not the queue.
                Err(_) => (libc::EIO, 0),
            };
            (errno, len, reply.committed())
        };
        let result = match early {
            Some(sent) => {
                if let (Ok(()), Some(flag)) = (&sent, self.in_kernel.get_mut(index)) {
                    *flag = true;
                }
                sent
            }
            None if committed => Ok(()),
            None => {
                let len = if len > payload_capacity { 0 } else { len };
                write_out_header(header_out, unique, errno, len);
                // Submitted by the next wait, right after this batch of completions.
                answered_on = current_cpu();
                self.push_entry_cmd(index, CMD_COMMIT_AND_FETCH, commit_id)
            }
        };
        // Counted once answered, as the stats say.
        shared.count_request(usize::from(qid), answered_on, idle_start);
        result
    }

    /// Closes the ring (the kernel cancels the commands it still holds) and frees the buffers
    /// of the entries the kernel let go of. Those it may still hold (the transport stopped while
    /// the file system is mounted) stay allocated: the kernel keeps their addresses until the
    /// connection ends.
    pub(crate) fn close(self, error: Option<String>) -> QueueEnd {
        let Queue {
            ring,
            entries,
            in_kernel,
            wake_buffer,
            wake_armed,
            _dev_fuse_owner: dev_fuse,
            ..
        } = self;
        drop(ring);
        // Only after the ring: its commands name the descriptor.
        drop(dev_fuse);
        // The entries share one heap block and one mapping: kept whole if the kernel may still
        // hold any entry.
        let mut leaked_bytes = 0;
        if in_kernel.iter().any(|&held| held) {
            leaked_bytes = entries.memory();
            std::mem::forget(entries);
        }
        if wake_armed {
            std::mem::forget(wake_buffer);
        }
        QueueEnd {
            leaked_bytes,
            error,
        }
    }
}

/// Queues `entry` on `ring` (of the queue thread `label`).
fn push_sqe(
    ring: &mut IoUring<squeue::Entry128, cqueue::Entry>,
    label: &str,
    entry: &squeue::Entry128,
) -> Result<(), UringError> {
    // The ring has room for every entry plus the wake-up read, and each of them has at most
    // one command queued, so a full queue means a bug; submit and retry once all the same.
    for _ in 0..2 {
        // SAFETY: every pointer in the entry stays valid until its completion: the iovecs
        // and buffers belong to the queue's entries, the wake buffer to the queue, and both live
        // until the kernel has completed the command or, if it may not have, are leaked (close).
        if unsafe { ring.submission().push(entry) }.is_ok() {
            return Ok(());
        }
        ring.submit().map_err(|source| UringError::Io {
            what: format!("submit to the io_uring of {label}"),
            source,
        })?;
    }
    Err(UringError::Config(format!(
        "{label}: submission queue full"
    )))
}

/// Submits what is queued without waiting, and runs the ring's deferred task work (requests
/// the kernel has for this thread's other entries; with `setup_defer_taskrun` it runs only in
/// an enter that carries GETEVENTS). Without it, a thread whose early commits keep getting the
/// next request of the same entry at once would skip its waits (see `serve`) and leave the
/// requests of its other entries (the idle start's thread holds one per CPU) undelivered for as
/// long as that lasts.
fn submit_running_task_work(
    ring: &mut IoUring<squeue::Entry128, cqueue::Entry>,
) -> std::io::Result<()> {
    let queued = u32::try_from(ring.submission().len()).unwrap_or(u32::MAX);
    // SAFETY: every queued entry is valid until its completion (push_sqe); no signal mask or
    // extended argument is passed; min_complete 0 makes the enter return without waiting.
    unsafe {
        ring.submitter().enter::<libc::sigset_t>(
            queued,
            0,
            io_uring::EnterFlags::GETEVENTS.bits(),
            None,
        )
    }
    .map(|_| ())
}

/// The CPU the calling thread runs on now (`None` if the kernel cannot say).
fn current_cpu() -> Option<usize> {
    nix::sched::sched_getcpu().ok()
}

/// Writes the out header of an answer (errno, `len` bytes of out arguments) into an entry's
/// header buffer, with the payload size the kernel reads.
fn write_out_header(header_out: &mut [u8], unique: u64, errno: i32, len: usize) {
    header_out[..OUT_HEADER_SIZE].copy_from_slice(&out_header(unique, errno, len));
    let payload_sz = u32::try_from(len).unwrap_or(0);
    header_out[PAYLOAD_SZ_OFFSET..PAYLOAD_SZ_OFFSET + 4].copy_from_slice(&payload_sz.to_ne_bytes());
}

/// The request in an entry: its in header, its first argument and its payload, checked against
/// the buffers' sizes (`None` if the kernel's lengths do not add up).
fn parse_request<'a>(
    header: &'a [u8],
    payload: &'a [u8],
) -> Option<(InHeader, &'a [u8], &'a [u8])> {
    let in_header = InHeader::parse(header.get(..RING_IN_OUT_SIZE)?)?;
    let payload_len = usize::try_from(read_u32(header, PAYLOAD_SZ_OFFSET)?).ok()?;
    let payload = payload.get(..payload_len)?;
    // The in header's len counts the header and every argument; what the payload does not hold
    // is the first argument, in op_in.
    let op_in_len = usize::try_from(in_header.len)
        .ok()?
        .checked_sub(IN_HEADER_SIZE)?
        .checked_sub(payload_len)?;
    let op_in = header
        .get(RING_IN_OUT_SIZE..)?
        .get(..op_in_len.min(RING_OP_IN_SIZE + 1))?;
    if op_in.len() > RING_OP_IN_SIZE {
        return None;
    }
    Some((in_header, op_in, payload))
}

/// A spinning thread that finds this long between two looks for a request had its yield run
/// another thread: the spin ends.
const YIELD_CONTENDED: Duration = Duration::from_micros(20);

/// When a queue thread spins before it sleeps ([`crate::UringConfig::spin`]): only while its
/// requests come within the spin's length of its answers, so that an idle or slow requester
/// costs at most one spin at the end of its burst, not one per request.
struct Spin {
    length: Duration,
    /// Whether the last wait suggests that the next request comes soon.
    armed: bool,
}

impl Spin {
    fn new(length: Duration) -> Spin {
        Spin {
            length,
            armed: false,
        }
    }

    fn should_spin(&self) -> bool {
        self.armed && !self.length.is_zero()
    }

    /// After a wait: `spun` if the spin found the request, else how long the sleep lasted (if
    /// the thread slept).
    fn after_wait(&mut self, spun: bool, slept: Option<Duration>) {
        self.armed = spun || slept.is_some_and(|slept| slept < self.length);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::RING_HEADER_SIZE;

    fn header_with(len: u32, payload_sz: u32) -> Vec<u8> {
        let mut header = vec![0u8; RING_HEADER_SIZE];
        let in_header = InHeader {
            len,
            opcode: 15,
            unique: 4,
            ..InHeader::default()
        };
        header[..IN_HEADER_SIZE].copy_from_slice(&in_header.to_bytes());
        header[PAYLOAD_SZ_OFFSET..PAYLOAD_SZ_OFFSET + 4].copy_from_slice(&payload_sz.to_ne_bytes());
        header
    }

    #[test]
    fn request_lengths_are_checked() {
        let payload = vec![0u8; 64];
        // READ: a 40-byte fuse_read_in in op_in, no payload.
        let read = header_with(80, 0);
        let (header, op_in, body) = parse_request(&read, &payload).expect("valid");
        assert_eq!((header.opcode, op_in.len(), body.len()), (15, 40, 0));
        // More payload than the buffer holds.
        assert!(parse_request(&header_with(200, 100), &payload).is_none());
        // A len shorter than header + payload.
        assert!(parse_request(&header_with(50, 20), &payload).is_none());
        // A first argument larger than op_in.
        assert!(parse_request(&header_with(40 + 129, 0), &payload).is_none());
    }
}
