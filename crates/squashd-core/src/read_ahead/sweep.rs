//! The random reader's sweep: blocks of a file decompressed beside a reader that seeks
//! through it, on cores it leaves idle.
//!
//! A reader that seeks (a database, a program reading an index, fio's random map) waits at
//! every block it misses for that block's whole decompression, on one core, as the kernel's
//! squashfs makes it wait; read-ahead proper ([`super::ReadAheadPool::on_read`]) never starts,
//! since there is no stream. But a reader that keeps missing blocks of one file will go on
//! missing its other blocks, and on a machine with an idle core, a block decompressed there
//! before the reader comes is a wait saved. So, at each random miss of a file that has shown
//! several, the caller asks [`RandomSweep::candidates`] which blocks to bring in beside it:
//! the blocks after the missed one (the nearest first, since seeks often stay near their last
//! place), of which it takes the first its reader's cache lacks, up to
//! [`RandomSweep::per_miss`] of them.
//!
//! Only where it pays:
//! - only files of [`MIN_CHUNKS`] blocks or more, after [`AFTER_MISSES`] random misses: a
//!   small file or a few seeks are over before a sweep could help;
//! - never while the run queue says the CPUs are busy ([`CpuGauge`]): there the sweep would take
//!   a core from the readers;
//! - never more than [`RandomSweep::per_miss`] blocks per miss (one less than the cores): the
//!   sweep at most matches the reader's own misses, it does not run ahead of them;
//! - backing off on waste: a block swept and then missed by the reader was evicted (or dropped)
//!   before it was read, a decompression for nothing. A file whose last [`EPOCH`] sweeps had
//!   more than a quarter wasted is not swept for its next [`PAUSE_MISSES`] misses.
//!
//! The caller knows what its reader's cache holds (the kernel path asks the kernel about EROFS's
//! page cache); this module decides whether and where, and counts ([`SweepStats`]).

use super::run_queue::CpuGauge;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// Files smaller than this many blocks are not swept.
pub const MIN_CHUNKS: u64 = 16;

/// Random misses of a file before it is swept.
pub const AFTER_MISSES: u64 = 4;

/// How many blocks after the missed one are candidates.
pub const SCAN: u64 = 8;

/// Sweeps of a file weighed together for waste.
pub const EPOCH: u64 = 64;

/// Misses a wasteful file goes unswept.
pub const PAUSE_MISSES: u64 = 256;

/// Blocks swept most recently, per file, remembered to tell a wasted sweep (the reader missed
/// the block after all) from a used one.
const RECENT: usize = 32;

/// The sweep of one image's (or one blob's) files: its policy and counters.
#[derive(Debug)]
pub struct RandomSweep {
    per_miss: u64,
    gauge: CpuGauge,
    counters: SweepCounters,
}

/// One file's sweep: how it has been read at random, and what was swept of it lately.
#[derive(Debug, Default)]
pub struct SweepState {
    inner: Mutex<FileSweep>,
}

#[derive(Debug, Default)]
struct FileSweep {
    misses: u64,
    /// Blocks swept lately (`index + 1`, 0: none), a ring written at `next`.
    recent: [u64; RECENT],
    next: usize,
    /// Sweeps and wasted sweeps of the current epoch.
    epoch_sweeps: u64,
    epoch_wasted: u64,
    /// No sweeping before this miss count.
    paused_until: u64,
}

#[derive(Debug, Default)]
struct SweepCounters {
    sweeps: AtomicU64,
    wasted: AtomicU64,
    busy_skips: AtomicU64,
    pauses: AtomicU64,
}

/// What the sweep did, for `status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SweepStats {
    /// Blocks brought in beside a random reader.
    pub sweeps: u64,
    /// Of them, blocks the reader then missed all the same (evicted or dropped before it came).
    pub wasted: u64,
    /// Misses that swept nothing because the CPUs were busy.
    pub busy_skips: u64,
    /// Times a file's sweep was paused for waste.
    pub pauses: u64,
}

impl RandomSweep {
    /// A sweep bringing in up to one block less than the machine's cores per miss (at least
    /// one), or none when `enabled` is false (read-ahead turned off).
    pub fn new(enabled: bool) -> Self {
        Self::with_gauge(enabled, CpuGauge::default())
    }

    /// The same, with `gauge` telling when the CPUs are busy.
    pub fn with_gauge(enabled: bool, gauge: CpuGauge) -> Self {
        let per_miss = if enabled {
            (crate::cores() as u64).saturating_sub(1).clamp(1, 4)
        } else {
            0
        };
        RandomSweep {
            per_miss,
            gauge,
            counters: SweepCounters::default(),
        }
    }

    /// The same sweep bringing in up to `per_miss` blocks per miss (one to four, as the
    /// default; none still when it is off): for a caller whose readers' misses leave more of the
    /// machine idle than the default assumes.
    pub fn with_per_miss(mut self, per_miss: u64) -> Self {
        if self.per_miss > 0 {
            self.per_miss = per_miss.clamp(1, 4);
        }
        self
    }

    /// Blocks to bring in per miss at most (0: the sweep is off).
    pub fn per_miss(&self) -> u64 {
        self.per_miss
    }

    /// Notes a random miss of block `index` of a file of `chunks` blocks (`state` its sweep),
    /// and returns the blocks to consider bringing in beside it, nearest first: the caller takes
    /// the first [`RandomSweep::per_miss`] its reader's cache lacks and tells
    /// [`RandomSweep::swept`] of each. Empty when the policy of this module says not to sweep.
    pub fn candidates(&self, state: &SweepState, index: u64, chunks: u64) -> Vec<u64> {
        let mut s = state.lock();
        s.misses += 1;
        let key = index.saturating_add(1);
        if let Some(slot) = s.recent.iter_mut().find(|k| **k == key) {
            // Swept, and missed all the same: the sweep of it was for nothing.
            *slot = 0;
            s.epoch_wasted += 1;
            self.counters.wasted.fetch_add(1, Ordering::Relaxed);
        }
        if self.per_miss == 0
            || chunks < MIN_CHUNKS
            || s.misses <= AFTER_MISSES
            || s.misses < s.paused_until
        {
            return Vec::new();
        }
        if self.gauge.busy(0) {
            self.counters.busy_skips.fetch_add(1, Ordering::Relaxed);
            return Vec::new();
        }
        (1..=SCAN.min(chunks - 1))
            .map(|d| (index + d) % chunks)
            .collect()
    }

    /// Notes that block `index` of the file was brought in beside a random reader.
    pub fn swept(&self, state: &SweepState, index: u64) {
        let mut s = state.lock();
        let at = s.next;
        s.recent[at] = index.saturating_add(1);
        s.next = (at + 1) % RECENT;
        s.epoch_sweeps += 1;
        self.counters.sweeps.fetch_add(1, Ordering::Relaxed);
        if s.epoch_sweeps >= EPOCH {
            if s.epoch_wasted * 4 > s.epoch_sweeps {
                s.paused_until = s.misses + PAUSE_MISSES;
                self.counters.pauses.fetch_add(1, Ordering::Relaxed);
            }
            s.epoch_sweeps = 0;
            s.epoch_wasted = 0;
        }
    }

    /// Notes that the reader came to block `index`, swept, while it was still held for it
    /// somewhere other than the reader's cache (decompressed by the caller, not yet handed
    /// over): the sweep of it was used, and the miss about to be noted for it
    /// ([`RandomSweep::candidates`]) does not count it as wasted.
    pub fn used(&self, state: &SweepState, index: u64) {
        let key = index.saturating_add(1);
        let mut s = state.lock();
        if let Some(slot) = s.recent.iter_mut().find(|k| **k == key) {
            *slot = 0;
        }
    }

    /// What the sweep did so far.
    pub fn stats(&self) -> SweepStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SweepStats {
            sweeps: get(&self.counters.sweeps),
            wasted: get(&self.counters.wasted),
            busy_skips: get(&self.counters.busy_skips),
            pauses: get(&self.counters.pauses),
        }
    }
}

impl SweepState {
    fn lock(&self) -> std::sync::MutexGuard<'_, FileSweep> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep() -> RandomSweep {
        let mut s = RandomSweep::with_gauge(true, CpuGauge::Off);
        s.per_miss = 1;
        s
    }

    #[test]
    fn a_file_is_swept_only_after_several_misses_and_only_if_large() {
        let sweep = sweep();
        let state = SweepState::default();
        for _ in 0..AFTER_MISSES {
            assert!(sweep.candidates(&state, 10, 100).is_empty());
        }
        assert_eq!(
            sweep.candidates(&state, 10, 100),
            (11..=18).collect::<Vec<_>>()
        );
        // Near the end, the candidates wrap to the file's start.
        assert_eq!(sweep.candidates(&state, 98, 100)[..3], [99, 0, 1]);
        let small = SweepState::default();
        for _ in 0..10 {
            assert!(sweep.candidates(&small, 1, MIN_CHUNKS - 1).is_empty());
        }
        let off = RandomSweep::with_gauge(false, CpuGauge::Off);
        let state = SweepState::default();
        for _ in 0..10 {
            assert!(off.candidates(&state, 1, 100).is_empty());
        }
    }

    #[test]
    fn more_blocks_per_miss_are_one_to_four_and_an_off_sweep_stays_off() {
        let on = RandomSweep::with_gauge(true, CpuGauge::Off);
        assert_eq!(on.with_per_miss(2).per_miss(), 2);
        let on = RandomSweep::with_gauge(true, CpuGauge::Off);
        assert_eq!(on.with_per_miss(64).per_miss(), 4);
        let on = RandomSweep::with_gauge(true, CpuGauge::Off);
        assert_eq!(on.with_per_miss(0).per_miss(), 1);
        let off = RandomSweep::with_gauge(false, CpuGauge::Off);
        assert_eq!(off.with_per_miss(2).per_miss(), 0);
    }

    #[test]
    fn a_swept_block_reached_before_it_was_handed_over_is_not_wasted() {
        let sweep = sweep();
        let state = SweepState::default();
        for _ in 0..=AFTER_MISSES {
            sweep.candidates(&state, 0, 10_000);
        }
        sweep.swept(&state, 7);
        sweep.swept(&state, 8);
        sweep.used(&state, 7);
        sweep.candidates(&state, 7, 10_000);
        assert_eq!(sweep.stats().wasted, 0);
        // The other one, missed without `used`, was wasted.
        sweep.candidates(&state, 8, 10_000);
        assert_eq!(sweep.stats().wasted, 1);
    }

    #[test]
    fn a_swept_block_missed_again_is_wasted_and_much_waste_pauses_the_file() {
        let sweep = sweep();
        let state = SweepState::default();
        for _ in 0..=AFTER_MISSES {
            sweep.candidates(&state, 0, 10_000);
        }
        // An epoch in which every swept block is missed afterwards.
        for i in 0..EPOCH {
            let block = 1000 + i;
            sweep.swept(&state, block);
            assert!(!sweep.candidates(&state, block, 10_000).is_empty() || i + 1 == EPOCH);
        }
        let stats = sweep.stats();
        assert_eq!(stats.sweeps, EPOCH);
        assert_eq!(stats.wasted, EPOCH);
        assert_eq!(stats.pauses, 1);
        // Paused: no candidates for the next misses.
        assert!(sweep.candidates(&state, 5000, 10_000).is_empty());
        for _ in 0..PAUSE_MISSES {
            sweep.candidates(&state, 5000, 10_000);
        }
        assert!(!sweep.candidates(&state, 5000, 10_000).is_empty());
    }

    #[test]
    fn sweeps_the_reader_never_misses_again_are_not_wasted() {
        let sweep = sweep();
        let state = SweepState::default();
        for i in 0..200 {
            let miss = i * 10;
            let c = sweep.candidates(&state, miss, 10_000);
            if let Some(&first) = c.first() {
                sweep.swept(&state, first);
            }
        }
        let stats = sweep.stats();
        assert!(stats.sweeps > 150);
        assert_eq!((stats.wasted, stats.pauses), (0, 0));
    }
}
