//! Units a request is fetching right now (prefetch's, or a reader's), so that a reader who
//! misses one waits for its bytes (they are already on the way) and prefetch leaves it alone,
//! instead of fetching the same unit a second time.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The outcome of one unit in flight: `None` while its bytes are on the way, then the bytes, or
/// `Some(None)` if the request ended without them.
type Outcome = Option<Option<Arc<[u8]>>>;

#[derive(Default)]
struct Slot {
    outcome: Mutex<Outcome>,
    done: Condvar,
}

/// The units of the requests prefetch has under way.
#[derive(Default)]
pub(crate) struct InFlight {
    slots: Mutex<HashMap<u64, Arc<Slot>>>,
}

impl InFlight {
    /// Marks `units` as on their way (a request for them is being sent).
    pub fn begin(&self, units: impl IntoIterator<Item = u64>) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        for unit in units {
            slots.entry(unit).or_default();
        }
    }

    /// Marks as on their way the units of `units` from the first on, up to (not including) the
    /// first that is on its way already or that `held` says is held: the stretch a request may
    /// fetch without fetching anything twice. Returns its last unit; `None` if the first is
    /// taken. Checked and marked at once, so two requests never both take a unit.
    pub fn begin_stretch(
        &self,
        units: std::ops::RangeInclusive<u64>,
        held: impl Fn(u64) -> bool,
    ) -> Option<u64> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let mut last = None;
        for unit in units {
            if slots.contains_key(&unit) || held(unit) {
                break;
            }
            slots.insert(unit, Arc::default());
            last = Some(unit);
        }
        last
    }

    /// Whether a request has unit `unit` on the way.
    pub fn contains(&self, unit: u64) -> bool {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&unit)
    }

    /// Unit `unit` arrived (`Some`), or will not come from this request (`None`): its waiters
    /// go on.
    pub fn finish(&self, unit: u64, bytes: Option<Arc<[u8]>>) {
        let slot = self
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&unit);
        if let Some(slot) = slot {
            *slot.outcome.lock().unwrap_or_else(PoisonError::into_inner) = Some(bytes);
            slot.done.notify_all();
        }
    }

    /// Unit `unit`'s bytes if a request has it under way and they come within `patience`;
    /// `None` if it is not in flight, the request failed, or it took too long (the caller then
    /// fetches it itself).
    pub fn wait(&self, unit: u64, patience: Duration) -> Option<Arc<[u8]>> {
        let slot = self
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&unit)
            .cloned()?;
        let deadline = Instant::now() + patience;
        let mut outcome = slot.outcome.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(bytes) = &*outcome {
                return bytes.clone();
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            outcome = slot
                .done
                .wait_timeout(outcome, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiter_gets_the_bytes_when_they_arrive() {
        let inflight = Arc::new(InFlight::default());
        inflight.begin([3, 4]);
        let waiter = {
            let inflight = inflight.clone();
            std::thread::spawn(move || inflight.wait(4, Duration::from_secs(10)))
        };
        std::thread::sleep(Duration::from_millis(20));
        inflight.finish(4, Some(Arc::from(&b"unit four"[..])));
        assert_eq!(waiter.join().unwrap().as_deref(), Some(&b"unit four"[..]));
        // Not in flight: no wait.
        assert!(inflight.wait(9, Duration::from_secs(10)).is_none());
        // A failed request lets its waiters go, empty-handed.
        inflight.finish(3, None);
        assert!(inflight.wait(3, Duration::from_secs(10)).is_none());
    }

    #[test]
    fn a_stretch_ends_at_the_first_unit_taken() {
        let inflight = InFlight::default();
        inflight.begin([5]);
        assert_eq!(inflight.begin_stretch(2..=8, |u| u == 4), Some(3));
        assert!(inflight.contains(2) && inflight.contains(3));
        assert_eq!(
            inflight.begin_stretch(3..=8, |_| false),
            None,
            "3 is taken now"
        );
        assert_eq!(inflight.begin_stretch(6..=8, |_| false), Some(8));
    }

    #[test]
    fn a_waiter_gives_up_after_its_patience() {
        let inflight = InFlight::default();
        inflight.begin([1]);
        let started = Instant::now();
        assert!(inflight.wait(1, Duration::from_millis(30)).is_none());
        assert!(started.elapsed() >= Duration::from_millis(30));
    }
}
