//! Running a list of jobs on many threads, taken strictly in list order.
//!
//! Extraction threads block more than they compute: in `pread` of the image on a cold cache,
//! in file creation (the journal), in `write` when the kernel throttles dirty pages. So it runs
//! more threads than cores, and a thread that blocks leaves the others the cores. Jobs are taken
//! in list order (not split into per-thread ranges as rayon does) because the list is in image
//! order: all threads then read the image front to back together, which the kernel's
//! read-ahead recognises as one sequential stream.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Threads to run when the environment does not say (`SQUASHD_EXTRACT_THREADS`).
pub fn default_threads() -> usize {
    if let Some(n) = std::env::var("SQUASHD_EXTRACT_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
    {
        return n;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores * 4).clamp(4, 64)
}

/// Runs `work(state, job)` for every job on `threads` threads, each with its own `state` from
/// `init` (buffers reused from job to job). Stops taking jobs at the first error, and returns it.
pub fn run<J: Sync, S>(
    threads: usize,
    jobs: &[J],
    init: impl Fn() -> S + Sync,
    work: impl Fn(&mut S, &J) -> anyhow::Result<()> + Sync,
) -> anyhow::Result<()> {
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let first_error: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let worker = || {
        let mut state = init();
        while !failed.load(Ordering::Relaxed) {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(job) = jobs.get(i) else { break };
            if let Err(e) = work(&mut state, job) {
                failed.store(true, Ordering::Relaxed);
                let mut slot = first_error.lock().unwrap_or_else(|p| p.into_inner());
                slot.get_or_insert(e);
                break;
            }
        }
    };
    let threads = threads.min(jobs.len());
    if threads <= 1 {
        worker();
    } else {
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(worker);
            }
        });
    }
    match first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
