//! What the workers of read-ahead across files do with a job.

use super::WORKER_NICENESS;
use super::{Counters, Job, What, BLOCKS_PER_FILE, DONE, FIRST_FILES, QUEUED, RUNNING, TAKEN};
use squashd_core::{FileKind, Image, Inode};
use std::sync::atomic::Ordering;
use std::sync::PoisonError;

/// Image bytes asked of the source at once from where the first of a batch of queued files'
/// data begins: the batch's own and those of the files after it, which (with data written in
/// the order of a walk) the next batches read.
const PREFETCH_AHEAD: u64 = 4 << 20;
/// The most bytes one such request asks for.
const PREFETCH_BYTES: u64 = 16 << 20;

/// Asks the source for the image bytes that hold the data of `job.files`: from where the first
/// of them begins to [`PREFETCH_AHEAD`] on or a block past where the last begins (at most
/// [`PREFETCH_BYTES`]), unless the last request covered them.
fn prefetch(job: &Job, counters: &Counters) {
    let positions = job
        .files
        .iter()
        .filter_map(|&id| job.image.inode(id).ok())
        .filter_map(|inode| job.image.data_position(&inode));
    let (mut first, mut last) = (u64::MAX, 0);
    for pos in positions {
        first = first.min(pos);
        last = last.max(pos);
    }
    if first > last {
        return;
    }
    let end = last
        .saturating_add(u64::from(job.image.block_size()))
        .max(first.saturating_add(PREFETCH_AHEAD))
        .min(first.saturating_add(PREFETCH_BYTES));
    {
        let mut asked = counters
            .prefetched
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (from, to) = *asked;
        if first >= from && last < to {
            return;
        }
        *asked = (first, end);
    }
    job.image.prefetch(first, end - first);
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
    if job.what == What::Prefetch {
        return prefetch(job, counters);
    }
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
