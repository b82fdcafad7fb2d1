//! Read-ahead across files. A reader that reads a directory's files one after another, in the
//! listing's order (a walk that reads every file: an environment being loaded, a data set being
//! scanned), gets the next files' blocks decompressed into the data cache by worker threads
//! while it copies out the current one. Most files of such trees are smaller than a block, so
//! read-ahead within a file (squashd-core's `read_ahead`) has nothing to do for them, and one
//! Python thread would otherwise be held to one core's decompression.
//!
//! It starts when a directory's first file is read, or two reads in a row were of neighbours in
//! one directory, and keeps a bounded window of files ahead; anything else (random access, several readers interleaving)
//! leaves it idle. When such a reader reaches a directory's last file, the first files of its
//! subdirectories are read ahead too: a walk enters one of them next (which one depends on the
//! walk), and there its first read would otherwise find nothing ahead. The state sits behind a lock that readers only try: a reader that finds it
//! taken goes on without read-ahead rather than waiting.
//!
//! A file's job is dropped (and a file's remaining blocks are left) once the reader has come to
//! that file or gone past it: a whole-file read decompresses what the cache does not hold
//! straight into its own buffer, so a block a worker decompressed into the cache after that
//! would be decompressed twice and kept for no one. Each file's job carries a ticket, issued in
//! the listing's order; the reader publishes the ticket of the file it reads (or, when it
//! leaves the directory, of the last file queued), and workers skip tickets at or below it.
//!
//! Each queued file also carries a claim, so that no file is decompressed twice and no thread
//! sits waiting while there is work queued: a worker claims a file before it starts it, and the
//! reader claims the file it comes to if no worker has started it (then it decompresses the
//! file straight into its own buffer, and the workers skip it). A reader that comes to a file a
//! worker is decompressing does not wait for the worker: it decompresses the next queued files
//! into the cache meanwhile (files it reads next), until the worker is done. Workers never
//! wait for a block another thread is loading (files whose tail ends share one fragment block
//! would otherwise queue behind one load): they go on to the next.
//!
//! The workers run a few nice levels below the reader. The reader is the one thread whose
//! work cannot be shared (the Python loop, resolving paths, copying into the bytes), and with
//! a worker per core the scheduler would give it only a share of a core beside them; the
//! workers' files wait in the cache either way, and what they leave undone the reader does.

use squashd_core::workers::Workers;
use squashd_core::{DirEntry, FileKind, Image, Inode, InodeId};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

/// Files kept queued ahead of the reader.
const WINDOW_FILES: usize = 32;
/// Blocks of each file read ahead: a larger file's reader splits its read between threads.
const BLOCKS_PER_FILE: u64 = 16;
/// Jobs waiting at most.
const QUEUE: usize = 64;
/// A queued file's claim: no thread has started it.
const QUEUED: u8 = 0;
/// A worker (or the reader, helping) is decompressing it into the data cache.
const RUNNING: u8 = 1;
/// Its first blocks are in the data cache (or left to the thread loading them).
const DONE: u8 = 2;
/// The reader came to it first and reads it itself.
const TAKEN: u8 = 3;
/// Subdirectories whose first files are read ahead when a reader has read a directory's last
/// file: where a walk goes next (any order of them).
const SUBDIRS: usize = 16;
/// Files read ahead at the start of each such subdirectory: enough to cover the reader until
/// its first read there queues the rest.
const FIRST_FILES: usize = 2;

/// Files whose data is asked of the source at once, ahead of the files queued (see
/// [`What::Prefetch`]).
const PREFETCH_FILES: usize = 64;
/// The most bytes one such request asks for.
const PREFETCH_BYTES: u64 = 16 << 20;

/// Nice levels the workers run below the thread that made them (see the module doc).
const WORKER_NICENESS: i32 = 3;

/// What to read ahead.
struct Job {
    image: Image,
    id: InodeId,
    what: What,
    /// For a file of the reader's directory: its place in the order the reader reads them.
    /// `None` for a subdirectory's first files, which a walk may enter in any order.
    ticket: Option<u64>,
    /// Who has the file (see [`QUEUED`]); `None` for a subdirectory's first files.
    claim: Option<Arc<AtomicU8>>,
    /// For [`What::Prefetch`]: the files whose data to ask for.
    files: Vec<InodeId>,
}

/// A file of the reader's directory queued and not yet come to.
struct Queued {
    /// Its index in the listing.
    index: usize,
    /// Its ticket.
    ticket: u64,
    /// Its inode.
    id: InodeId,
    /// Who has it.
    claim: Arc<AtomicU8>,
}

/// What a job's inode is read ahead for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum What {
    /// A file: its first blocks.
    File,
    /// A directory: its first files' first blocks.
    FirstFiles,
    /// The image bytes holding the data of `files` (next files of the reader's directory),
    /// asked of the source in one request: a cold image is otherwise read block by block as
    /// the reader and the workers come to each, by threads at different places of the image,
    /// which the kernel's read-ahead does not follow.
    Prefetch,
}

/// What the read-ahead across files did, for `Image.stats()`.
#[derive(Debug, Default)]
struct Counters {
    /// Files queued to be read ahead.
    queued: AtomicU64,
    /// Files whose first blocks the workers read into the data cache.
    files: AtomicU64,
    /// Chunks the workers read into the data cache (or found there).
    chunks: AtomicU64,
    /// Subdirectories whose first files were queued.
    dirs: AtomicU64,
    /// Files dropped (or left part way) because the reader had come to them first.
    passed: AtomicU64,
    /// Files the reader decompressed into the data cache while a worker finished the file it
    /// had come to.
    helped: AtomicU64,
    /// Tickets below this are of files the reader has come to or gone past.
    reader_at: AtomicU64,
}

/// A snapshot of the read-ahead across files' counters.
#[derive(Debug, Clone, Copy, Default)]
pub struct SiblingStats {
    /// Files queued to be read ahead.
    pub queued: u64,
    /// Files whose first blocks the workers read into the data cache.
    pub files: u64,
    /// Chunks the workers read into the data cache (or found there).
    pub chunks: u64,
    /// Subdirectories whose first files were queued.
    pub dirs: u64,
    /// Files dropped (or left part way) because the reader had come to them first.
    pub passed: u64,
    /// Files the reader decompressed into the data cache while a worker finished the file it
    /// had come to (rather than waiting for the worker).
    pub helped: u64,
}

/// Where the sequential reader stands.
#[derive(Default)]
struct State {
    /// The directory it reads, and its listing.
    dir: Option<(InodeId, Arc<Vec<DirEntry>>)>,
    /// The index in the listing of the file it read last.
    last: usize,
    /// Entries below this index are queued already.
    queued_until: usize,
    /// The data of files below this index was asked of the source.
    prefetched_until: usize,
    /// Reads in a row of neighbours.
    streak: u32,
    /// Whether its subdirectories' first files were queued.
    descended: bool,
    /// The files queued and not yet come to, in order.
    tickets: VecDeque<Queued>,
    /// The next ticket to issue (tickets grow across directories).
    next_ticket: u64,
}

/// Read-ahead across the files of a directory, for one image.
pub struct SiblingReadAhead {
    state: Mutex<State>,
    counters: Arc<Counters>,
    workers: Workers<Job>,
}

impl SiblingReadAhead {
    /// Read-ahead by `threads` threads (started on first use).
    pub fn new(threads: usize) -> Self {
        let counters = Arc::new(Counters::default());
        let counted = counters.clone();
        SiblingReadAhead {
            state: Mutex::new(State::default()),
            counters,
            workers: Workers::new(
                "read-ahead across files",
                |i| format!("squashd-files-{i}"),
                threads,
                QUEUE,
                move |job| {
                    lower_priority_once();
                    load(job, &counted)
                },
            ),
        }
    }

    /// Its counters now.
    pub fn stats(&self) -> SiblingStats {
        SiblingStats {
            queued: self.counters.queued.load(Ordering::Relaxed),
            files: self.counters.files.load(Ordering::Relaxed),
            chunks: self.counters.chunks.load(Ordering::Relaxed),
            dirs: self.counters.dirs.load(Ordering::Relaxed),
            passed: self.counters.passed.load(Ordering::Relaxed),
            helped: self.counters.helped.load(Ordering::Relaxed),
        }
    }

    /// Tells the workers that the reader has come to (or gone past) every file whose ticket is
    /// below `tickets`.
    fn reader_passed(&self, tickets: u64) {
        self.counters
            .reader_at
            .fetch_max(tickets, Ordering::Relaxed);
    }

    /// Notes that file `name` of directory `dir` (whose `listing` the caller may have read
    /// already) is being read and, if it follows the file read before, queues the files after
    /// it.
    pub fn on_read(
        &self,
        image: &Image,
        dir: &Inode,
        listing: Option<crate::parents::Listing>,
        name: &[u8],
    ) {
        let Ok(mut state) = self.state.try_lock() else {
            return;
        };
        let listing = match &state.dir {
            Some((id, listing)) if *id == dir.id => listing.clone(),
            _ => {
                let listing = match listing {
                    Some(listing) => listing,
                    None => match image.read_dir(dir) {
                        Ok(listing) => Arc::new(listing),
                        Err(_) => return,
                    },
                };
                // The reader left the directory: what is queued there is not for it now.
                self.reader_passed(state.next_ticket);
                *state = State {
                    dir: Some((dir.id, listing.clone())),
                    next_ticket: state.next_ticket,
                    ..State::default()
                };
                listing
            }
        };
        // Listings are sorted; one that is not (a hostile image) finds nothing: no read-ahead.
        let Ok(index) = listing.binary_search_by(|e| e.name.as_slice().cmp(name)) else {
            return;
        };
        // Files queued up to this one: the reader reads this one itself and skipped the others.
        let mut worker_has_it = None;
        while let Some(queued) = state.tickets.front() {
            if queued.index > index {
                break;
            }
            self.reader_passed(queued.ticket + 1);
            if queued.index == index {
                // Unless a worker has started it, it is the reader's: the workers skip it.
                let claimed = queued.claim.compare_exchange(
                    QUEUED,
                    TAKEN,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
                if claimed == Err(RUNNING) {
                    worker_has_it = Some(queued.claim.clone());
                }
            }
            state.tickets.pop_front();
        }
        let first_file = listing[..index].iter().all(|e| e.kind != FileKind::File);
        let follows = index > state.last && index <= state.last + 4;
        state.streak = if follows || first_file {
            state.streak + 1
        } else {
            0
        };
        state.last = index;
        if state.streak == 0 {
            state.queued_until = 0;
            return;
        }
        let mut next = state.queued_until.max(index + 1);
        if next + WINDOW_FILES > state.prefetched_until && next < listing.len() {
            let from = state.prefetched_until.max(next);
            let until = (from + PREFETCH_FILES).min(listing.len());
            let files: Vec<_> = listing[from..until]
                .iter()
                .filter(|e| e.kind == FileKind::File)
                .map(|e| e.id)
                .collect();
            let job = Job {
                image: image.clone(),
                id: dir.id,
                what: What::Prefetch,
                ticket: None,
                claim: None,
                files,
            };
            if self.workers.offer(job) {
                state.prefetched_until = until;
            }
        }
        let mut files = listing[index + 1..next.min(listing.len())]
            .iter()
            .filter(|e| e.kind == FileKind::File)
            .count();
        while next < listing.len() && files < WINDOW_FILES {
            let entry = &listing[next];
            if entry.kind == FileKind::File {
                let ticket = state.next_ticket;
                let claim = Arc::new(AtomicU8::new(QUEUED));
                let job = Job {
                    image: image.clone(),
                    id: entry.id,
                    what: What::File,
                    ticket: Some(ticket),
                    claim: Some(claim.clone()),
                    files: Vec::new(),
                };
                if !self.workers.offer(job) {
                    break;
                }
                state.next_ticket += 1;
                state.tickets.push_back(Queued {
                    index: next,
                    ticket,
                    id: entry.id,
                    claim,
                });
                self.counters.queued.fetch_add(1, Ordering::Relaxed);
                files += 1;
            }
            next += 1;
        }
        state.queued_until = next;
        // The reader has read the directory's last file: a walk goes on into a subdirectory
        // (which one depends on the walk), and a directory's first file is read before its
        // read queues the others. Have the first files of each read ahead.
        let last_file = listing[index + 1..]
            .iter()
            .all(|e| e.kind != FileKind::File);
        if last_file && !state.descended {
            state.descended = true;
            let subdirs = listing.iter().filter(|e| e.kind == FileKind::Directory);
            for entry in subdirs.take(SUBDIRS) {
                let job = Job {
                    image: image.clone(),
                    id: entry.id,
                    what: What::FirstFiles,
                    ticket: None,
                    claim: None,
                    files: Vec::new(),
                };
                if !self.workers.offer(job) {
                    break;
                }
                self.counters.dirs.fetch_add(1, Ordering::Relaxed);
            }
        }
        if let Some(claim) = worker_has_it {
            // The files it reads next, in order, while the worker finishes this one.
            let next: Vec<_> = state
                .tickets
                .iter()
                .map(|q| (q.id, q.ticket, q.claim.clone()))
                .collect();
            drop(state);
            self.help_while_running(image, &claim, next);
        }
    }

    /// Decompresses the next queued file no thread has started into the data cache, on the
    /// calling thread: for a reader that would otherwise wait for a block another thread is
    /// loading (the file it reads next is a worker's, or shares its fragment block with one).
    /// Returns whether there was one.
    pub fn help_one(&self, image: &Image) -> bool {
        let next = {
            let Ok(state) = self.state.try_lock() else {
                return false;
            };
            state
                .tickets
                .iter()
                .find(|q| q.claim.load(Ordering::Acquire) == QUEUED)
                .map(|q| (q.id, q.ticket, q.claim.clone()))
        };
        let Some((id, ticket, claim)) = next else {
            return false;
        };
        if claim
            .compare_exchange(QUEUED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // A worker took it meanwhile: that was work done too.
            return true;
        }
        if let Ok(inode) = image.inode(id) {
            load_file(image, &inode, Some(ticket), &self.counters);
        }
        claim.store(DONE, Ordering::Release);
        self.counters.helped.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Decompresses the queued files `next` (inode, ticket, claim), in order, into the data
    /// cache while `claim` (the file the reader came to) is a worker's: the reader would
    /// otherwise wait for that worker's block, and these are files it reads next.
    fn help_while_running(
        &self,
        image: &Image,
        claim: &AtomicU8,
        next: Vec<(InodeId, u64, Arc<AtomicU8>)>,
    ) {
        for (id, ticket, theirs) in next {
            if claim.load(Ordering::Acquire) != RUNNING {
                return;
            }
            if theirs
                .compare_exchange(QUEUED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                continue;
            }
            if let Ok(inode) = image.inode(id) {
                load_file(image, &inode, Some(ticket), &self.counters);
            }
            theirs.store(DONE, Ordering::Release);
            self.counters.helped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Asks the source for the image bytes that hold the data of `job.files`: from where the first
/// of them begins to a block past where the last begins, at most [`PREFETCH_BYTES`].
fn prefetch(job: &Job) {
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
    let end = last.saturating_add(u64::from(job.image.block_size()));
    job.image.prefetch(first, (end - first).min(PREFETCH_BYTES));
}

/// Lowers the calling worker thread's priority by [`WORKER_NICENESS`], once. (Linux keeps a
/// nice value per thread: `setpriority` of the calling process changes only this thread.) A
/// failure leaves the thread as it is.
fn lower_priority_once() {
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
fn load(job: Job, counters: &Counters) {
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
        return prefetch(job);
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
fn load_file(image: &Image, inode: &Inode, ticket: Option<u64>, counters: &Counters) {
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
