//! The work of read-ahead across files: the workers' jobs, and the requests for image bytes
//! the reader makes when it queues files.

use super::WORKER_NICENESS;
use super::{Counters, Job, What, BLOCKS_PER_FILE, DONE, FIRST_FILES, QUEUED, RUNNING, TAKEN};
use squashd_core::{FileKind, Image, Inode, InodeId};
use std::sync::atomic::Ordering;

/// Blocks' worth of image bytes asked for from where a file's data begins, at most: its
/// blocks read ahead (their stored bytes are at most as long), or for a tail end its fragment
/// block.
const PREFETCH_PER_FILE: u64 = BLOCKS_PER_FILE;
/// Requests closer than this are asked for as one.
const PREFETCH_GAP: u64 = 128 << 10;

/// Asks the source for the image bytes holding the data of `files` (files just queued), a
/// request per run of nearby ones: a cold image is otherwise read block by block as the reader
/// and the workers come to each file, by threads at different places of the image, which the
/// kernel's read-ahead does not follow. (A directory's files lie between its subdirectories'
/// data in the image, so one range from the first to the last would be most of a package.)
pub(super) fn prefetch(image: &Image, files: impl Iterator<Item = InodeId>) {
    let bs = u64::from(image.block_size()).max(1);
    let mut ranges: Vec<(u64, u64)> = files
        .filter_map(|id| image.inode(id).ok())
        .filter_map(|inode| {
            let start = image.data_position(&inode)?;
            let blocks = inode.size.div_ceil(bs).clamp(1, PREFETCH_PER_FILE);
            Some((start, start.saturating_add(blocks * bs)))
        })
        .collect();
    ranges.sort_unstable();
    let mut run: Option<(u64, u64)> = None;
    for (start, end) in ranges {
        run = match run {
            Some((from, to)) if start <= to.saturating_add(PREFETCH_GAP) => {
                Some((from, to.max(end)))
            }
            Some((from, to)) => {
                image.prefetch(from, to - from);
                Some((start, end))
            }
            None => Some((start, end)),
        };
    }
    if let Some((from, to)) = run {
        image.prefetch(from, to - from);
    }
}

/// Lowers the calling worker thread's priority by [`WORKER_NICENESS`], once. (Linux keeps a
/// nice value per thread: `setpriority` of the calling process changes only this thread.) A
/// failure leaves the thread as it is.
pub(super) fn lower_priority_once() {
    thread_local! {
        static LOWERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if LOWERED.with(|lowered| lowered.replace(true)) {
        return;
    }
    if let Ok(nice) = rustix::process::getpriority_process(None) {
        let _ = rustix::process::setpriority_process(None, (nice + WORKER_NICENESS).min(19));
    }
}

/// Decompresses the first blocks of a file (or of a directory's first files) into the data
/// cache. Errors are left for the reader to meet when it gets there.
pub(super) fn load(job: Job, counters: &Counters) {
    let Some(claim) = &job.claim else {
        return load_unclaimed(&job, counters);
    };
    if claim
        .compare_exchange(QUEUED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        // The reader came to it first (or, helping, is reading it ahead itself).
        if claim.load(Ordering::Acquire) == TAKEN {
            counters.passed.fetch_add(1, Ordering::Relaxed);
        }
        return;
    }
    if let Ok(inode) = job.image.inode(job.id) {
        load_file(&job.image, &inode, job.ticket, counters);
    }
    claim.store(DONE, Ordering::Release);
}

/// A job no one claims: a subdirectory's first files.
fn load_unclaimed(job: &Job, counters: &Counters) {
    let Ok(inode) = job.image.inode(job.id) else {
        return;
    };
    if job.what == What::FirstFiles {
        let Ok(listing) = job.image.read_dir(&inode) else {
            return;
        };
        let files = listing.iter().filter(|e| e.kind == FileKind::File);
        for entry in files.take(FIRST_FILES) {
            counters.queued.fetch_add(1, Ordering::Relaxed);
            if let Ok(inode) = job.image.inode(entry.id) {
                load_file(&job.image, &inode, None, counters);
            }
        }
        return;
    }
    load_file(&job.image, &inode, job.ticket, counters);
}

/// Decompresses the first blocks of file `inode` into the data cache, unless the reader comes
/// to the file (its `ticket`) first.
pub(super) fn load_file(image: &Image, inode: &Inode, ticket: Option<u64>, counters: &Counters) {
    let Ok(reader) = image.open_file(inode) else {
        return;
    };
    let come_to = || ticket.is_some_and(|t| t < counters.reader_at.load(Ordering::Relaxed));
    for index in 0..reader.chunk_count().min(BLOCKS_PER_FILE) {
        if come_to() {
            counters.passed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // A block another thread is loading is left to it (not waited for).
        match reader.preload_chunk(index) {
            Ok(true) => {
                counters.chunks.fetch_add(1, Ordering::Relaxed);
            }
            Ok(false) => {}
            Err(_) => return,
        }
    }
    counters.files.fetch_add(1, Ordering::Relaxed);
}
