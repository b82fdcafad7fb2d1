//! A pool of background threads fed by a bounded queue, started on first use and stopped and
//! joined when dropped: the shape shared by read-ahead ([`crate::read_ahead`]) and the FUSE mount's page store.
//!
//! Started on first use: a daemon may fork after mounting, and threads started before the fork
//! would not exist in the child. Stopped and joined on drop: a queued job may hold the image (or
//! the session's /dev/fuse descriptor) and must not outlive the mount. A full queue drops new
//! jobs: what the workers do is only ever an optimisation.

use crossbeam_channel::{Sender, TrySendError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

/// What a worker does with each job.
type Handler<J> = Arc<dyn Fn(J) + Send + Sync>;

/// `threads` workers running `handler` on the jobs of a queue of `queue` places.
pub struct Workers<J: Send + 'static> {
    /// What the workers are, for the log line when one cannot start.
    what: &'static str,
    /// Names worker `i`'s thread.
    thread_name: fn(usize) -> String,
    threads: usize,
    queue: usize,
    handler: Handler<J>,
    /// The queue, once the workers are started; `None` when they could not be.
    sender: OnceLock<Option<Sender<J>>>,
    running: Mutex<Vec<JoinHandle<()>>>,
    /// Set when the pool is dropped: queued jobs are then dropped, not run.
    closing: Arc<AtomicBool>,
}

impl<J: Send + 'static> Workers<J> {
    /// A pool of `threads` threads (named by `thread_name`), doing `what`.
    pub fn new(
        what: &'static str,
        thread_name: fn(usize) -> String,
        threads: usize,
        queue: usize,
        handler: impl Fn(J) + Send + Sync + 'static,
    ) -> Self {
        Workers {
            what,
            thread_name,
            threads,
            queue: queue.max(1),
            handler: Arc::new(handler),
            sender: OnceLock::new(),
            running: Mutex::new(Vec::new()),
            closing: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The queue, starting the workers the first time; `None` if none could be started.
    pub fn queue(&self) -> Option<&Sender<J>> {
        self.sender.get_or_init(|| self.start()).as_ref()
    }

    /// Queues `job` unless the queue is full (or the workers could not start); returns whether
    /// it was queued.
    pub fn offer(&self, job: J) -> bool {
        match self.queue().map(|tx| tx.try_send(job)) {
            Some(Ok(())) => true,
            Some(Err(TrySendError::Full(_) | TrySendError::Disconnected(_))) | None => false,
        }
    }

    fn start(&self) -> Option<Sender<J>> {
        if self.threads == 0 {
            return None;
        }
        let (tx, rx) = crossbeam_channel::bounded::<J>(self.queue);
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        for i in 0..self.threads {
            let rx = rx.clone();
            let closing = self.closing.clone();
            let handler = self.handler.clone();
            let name = (self.thread_name)(i);
            let spawned = std::thread::Builder::new().name(name).spawn(move || {
                for job in rx {
                    if closing.load(Ordering::Relaxed) {
                        break;
                    }
                    handler(job);
                }
            });
            match spawned {
                Ok(worker) => running.push(worker),
                Err(e) => {
                    tracing::warn!("cannot start a {} thread: {e}", self.what);
                    // The workers already started end when `tx` drops here.
                    return None;
                }
            }
        }
        Some(tx)
    }
}

impl<J: Send + 'static> Drop for Workers<J> {
    fn drop(&mut self) {
        self.closing.store(true, Ordering::Relaxed);
        // Disconnects the queue: each worker ends after the job it is on.
        drop(self.sender.take());
        let running = std::mem::take(self.running.get_mut().unwrap_or_else(|e| e.into_inner()));
        for worker in running {
            let _ = worker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::{Duration, Instant};

    #[test]
    fn runs_jobs_and_joins_on_drop() {
        let done = Arc::new(AtomicUsize::new(0));
        let counter = done.clone();
        let workers = Workers::new(
            "test",
            |i| format!("test-{i}"),
            2,
            8,
            move |n: usize| {
                counter.fetch_add(n, Ordering::SeqCst);
            },
        );
        for _ in 0..5 {
            assert!(workers.offer(1));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while done.load(Ordering::SeqCst) < 5 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(done.load(Ordering::SeqCst), 5);
        drop(workers);
        // Dropped: no worker holds the handler (and what it captured) any more.
        assert_eq!(Arc::strong_count(&done), 1);
    }

    #[test]
    fn a_full_queue_or_no_threads_refuses_jobs() {
        let none = Workers::new("test", |i| format!("test-{i}"), 0, 8, |_: ()| {});
        assert!(!none.offer(()));
        let (release, wait) = crossbeam_channel::bounded::<()>(0);
        let one = Workers::new(
            "test",
            |i| format!("test-{i}"),
            1,
            1,
            move |_: ()| {
                let _ = wait.recv();
            },
        );
        // The worker holds one job (waiting), the queue one more; the third is refused.
        assert!(one.offer(()));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !one.offer(()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!one.offer(()));
        drop(release);
    }
}
