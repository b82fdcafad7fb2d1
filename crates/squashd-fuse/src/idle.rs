//! The idle timeout: when the mount last served a request, and the thread that unmounts it
//! after a quiet period.

use crate::mount_point::NotOurMount;
use crate::unmount::Unmounter;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// When the last request arrived, for the idle timeout.
#[derive(Debug)]
pub(crate) struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Self {
        Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    /// Marks the mount active now.
    pub(crate) fn touch(&self) {
        let now = self.start.elapsed().as_millis() as u64;
        // Cheap on the hot path: most requests find the value already current.
        if self.last_ms.load(Ordering::Relaxed) + 100 < now {
            self.last_ms.store(now, Ordering::Relaxed);
        }
    }

    fn idle_for(&self) -> Duration {
        let now = self.start.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::Relaxed)))
    }
}

/// Starts the thread that unmounts through `unmounter` once `activity` has been quiet for
/// `timeout`; it ends after unmounting, or when `done` is set (the session is over).
pub(crate) fn start_timer(
    activity: Arc<Activity>,
    timeout: Duration,
    unmounter: Unmounter,
    done: Arc<AtomicBool>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("idle-timer".into())
        .spawn(move || idle_timer(&activity, timeout, &unmounter, &done))
        .map(drop)
}

fn idle_timer(activity: &Activity, timeout: Duration, unmounter: &Unmounter, done: &AtomicBool) {
    let tick = timeout
        .min(Duration::from_secs(1))
        .max(Duration::from_millis(50));
    let mut reported = false;
    while !done.load(Ordering::Relaxed) {
        std::thread::sleep(tick);
        if activity.idle_for() >= timeout && !done.load(Ordering::Relaxed) {
            // Not lazy: a mount still in use (open files, a shell's cwd) stays, and the
            // timer tries again after another idle period.
            match unmounter.unmount(false) {
                Ok(()) => return,
                Err(e) => {
                    // Said once: the timer keeps trying, quietly, in case it comes back.
                    if NotOurMount::is(&e) && !reported {
                        tracing::warn!("idle timeout: {e}");
                        reported = true;
                    }
                    activity.touch();
                }
            }
        }
    }
}
