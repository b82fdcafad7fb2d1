//! Prefetch: fetching a remote image's units before a reader asks for them. A window that grows
//! while a reader goes on sequentially, and a queue of units to fetch in the background (that
//! window, the hints of the kernel's read-ahead and of squashd's own, a prefetch list), worked
//! by a few threads that take connections only when no reader needs one (see `gate`).
//! (Read-ahead, in squashd, is decompressing a file's blocks ahead of its reader: squashd-core's
//! `read_ahead`.)

use std::collections::{HashSet, VecDeque};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

/// How many sequential streams are followed at once; the least recently used is replaced.
const STREAMS: usize = 8;

/// Units queued at most; older entries are dropped first (a reader has moved on from them).
const MAX_QUEUED: usize = 1 << 16;

#[derive(Clone, Copy, Default)]
struct Stream {
    last_unit: u64,
    /// Units before this one are fetched or queued.
    queued_end: u64,
    window: u64,
    used: u64,
}

/// Recognises sequential readers and sizes their prefetch window.
pub(crate) struct Streams {
    state: Mutex<([Stream; STREAMS], u64)>,
    max_window: u64,
}

impl Streams {
    pub fn new(max_window: u64) -> Streams {
        Streams {
            state: Mutex::new(([Stream::default(); STREAMS], 0)),
            max_window: max_window.max(1),
        }
    }

    /// A reader read units `first..=last`: the units to fetch ahead for it. A reader that goes
    /// on from where a stream stopped gets, each time it comes within half a window of what is
    /// queued, the next stretch of a window that doubles up to the largest: batches rather than
    /// a unit per read, so that a request carries many units (as the kernel's asynchronous
    /// read-ahead marks a page to start the next batch). A read elsewhere starts a new stream,
    /// with nothing fetched ahead yet.
    pub fn on_read(&self, first: u64, last: u64) -> std::ops::Range<u64> {
        let mut guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (streams, clock) = &mut *guard;
        *clock += 1;
        let now = *clock;
        if let Some(stream) = streams
            .iter_mut()
            .find(|s| s.used != 0 && (first == s.last_unit + 1 || first == s.last_unit))
        {
            stream.used = now;
            if last <= stream.last_unit {
                // The same unit again: no progress, no more prefetch.
                return 0..0;
            }
            stream.last_unit = last;
            let next = stream.last_unit + 1;
            if stream.queued_end > next + stream.window / 2 {
                return 0..0;
            }
            stream.window = (stream.window * 2).min(self.max_window);
            let from = stream.queued_end.max(next);
            stream.queued_end = next + stream.window;
            return from..stream.queued_end;
        }
        if let Some(oldest) = streams.iter_mut().min_by_key(|s| s.used) {
            *oldest = Stream {
                last_unit: last,
                queued_end: last + 1,
                window: 1,
                used: now,
            };
        }
        0..0
    }
}

/// Units waiting to be fetched ahead of any reader.
pub(crate) struct Queue {
    state: Mutex<QueueState>,
    ready: Condvar,
}

#[derive(Default)]
struct QueueState {
    units: VecDeque<u64>,
    queued: HashSet<u64>,
    closed: bool,
}

impl Queue {
    pub fn new() -> Queue {
        Queue {
            state: Mutex::default(),
            ready: Condvar::new(),
        }
    }

    /// Queues `units` (each once).
    pub fn push(&self, units: impl IntoIterator<Item = u64>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        for unit in units {
            if state.queued.insert(unit) {
                state.units.push_back(unit);
            }
        }
        while state.units.len() > MAX_QUEUED {
            if let Some(dropped) = state.units.pop_front() {
                state.queued.remove(&dropped);
            }
        }
        drop(state);
        self.ready.notify_all();
    }

    /// The next units to fetch: the first queued and those queued right after it that follow
    /// it without a gap, `max` at most (one request fetches them), waiting up to `patience`
    /// for one; empty on time-out, `Err` once closed.
    pub fn pop_run(&self, max: usize, patience: Duration) -> Result<Vec<u64>, ()> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.units.is_empty() && !state.closed {
            state = self
                .ready
                .wait_timeout(state, patience)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        if state.closed {
            return Err(());
        }
        let mut run: Vec<u64> = Vec::new();
        while let Some(&unit) = state.units.front() {
            if !state.queued.contains(&unit) {
                // Claimed by a reader meanwhile.
                state.units.pop_front();
                continue;
            }
            if run.len() >= max.max(1) || run.last().is_some_and(|&last| unit != last + 1) {
                break;
            }
            state.units.pop_front();
            state.queued.remove(&unit);
            run.push(unit);
        }
        Ok(run)
    }

    /// Takes `first` and the units after it that are queued too (`max` at most, without a
    /// gap) out of the queue, for a reader who needs `first` now: prefetch has not come to
    /// them yet. Empty if `first` is not queued.
    pub fn claim(&self, first: u64, max: usize) -> Vec<u64> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut run = Vec::new();
        let mut unit = first;
        // The deque keeps claimed units until `pop_run` comes to them and skips them.
        while run.len() < max && state.queued.remove(&unit) {
            run.push(unit);
            unit += 1;
        }
        run
    }

    /// The next unit to fetch, waiting up to `patience`; `None` on time-out, `Err` once closed.
    #[cfg(test)]
    pub fn pop(&self, patience: Duration) -> Result<Option<u64>, ()> {
        Ok(self.pop_run(1, patience)?.first().copied())
    }

    /// Stops the workers.
    pub fn close(&self) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .closed = true;
        self.ready.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sequential_reader_gets_growing_batches() {
        let streams = Streams::new(8);
        assert_eq!(
            streams.on_read(10, 10),
            0..0,
            "a first read is not yet a stream"
        );
        assert_eq!(streams.on_read(11, 11), 12..14);
        assert_eq!(
            streams.on_read(11, 11),
            0..0,
            "the same unit again asks for nothing"
        );
        assert_eq!(streams.on_read(12, 12), 14..17);
        assert_eq!(
            streams.on_read(13, 13),
            0..0,
            "more than half a window is queued"
        );
        assert_eq!(streams.on_read(14, 14), 17..23);
        let mut batches = Vec::new();
        for unit in 15..40 {
            let batch = streams.on_read(unit, unit);
            if !batch.is_empty() {
                batches.push(batch);
            }
        }
        // Capped at 8 units ahead, queued 4 at a time, each unit once and in order.
        assert!(batches.iter().all(|b| b.end - b.start <= 8), "{batches:?}");
        assert!(
            batches.windows(2).all(|w| w[0].end == w[1].start),
            "{batches:?}"
        );
        assert!(
            batches.iter().skip(1).all(|b| b.end - b.start >= 4),
            "{batches:?}"
        );
        assert_eq!(
            streams.on_read(500, 500),
            0..0,
            "a jump starts another stream"
        );
        assert!(
            (40..44).any(|unit| !streams.on_read(unit, unit).is_empty()),
            "the first stream goes on"
        );
    }

    #[test]
    fn the_queue_keeps_each_unit_once_and_closes() {
        let queue = Queue::new();
        queue.push([3, 4, 3]);
        assert_eq!(queue.pop(Duration::ZERO), Ok(Some(3)));
        assert_eq!(queue.pop(Duration::ZERO), Ok(Some(4)));
        assert_eq!(queue.pop(Duration::from_millis(1)), Ok(None));
        queue.close();
        assert_eq!(queue.pop(Duration::ZERO), Err(()));
    }

    #[test]
    fn a_run_is_units_that_follow_each_other() {
        let queue = Queue::new();
        queue.push([5, 6, 7, 9, 10, 11, 12]);
        assert_eq!(queue.pop_run(8, Duration::ZERO), Ok(vec![5, 6, 7]));
        assert_eq!(queue.pop_run(2, Duration::ZERO), Ok(vec![9, 10]));
        assert_eq!(queue.pop_run(8, Duration::ZERO), Ok(vec![11, 12]));
        assert_eq!(queue.pop_run(8, Duration::from_millis(1)), Ok(vec![]));
    }

    #[test]
    fn a_reader_claims_queued_units_and_prefetch_skips_them() {
        let queue = Queue::new();
        queue.push([1, 2, 3, 4, 5, 7]);
        assert_eq!(queue.claim(9, 4), Vec::<u64>::new(), "not queued");
        assert_eq!(queue.claim(2, 2), vec![2, 3]);
        assert_eq!(queue.pop_run(8, Duration::ZERO), Ok(vec![1]));
        assert_eq!(queue.claim(5, 4), vec![5], "6 is not queued");
        assert_eq!(queue.pop_run(8, Duration::ZERO), Ok(vec![4]));
        assert_eq!(queue.pop_run(8, Duration::ZERO), Ok(vec![7]));
        // A claimed unit queued again is fetched once.
        queue.push([3]);
        assert_eq!(queue.pop_run(8, Duration::ZERO), Ok(vec![3]));
        assert_eq!(queue.pop_run(8, Duration::from_millis(1)), Ok(vec![]));
    }
}
