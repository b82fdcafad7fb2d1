//! Whether a per-CPU queue thread should be pinned to its CPU, from who sent its last requests.
//!
//! One thread holds every entry of its CPU's queue ([`crate::QueueThreads::PerCpu`]), so two
//! requesters on that CPU are answered one after the other. Left to the scheduler, the thread
//! often ran on the other CPU while the two requesters stayed together on theirs, and the other
//! CPU's thread had nothing to do. Pinned to its CPU, the thread crowds the two requesters
//! there, the scheduler moves one of them to another CPU, and that CPU's thread answers it.
//! Measured on a 2-CPU VM (bench/results/2026-12-07-s16.md, section 8; medians of 5 rounds):
//! 2 cold walkers of usr 0.94 s against 1.06 s unpinned, 4 walkers 1.52 s against 1.70 s.
//! Pinned with one requester, the thread takes that requester's CPU instead of answering from
//! the other one (one walker 1.16-1.23 s against 1.02-1.08 s); pinned with many, a CPU's
//! requesters are answered in turn and move in step, each listing every directory (16 walkers
//! 4.6-5.8 s against 2.6-3.2 s). So the thread is pinned only while two requesters share its
//! queue, and let go with one or with four or more.

/// Requests remembered: enough to see a CPU's walkers take turns, few enough to follow them when
/// they move.
const WINDOW: usize = 32;

/// The requesters of a queue thread's last [`WINDOW`] requests (a request's `pid` is the
/// requesting thread's id).
#[derive(Debug, Default)]
pub(crate) struct RecentRequesters {
    recent: Vec<u32>,
    next: usize,
}

impl RecentRequesters {
    /// Notes the requester of a request just taken.
    pub(crate) fn note(&mut self, pid: u32) {
        if self.recent.len() < WINDOW {
            self.recent.push(pid);
        } else {
            self.recent[self.next] = pid;
            self.next = (self.next + 1) % WINDOW;
        }
    }

    /// Whether the thread should be pinned to its CPU now: `Some(true)` with two requesters
    /// among the last requests, `Some(false)` with one or with four or more, `None` (as it
    /// is) with three, or before half a window of requests came.
    pub(crate) fn pin_wanted(&self) -> Option<bool> {
        if self.recent.len() < WINDOW / 2 {
            return None;
        }
        // Counted up to four, in place: this runs after every batch a thread answers.
        let mut distinct = [0u32; 4];
        let mut seen = 0;
        for &pid in &self.recent {
            if !distinct[..seen].contains(&pid) {
                distinct[seen] = pid;
                seen += 1;
                if seen == distinct.len() {
                    break;
                }
            }
        }
        match seen {
            2 => Some(true),
            3 => None,
            _ => Some(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(pids: impl IntoIterator<Item = u32>) -> Option<bool> {
        let mut r = RecentRequesters::default();
        for pid in pids {
            r.note(pid);
        }
        r.pin_wanted()
    }

    #[test]
    fn two_or_three_requesters_pin_one_or_many_do_not() {
        assert_eq!(after([7; 8]), None, "too few requests to tell");
        assert_eq!(after([7; 40]), Some(false), "one requester");
        assert_eq!(after((0..40).map(|i| 7 + i % 2)), Some(true));
        assert_eq!(after((0..40).map(|i| 7 + i % 3)), None, "three: as it is");
        assert_eq!(after((0..40).map(|i| 7 + i % 4)), Some(false));
        assert_eq!(after((0..40).map(|i| 7 + i % 16)), Some(false));
    }

    #[test]
    fn requesters_older_than_the_window_are_forgotten() {
        // Sixteen walkers, then two: the sixteen are gone once a window of the two came.
        let many = (0..64).map(|i| 100 + i % 16);
        let two = (0..WINDOW as u32).map(|i| 7 + i % 2);
        assert_eq!(after(many.clone().chain(two.clone())), Some(true));
        // Half a window of the two is not enough.
        let half = two.take(WINDOW / 2);
        assert_eq!(after(many.chain(half)), Some(false));
    }
}
