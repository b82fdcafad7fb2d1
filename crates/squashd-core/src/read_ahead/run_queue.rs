//! Whether the CPUs are busy, for read-ahead to go no deeper than its threads: a block
//! decompressed ahead on a machine whose cores all have tasks waiting takes a core from them,
//! and is wasted outright if the reader stops before it.
//!
//! The measure is the run queue: the number of runnable tasks, the `R` of `/proc/loadavg`'s
//! fourth field `R/T` (the kernel's `nr_running()`, summed over CPUs when the file is read).
//! It is what the machine is doing now, unlike the load averages beside it (the 1-minute one
//! trails an application start of ten seconds by most of its length), and the file is a few
//! dozen bytes: one read costs microseconds. It is read at most every [`SAMPLE_EVERY`], by
//! whichever reader asks, and smoothed over the last few samples, since one sample of an
//! instantaneous count is noisy. `/proc/pressure/cpu` was the other candidate; its shortest
//! average is over 10 s, and read-ahead's own threads would count in it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How often the run queue is sampled at most.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// Fixed-point scale of the smoothed count.
const SCALE: u64 = 16;

/// What tells read-ahead that the CPUs are busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CpuGauge {
    /// The run queue (see the module doc): busy when other tasks than the asking thread and
    /// read-ahead's own running threads are at least twice the cores this process may use.
    #[default]
    RunQueue,
    /// Never busy: read-ahead is bounded by its waste only. For measurements and tests whose
    /// figures must not depend on what else the machine runs.
    Off,
}

impl CpuGauge {
    /// Whether the CPUs are busy, `own` of read-ahead's threads being at work now.
    pub(crate) fn busy(self, own: u64) -> bool {
        match self {
            CpuGauge::Off => false,
            CpuGauge::RunQueue => {
                let Some(runnable) = RUN_QUEUE.smoothed() else {
                    return false;
                };
                // Twice the cores: every core has a task waiting beside the one it runs. At
                // one task per core a host is busy but read-ahead's threads still get their
                // share of it for a reader that is waiting for them.
                let others = runnable.saturating_sub(1 + own);
                others >= 2 * crate::cores() as u64
            }
        }
    }
}

/// The smoothed run queue of the machine, shared by every pool of the process.
struct RunQueue {
    /// Milliseconds since `epoch()` of the last sample (0: none yet).
    sampled_at: AtomicU64,
    /// Runnable tasks, times [`SCALE`], smoothed.
    smoothed: AtomicU64,
}

static RUN_QUEUE: RunQueue = RunQueue {
    sampled_at: AtomicU64::new(0),
    smoothed: AtomicU64::new(u64::MAX),
};

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl RunQueue {
    /// Runnable tasks, smoothed; sampled anew if the last sample is old. None if the file
    /// cannot be read (no /proc): then nothing is known to be busy.
    fn smoothed(&self) -> Option<u64> {
        let now = epoch().elapsed().as_millis() as u64 + 1;
        let last = self.sampled_at.load(Ordering::Relaxed);
        let due = now.saturating_sub(last) >= SAMPLE_EVERY.as_millis() as u64;
        // One reader samples; the others use what is there.
        if due
            && self
                .sampled_at
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            if let Some(sample) = std::fs::read_to_string("/proc/loadavg")
                .ok()
                .as_deref()
                .and_then(runnable)
            {
                let old = self.smoothed.load(Ordering::Relaxed);
                let new = if old == u64::MAX {
                    sample * SCALE
                } else {
                    // A quarter of the way to the new sample: about the last 200 ms count.
                    (old * 3 + sample * SCALE) / 4
                };
                self.smoothed.store(new, Ordering::Relaxed);
            }
        }
        let s = self.smoothed.load(Ordering::Relaxed);
        (s != u64::MAX).then(|| s.div_ceil(SCALE))
    }
}

/// The runnable tasks of a `/proc/loadavg` line: `R` of its fourth field `R/T`.
pub(crate) fn runnable(loadavg: &str) -> Option<u64> {
    let field = loadavg.split_ascii_whitespace().nth(3)?;
    field.split_once('/')?.0.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runnable_is_the_first_half_of_the_fourth_field() {
        assert_eq!(runnable("0.22 1.10 2.12 3/86 26583\n"), Some(3));
        assert_eq!(runnable("0.22 1.10 2.12"), None);
        assert_eq!(runnable("0.22 1.10 2.12 x/86 1"), None);
        // This machine's own file parses, and counts at least the thread reading it.
        let here = std::fs::read_to_string("/proc/loadavg").unwrap();
        assert!(runnable(&here).unwrap() >= 1, "{here}");
    }

    #[test]
    fn off_is_never_busy() {
        assert!(!CpuGauge::Off.busy(0));
    }
}
