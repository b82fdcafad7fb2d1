//! Directories: made by a thread of their own while the files are written, and finished (owner,
//! mode, times) in parallel once everything inside them exists.
//!
//! A /usr image has about 19,000 directories. Made before the files, they took 0.4-0.6 s in
//! which one core idled. Now one thread makes them in the plan's order (parents first), except
//! that a directory a writer waits for is made next, with whatever it needs above it. The
//! writers start at distant places in the file list (rayon gives each thread its own part), so
//! in the plan's order alone the second would wait for half of the directories.
//! (Making directories from the writers themselves, as their files need them, measured 30%
//! slower: ext4 then placed inodes so that allocating them scanned far more.)

use super::plan::Job;
use super::write::Writer;
use anyhow::anyhow;
use rayon::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

/// Which of the plan's directories exist, and which writers wait for.
pub struct DirsMade {
    /// Per directory of the plan: it exists. Set before the lock is taken to tell waiters.
    made: Vec<AtomicBool>,
    state: Mutex<MadeState>,
    /// Tells waiting writers that directories were made, or never will be.
    changed: Condvar,
}

#[derive(Default)]
struct MadeState {
    /// Directories writers wait for, to be made before any other.
    wanted: Vec<usize>,
    /// Writers waiting.
    waiters: usize,
    /// No more directories will be made: one could not be, or the writers stopped.
    stopped: bool,
}

impl DirsMade {
    /// For `count` directories, of which the first (the destination) exists.
    pub fn new(count: usize) -> Self {
        DirsMade {
            made: (0..count).map(|i| AtomicBool::new(i == 0)).collect(),
            state: Mutex::new(MadeState::default()),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, MadeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn is_made(&self, index: usize) -> bool {
        self.made
            .get(index)
            .is_some_and(|made| made.load(Ordering::Acquire))
    }

    /// Stops the making of directories; waiting writers get an error.
    pub fn stop(&self) {
        self.lock().stopped = true;
        self.changed.notify_all();
    }

    /// Whether making directories was stopped.
    pub fn stopped(&self) -> bool {
        self.lock().stopped
    }

    /// Waits until directory `index` of the plan exists; an error if it never will.
    pub fn wait_for(&self, index: usize) -> anyhow::Result<()> {
        if self.is_made(index) {
            return Ok(());
        }
        let mut state = self.lock();
        state.wanted.push(index);
        state.waiters += 1;
        while !self.is_made(index) && !state.stopped {
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.waiters -= 1;
        if self.is_made(index) {
            Ok(())
        } else {
            // The directory thread's own error is the one reported.
            Err(anyhow!("a directory could not be made"))
        }
    }

    /// The next directory to make: one a writer waits for, else the first not made from
    /// `*next` on; `None` when all are made or making them is to stop.
    fn next_to_make(&self, next: &mut usize) -> Option<usize> {
        let mut state = self.lock();
        if state.stopped {
            return None;
        }
        while let Some(wanted) = state.wanted.pop() {
            if !self.is_made(wanted) {
                return Some(wanted);
            }
        }
        while *next < self.made.len() && self.is_made(*next) {
            *next += 1;
        }
        (*next < self.made.len()).then_some(*next)
    }

    /// Records that directory `index` exists, telling waiting writers.
    fn set_made(&self, index: usize) {
        if let Some(made) = self.made.get(index) {
            made.store(true, Ordering::Release);
        }
        // Taking the lock orders this with a writer's check before it waits.
        if self.lock().waiters > 0 {
            self.changed.notify_all();
        }
    }
}

/// Makes every directory of `dirs` but the first (the destination, which exists), parents
/// before children, those that writers wait for first.
pub fn make_all(writer: &Writer, dirs: &[Job], made: &DirsMade) -> anyhow::Result<()> {
    // Should this thread panic, the writers waiting for a directory are let go.
    let _release = StopIfPanicking(made);
    let mut next = 1;
    let mut chain = Vec::new();
    while let Some(target) = made.next_to_make(&mut next) {
        // The target and those above it not made yet, made from the top down.
        chain.clear();
        let mut at = target;
        while !made.is_made(at) {
            match dirs.get(at) {
                // Plans list parents first; anything else would be a bug, not a bad image.
                Some(dir) if dir.parent < at => {
                    chain.push((at, dir));
                    at = dir.parent;
                }
                _ => {
                    return Err(anyhow!(
                        "internal error: directory {at} listed before its parent"
                    ))
                }
            }
        }
        for &(index, dir) in chain.iter().rev() {
            if let Err(e) = writer.make_dir(dir, false) {
                made.stop();
                return Err(e);
            }
            made.set_made(index);
        }
    }
    Ok(())
}

/// Stops the making of directories when dropped by a panicking thread.
struct StopIfPanicking<'a>(&'a DirsMade);

impl Drop for StopIfPanicking<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.stop();
        }
    }
}

/// Sets every directory's owner, xattrs, mode and times, on every core, deepest first: once a
/// directory's mode is set, what is below it might not be reachable any more (mode 0 for a
/// user other than root). Setting them adds or removes no entry, so no other directory's times
/// change, and the directories of one depth are done in any order.
pub fn finish_all(writer: &Writer, dirs: &[Job]) -> anyhow::Result<()> {
    let mut by_depth: Vec<(usize, &Job)> = dirs
        .iter()
        .map(|job| (job.path.components().count(), job))
        .collect();
    by_depth.sort_by_key(|&(depth, _)| std::cmp::Reverse(depth));
    for level in by_depth.chunk_by(|a, b| a.0 == b.0) {
        level
            .par_iter()
            .try_for_each(|(_, dir)| writer.finish_dir(dir))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::DirsMade;

    /// Waits until `made` has `count` writers waiting.
    fn until_waiting(made: &DirsMade, count: usize) {
        while made.lock().waiters < count {
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_directory_waited_for_is_made_next_and_a_stop_frees_the_waiters() {
        let made = DirsMade::new(10);
        let mut next = 1;
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| made.wait_for(7));
            until_waiting(&made, 1);
            assert_eq!(made.next_to_make(&mut next), Some(7));
            made.set_made(7);
            assert!(waiter.join().unwrap().is_ok());
            // Then the plan's order again, skipping what is made.
            assert_eq!(made.next_to_make(&mut next), Some(1));
            for i in 1..7 {
                made.set_made(i);
            }
            assert_eq!(made.next_to_make(&mut next), Some(8));
            assert!(made.wait_for(0).is_ok() && made.wait_for(7).is_ok());

            let waiter = scope.spawn(|| made.wait_for(9));
            until_waiting(&made, 1);
            made.stop();
            assert!(waiter.join().unwrap().is_err());
            assert_eq!(made.next_to_make(&mut next), None);
            assert!(made.stopped());
        });
    }
}
