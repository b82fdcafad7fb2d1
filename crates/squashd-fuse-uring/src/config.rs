//! How big the rings are: queues, entries per queue, payload buffer per entry, and whether a
//! mount starts small (one thread holding one entry of every CPU's queue) and grows per-CPU
//! queues only once it is busy.

use std::sync::OnceLock;

use crate::abi::{FUSE_MIN_READ_BUFFER, RING_HEADER_SIZE};
use crate::UringError;

/// The shape of one mount's rings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UringConfig {
    /// Ring entries (requests in flight) per queue. 1 is enough for an idle image; with a
    /// thread per entry ([`QueueThreads::PerEntry`]) each more lets squashd answer one more
    /// request of that CPU while the others wait (for a decompression, a read from disk); with
    /// one thread per CPU ([`QueueThreads::PerCpu`]) each more is one more request of that CPU
    /// the thread takes in its next batch instead of the kernel holding it. At most 64.
    pub queue_depth: u32,
    /// Which threads answer the entries of a CPU's queue once the per-CPU queues run.
    pub threads: QueueThreads,
    /// Bytes of each entry's payload buffer. The kernel refuses a buffer smaller than
    /// [`UringConfig::required_payload_size`] of the negotiated INIT.
    pub payload_size: usize,
    /// Number of queues: the kernel keeps one per possible CPU and uses the ring only once every
    /// one has an entry, so this must be [`possible_cpus`].
    pub cpus: usize,
    /// How the transport starts. `None`: `queue_depth` threads per CPU at once, each with one
    /// entry of that CPU's queue (pinned to it if [`UringConfig::pin_threads`]). `Some(n)`: an
    /// idle start, for a mount that may stay idle (a daemon's dozens of images): one thread with
    /// one io_uring holds one entry of every CPU's queue (the kernel's minimum for using the
    /// ring at all; if pinning, the thread pins itself to each request's CPU as it answers), and
    /// the per-CPU threads start only once that thread has answered `n` requests. The kernel picks a
    /// queue by the requester's CPU, not by the thread that registered its entries
    /// (`fuse_uring_task_to_queue` in `fs/fuse/dev_uring.c`), so one thread can serve them all.
    pub per_cpu_after: Option<u64>,
    /// Whether each queue's threads pin themselves to the queue's CPU (and the idle start's
    /// thread to each request's CPU as it answers), so that an answer wakes its requester on
    /// the requester's own CPU. It pays only when the server shares the requesters' scheduling
    /// group: a daemon in a group of its own (its session's autogroup, a service's cgroup)
    /// switches groups on that CPU at every round trip, and walked a cold tree about a fifth
    /// slower pinned than unpinned (bench/results/2026-11-27-s11.md, section 6; on another VM,
    /// 2026-12-07-s12.md section 2, unpinned won with guest halt polling and lost a little
    /// without). Off unless asked for ([`UringConfig::pinned`]).
    pub pin_threads: bool,
    /// How long a queue thread that just answered keeps looking for its next request before it
    /// sleeps (zero: it sleeps at once). A thread asleep lets its CPU go idle, and on a virtual
    /// machine whose idle vCPUs halt (no guest halt polling) waking that CPU again costs a trip
    /// through the hypervisor on every round trip: a cold walk of usr took 1.59-1.68 s without
    /// spinning and 1.03-1.21 s with 50 us (bench/results/2026-12-07-s12.md). A thread spins
    /// only while requests come that fast (after a wait that found nothing it sleeps at once
    /// until a request follows its answer within this time again), only for a lone requester
    /// (the thread's last two requests came from the same thread), only while no other thread
    /// of the transport answers or spins, and not past a yield that ran another thread: many
    /// requesters keep the threads busy, and spinning ones took the CPU the others needed.
    pub spin: std::time::Duration,
}

/// Which threads answer the entries of a CPU's queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueueThreads {
    /// A thread (and an io_uring) per entry: an answer that waits holds up only its own entry,
    /// and another thread of the CPU answers the next request meanwhile. For a file system whose
    /// answers may wait long: for requests of its own mount (the kernel path's blob file
    /// system asks EROFS to read ahead, which reads the blob through the same connection; a
    /// thread that holds every entry of its CPU's queue would wait for itself) or for a network.
    #[default]
    PerEntry,
    /// One thread (and one io_uring) per CPU holding every entry of that CPU's queue, as
    /// libfuse does: the requests that came while it answered are answered in one batch, their
    /// answers committed with one system call, and no other thread of the CPU is woken for them.
    /// Sixteen cold walkers of usr took 2.5-2.8 s this way against 2.5-5.1 s with a thread per
    /// entry and 2.8-4.4 s over /dev/fuse, and sent fewer requests
    /// (bench/results/2026-12-07-s14.md). An answer that waits (a read of the image from disk)
    /// holds up the CPU's other requests: for file systems whose answers never wait long.
    PerCpu,
}

impl UringConfig {
    /// A config for this machine's CPUs and the limits negotiated at INIT (`max_write` and
    /// `max_pages` of the INIT reply squashd sent).
    pub fn for_init(
        queue_depth: u32,
        max_write: u32,
        max_pages: u16,
    ) -> Result<UringConfig, UringError> {
        Ok(UringConfig {
            queue_depth,
            threads: QueueThreads::PerEntry,
            payload_size: UringConfig::required_payload_size(max_write, max_pages),
            cpus: possible_cpus()?,
            per_cpu_after: None,
            pin_threads: false,
            spin: std::time::Duration::ZERO,
        })
    }

    /// This config with queue threads that look for their next request for `spin` before they
    /// sleep (see [`UringConfig::spin`]).
    pub fn spinning(self, spin: std::time::Duration) -> UringConfig {
        UringConfig { spin, ..self }
    }

    /// This config with one thread per CPU answering every entry of its queue (see
    /// [`QueueThreads::PerCpu`]).
    pub fn one_thread_per_cpu(self) -> UringConfig {
        UringConfig {
            threads: QueueThreads::PerCpu,
            ..self
        }
    }

    /// This config with every queue thread pinned to its queue's CPU (see
    /// [`UringConfig::pin_threads`]).
    pub fn pinned(self) -> UringConfig {
        UringConfig {
            pin_threads: true,
            ..self
        }
    }

    /// This config with an idle start: per-CPU queues only after `requests` requests (see
    /// [`UringConfig::per_cpu_after`]).
    pub fn idle_start(self, requests: u64) -> UringConfig {
        UringConfig {
            per_cpu_after: Some(requests),
            ..self
        }
    }

    /// The kernel's rule (`fuse_uring_create`): max(FUSE_MIN_READ_BUFFER, max_write,
    /// max_pages * PAGE_SIZE). `max_pages` 0 means the kernel's default of 32 pages.
    pub fn required_payload_size(max_write: u32, max_pages: u16) -> usize {
        let pages = if max_pages == 0 {
            32
        } else {
            usize::from(max_pages)
        };
        let max_write = usize::try_from(max_write).unwrap_or(usize::MAX);
        FUSE_MIN_READ_BUFFER
            .max(max_write)
            .max(pages.saturating_mul(page_size()))
    }
}

/// The most memory the rings of `config` can take: header and payload buffers of every entry,
/// and each queue's submission and completion rings, once every per-CPU queue runs (plus the
/// idle start's queue, which stays). A running transport reports what it has allocated so far:
/// [`crate::Transport::memory`].
pub fn ring_memory(config: &UringConfig) -> usize {
    // Each entry of a CPU's queue has a thread and a ring of its own, or the CPU's one thread
    // has one ring for all of them (`QueueLayout::per_cpu`).
    let depth = usize::try_from(config.queue_depth).unwrap_or(usize::MAX);
    let per_cpu = match config.threads {
        QueueThreads::PerEntry => depth.saturating_mul(queue_memory(1, config.payload_size)),
        QueueThreads::PerCpu => queue_memory(depth, config.payload_size),
    }
    .saturating_mul(config.cpus);
    match config.per_cpu_after {
        Some(_) => per_cpu.saturating_add(queue_memory(config.cpus, config.payload_size)),
        None => per_cpu,
    }
}

/// Bytes of one queue thread's ring with `entries` entries of `payload_size`-byte payloads: the
/// entries' header and payload buffers, and the submission and completion rings (128-byte SQEs
/// with their 4-byte index, 16-byte CQEs, twice as many).
pub(crate) fn queue_memory(entries: usize, payload_size: usize) -> usize {
    let per_entry = payload_size.saturating_add(RING_HEADER_SIZE);
    let sqes = sq_entries(entries);
    let ring = sqes
        .saturating_mul(128 + 4)
        .saturating_add(sqes.saturating_mul(2 * 16));
    entries.saturating_mul(per_entry).saturating_add(ring)
}

/// Submission queue entries of a ring with `entries` entries: one more for the wake-up read of
/// the queue's eventfd, rounded up to a power of two as the kernel does.
pub(crate) fn sq_entries(entries: usize) -> usize {
    entries.saturating_add(1).next_power_of_two()
}

/// The number of possible CPUs (`/sys/devices/system/cpu/possible`), which is the kernel's
/// number of ring queues (`num_possible_cpus()`).
/// Read once per process: the set of possible CPUs is fixed at boot, and a daemon asks for
/// every mount it attaches (an open, a read and a close on each INIT otherwise).
pub fn possible_cpus() -> Result<usize, UringError> {
    static POSSIBLE: OnceLock<usize> = OnceLock::new();
    if let Some(&cpus) = POSSIBLE.get() {
        return Ok(cpus);
    }
    let cpus = read_possible_cpus()?;
    Ok(*POSSIBLE.get_or_init(|| cpus))
}

fn read_possible_cpus() -> Result<usize, UringError> {
    const PATH: &str = "/sys/devices/system/cpu/possible";
    let text = std::fs::read_to_string(PATH).map_err(|source| UringError::Io {
        what: format!("read {PATH}"),
        source,
    })?;
    parse_cpu_list(text.trim()).ok_or_else(|| {
        UringError::Config(format!(
            "{PATH}: cannot parse {:?}; expected a list like 0-3",
            text.trim()
        ))
    })
}

/// Counts the CPUs of a list like `0-3,5`; `None` unless they are 0..n without holes (queue ids
/// are CPU numbers, so a hole would leave a queue no thread can be pinned to, and the ring would
/// never become ready).
fn parse_cpu_list(list: &str) -> Option<usize> {
    let mut next = 0usize;
    for range in list.split(',') {
        let (first, last) = match range.split_once('-') {
            Some((a, b)) => (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?),
            None => {
                let cpu = range.parse::<usize>().ok()?;
                (cpu, cpu)
            }
        };
        if first != next || last < first {
            return None;
        }
        next = last.checked_add(1)?;
    }
    (next > 0).then_some(next)
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions; it only reads a system constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|&s| s > 0)
        .unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("0-1"), Some(2));
        assert_eq!(parse_cpu_list("0-3,4-7"), Some(8));
        assert_eq!(parse_cpu_list("0-1,3"), None);
        assert_eq!(parse_cpu_list("1-3"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn payload_follows_the_kernels_rule() {
        let page = page_size();
        assert_eq!(
            UringConfig::required_payload_size(4096, 1),
            FUSE_MIN_READ_BUFFER.max(page)
        );
        assert_eq!(
            UringConfig::required_payload_size(1 << 20, 32),
            (1 << 20).max(32 * page)
        );
        assert_eq!(UringConfig::required_payload_size(4096, 256), 256 * page);
    }

    #[test]
    fn memory_grows_with_cpus_depth_and_payload() {
        let config = UringConfig {
            queue_depth: 2,
            threads: QueueThreads::PerEntry,
            payload_size: 128 << 10,
            cpus: 4,
            per_cpu_after: None,
            pin_threads: false,
            spin: std::time::Duration::ZERO,
        };
        let memory = ring_memory(&config);
        assert!(memory >= 4 * 2 * (128 << 10));
        assert!(memory < 4 * 2 * (129 << 10));
        // The idle start's queue (one entry per CPU) comes on top of the per-CPU queues.
        let idle = ring_memory(&config.idle_start(64));
        assert_eq!(idle, memory + queue_memory(4, 128 << 10));
        assert!(queue_memory(4, 128 << 10) >= 4 * (128 << 10));
        assert!(queue_memory(4, 128 << 10) < 4 * (129 << 10));
        // One thread per CPU: the same buffers, one ring per CPU instead of one per entry.
        let per_cpu = ring_memory(&config.one_thread_per_cpu());
        assert_eq!(per_cpu, 4 * queue_memory(2, 128 << 10));
        assert!(per_cpu >= 4 * 2 * (128 << 10));
        assert!(per_cpu <= memory);
    }
}
