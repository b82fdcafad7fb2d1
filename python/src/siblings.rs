//! Read-ahead across files. A reader that reads a directory's files one after another, in the
//! listing's order (a walk that reads every file: an environment being loaded, a data set being
//! scanned), gets the next files' blocks decompressed into the data cache by worker threads
//! while it copies out the current one. Most files of such trees are smaller than a block, so
//! read-ahead within a file (squashd-core's `read_ahead`) has nothing to do for them, and one
//! Python thread would otherwise be held to one core's decompression.
//!
//! It starts when a directory's first file is read, or two reads in a row were of neighbours in
//! one directory, and keeps a bounded window of files ahead; anything else (random access,
//! several readers interleaving) leaves it idle. The window goes on past the directory's last
//! file into the directories the walk enters next (`walk_order`: which one comes next depends
//! on the walk, and is learned from its last step into a new directory): with about ten files
//! a directory, as in Python environments, a window that ended at each directory's last file
//! would leave the workers idle at every directory change. Until a walk's order is known, a
//! reader that reaches a directory's last file has the first files of its subdirectories read
//! ahead instead (it enters one of them next, and there its first read would otherwise find
//! nothing ahead). The state sits behind a lock that readers only try: a reader that finds it
//! taken goes on without read-ahead rather than waiting.
//!
//! A file's job is dropped (and a file's remaining blocks are left) once the reader has come to
//! that file or gone past it: a whole-file read decompresses what the cache does not hold
//! straight into its own buffer, so a block a worker decompressed into the cache after that
//! would be decompressed twice and kept for no one. Each file's job carries a ticket, issued in
//! the order the walk reads the files (across directories); the reader publishes the ticket of
//! the file it reads (or, when it enters a directory, of the first file queued there, or when
//! the walk went elsewhere, of the last file queued), and workers skip tickets below it.
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
//! There is one worker fewer than the threads asked for (one per core by default): the reader
//! is the other, since it decompresses what the workers have not done when it comes to a file,
//! and on two cores it does about half (decompression is more work than the reader's own). A
//! worker per core made three threads on two cores: the scheduler gave the reader only a share
//! of its core, and the workers' files waited in the cache either way. Workers that would still
//! outnumber the other cores (`read_ahead=` above the cores) run a few nice levels below the
//! reader, the one thread whose work cannot be shared (the Python loop, resolving paths,
//! copying into the bytes).

mod jobs;

use crate::parents::{Listing, ParentDirs};
use crate::walk_order::{self, Order, WalkDir};
use jobs::{load, load_file, lower_priority_once, prefetch};
use squashd_core::workers::Workers;
use squashd_core::{FileKind, Image, Inode, InodeId};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

/// Files kept queued ahead of the reader. Most files of a Python environment are a tail end in
/// a fragment block (about 8 to a block), so 32 files were 4 blocks ahead: about a millisecond
/// of the reader's work, which a worker loses whenever another thread takes its core for a
/// tick; the reader then waited for it, or did its files itself.
const WINDOW_FILES: usize = 128;
/// Bytes of data (each file's size, up to [`BLOCKS_PER_FILE`] blocks) kept queued ahead of the
/// reader at most: blocks decompressed ahead wait in the data cache, and a walk's fragment
/// blocks, which it comes back to long after their first file, need that cache too. Since the
/// cache keeps room for blocks read ahead (`READ_AHEAD_ROOM` in `image.rs`), windows of 4 to
/// 32 MiB all decompressed 538 MB in a walk of a 530 MB image (before it, 16 MiB decompressed
/// 30 MB more). 4 MiB is two large files' first blocks: the workers could not get further
/// ahead of a reader among large files. 8 MiB made that walk 4-5% faster, with the reader's
/// CPU lower in 10 of 10 interleaved runs; 16 and 32 MiB gave no more
/// (bench/results/2026-12-07-python-s12.md).
const WINDOW_BYTES: u64 = 8 << 20;
/// Blocks of each file read ahead: a larger file's reader splits its read between threads.
const BLOCKS_PER_FILE: u64 = 16;
/// Jobs waiting at most: the window's, and those of files the reader came to that workers have
/// yet to take off the queue (and skip).
const QUEUE: usize = 4 * WINDOW_FILES;
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

/// The window is topped up when this many of its files have been come to: files are queued
/// (and their image bytes asked for) in batches rather than one a read.
const REFILL: usize = 16;
/// Directories the window moves on into at most in one read (directories without files are
/// stepped through too).
const DIRS_PER_READ: usize = 8;

/// Nice levels the workers run below the thread that made them (see the module doc).
const WORKER_NICENESS: i32 = 3;

/// What to read ahead.
struct Job {
    image: Image,
    id: InodeId,
    what: What,
    /// For a file queued in the walk's order: its place in the order the reader reads them.
    /// `None` for a subdirectory's first files, which a walk may enter in any order.
    ticket: Option<u64>,
    /// Who has the file (see [`QUEUED`]); `None` for a subdirectory's first files.
    claim: Option<Arc<AtomicU8>>,
}

/// A file queued and not yet come to: of the reader's directory, or of one the walk enters
/// after it.
struct Queued {
    /// Its directory.
    dir: InodeId,
    /// Its index in the directory's listing.
    index: usize,
    /// Its ticket.
    ticket: u64,
    /// Its inode.
    id: InodeId,
    /// Its bytes read ahead (its size, up to [`BLOCKS_PER_FILE`] blocks).
    bytes: u64,
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
    /// Directories a walk was predicted to enter next, whose files were queued.
    next_dirs: AtomicU64,
    /// Predictions of the walk's next directory that missed: it went elsewhere.
    missed: AtomicU64,
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
    /// Directories a walk was predicted to enter next, whose files were queued.
    pub next_dirs: u64,
    /// Predictions of the walk's next directory that missed: it went elsewhere.
    pub missed: u64,
    /// Files dropped (or left part way) because the reader had come to them first.
    pub passed: u64,
    /// Files the reader decompressed into the data cache while a worker finished the file it
    /// had come to (rather than waiting for the worker).
    pub helped: u64,
}

/// Where the sequential reader stands.
#[derive(Default)]
struct State {
    /// The directory it reads.
    dir: Option<WalkDir>,
    /// The index in the listing of the file it read last.
    last: usize,
    /// Reads in a row of neighbours.
    streak: u32,
    /// Whether its subdirectories' first files were queued.
    descended: bool,
    /// The files queued and not yet come to, in order.
    tickets: VecDeque<Queued>,
    /// The next ticket to issue (tickets grow across directories).
    next_ticket: u64,
    /// Where queueing goes on: a directory (the reader's, or one the walk enters after it)
    /// and the index in its listing of the next entry to queue.
    cursor: Option<(WalkDir, usize)>,
    /// The order the walk takes subdirectories in, once learned.
    order: Option<Order>,
}

/// Read-ahead across the files of a directory, for one image.
pub struct SiblingReadAhead {
    state: Mutex<State>,
    counters: Arc<Counters>,
    workers: Workers<Job>,
}

impl SiblingReadAhead {
    /// Read-ahead by `threads` threads (started on first use), a few nice levels below the
    /// reader's if `lower_priority`.
    pub fn new(threads: usize, lower_priority: bool) -> Self {
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
                    if lower_priority {
                        lower_priority_once();
                    }
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
            next_dirs: self.counters.next_dirs.load(Ordering::Relaxed),
            missed: self.counters.missed.load(Ordering::Relaxed),
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

    /// Notes that file `name` of directory `dir` (at `dir_path`, as the reader names it; whose
    /// `listing` the caller may have read already) is being read and, if it follows the file
    /// read before, queues the files after it, in this directory and the next ones of the walk.
    pub fn on_read(
        &self,
        image: &Image,
        parents: &ParentDirs,
        dir: &Inode,
        dir_path: &[u8],
        listing: Option<Listing>,
        name: &[u8],
    ) {
        let Ok(mut state) = self.state.try_lock() else {
            return;
        };
        if state.dir.as_ref().map(|d| d.id) != Some(dir.id) {
            let listing = match listing {
                Some(listing) => listing,
                None => match image.read_dir(dir) {
                    Ok(listing) => Arc::new(listing),
                    Err(_) => return,
                },
            };
            let here = WalkDir {
                path: dir_path.to_vec(),
                id: dir.id,
                listing,
            };
            self.enter(image, parents, &mut state, here);
        }
        let Some(here) = state.dir.clone() else {
            return;
        };
        // Listings are sorted; one that is not (a hostile image) finds nothing: no read-ahead.
        let Ok(index) = here
            .listing
            .binary_search_by(|e| e.name.as_slice().cmp(name))
        else {
            return;
        };
        // Files queued up to this one: the reader reads this one itself and skipped the others.
        let mut worker_has_it = None;
        while let Some(queued) = state.tickets.front() {
            if queued.dir != here.id || queued.index > index {
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
        let first_file = here.listing[..index]
            .iter()
            .all(|e| e.kind != FileKind::File);
        // The next file after the one read before, or one of the few after it (a walk that
        // reads some files of a directory). Subdirectories between them do not count: a
        // package's files and subpackages alternate in its listing.
        let follows = index > state.last
            && here.listing[state.last + 1..index]
                .iter()
                .filter(|e| e.kind == FileKind::File)
                .count()
                < 4;
        state.streak = if follows || first_file {
            state.streak + 1
        } else {
            0
        };
        state.last = index;
        if state.streak == 0 {
            // Not a walk (or not now): what is queued is not for this reader.
            self.reader_passed(state.next_ticket);
            state.tickets.clear();
            state.cursor = None;
            return;
        }
        // Queueing goes on after this file, unless it has gone past it already.
        let behind = match &state.cursor {
            Some((at, next)) => at.id == here.id && *next <= index,
            None => true,
        };
        if behind {
            state.cursor = Some((here.clone(), index + 1));
        }
        if state.tickets.is_empty() || state.tickets.len() + REFILL <= WINDOW_FILES {
            self.top_up(image, parents, &mut state);
        }
        // The reader has read the directory's last file and the walk's order is not known: a
        // walk goes on into a subdirectory, and a directory's first file is read before its
        // read queues the others. Have the first files of each read ahead.
        let last_file = here.listing[index + 1..]
            .iter()
            .all(|e| e.kind != FileKind::File);
        if last_file && !state.descended && state.order.is_none() {
            state.descended = true;
            let subdirs = here
                .listing
                .iter()
                .filter(|e| e.kind == FileKind::Directory);
            for entry in subdirs.take(SUBDIRS) {
                let job = Job {
                    image: image.clone(),
                    id: entry.id,
                    what: What::FirstFiles,
                    ticket: None,
                    claim: None,
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

    /// The reader has come to directory `here`. If the window went on into it (the walk went
    /// where it was predicted to), the files queued before it were skipped; otherwise
    /// everything queued is dropped, and the walk's order is learned from this step.
    fn enter(&self, image: &Image, parents: &ParentDirs, state: &mut State, here: WalkDir) {
        let hit = state.tickets.iter().position(|q| q.dir == here.id);
        // Queueing had come to this directory but queued none of its files yet (the workers'
        // queue was full): the walk went where predicted.
        let cursor_here = matches!(&state.cursor, Some((at, _)) if at.id == here.id);
        match hit {
            Some(at) => {
                state.tickets.drain(..at);
                if let Some(first) = state.tickets.front() {
                    self.reader_passed(first.ticket);
                }
            }
            None if cursor_here => {
                self.reader_passed(state.next_ticket);
                state.tickets.clear();
            }
            None => {
                if state.order.is_some() && state.cursor.is_some() {
                    self.counters.missed.fetch_add(1, Ordering::Relaxed);
                }
                self.reader_passed(state.next_ticket);
                state.tickets.clear();
                state.cursor = None;
                state.order = state
                    .dir
                    .as_ref()
                    .and_then(|from| walk_order::learn(image, parents, from, here.id));
            }
        }
        *state = State {
            dir: Some(here),
            tickets: std::mem::take(&mut state.tickets),
            next_ticket: state.next_ticket,
            cursor: state.cursor.take(),
            order: state.order,
            ..State::default()
        };
    }

    /// Queues files from the cursor on, into the directories the walk enters next once the
    /// cursor's is done, until the window is full; the image bytes of the files queued are
    /// asked of the source first.
    fn top_up(&self, image: &Image, parents: &ParentDirs, state: &mut State) {
        let Some((mut at, mut next)) = state.cursor.take() else {
            return;
        };
        let room = WINDOW_FILES.saturating_sub(state.tickets.len());
        let mut window_bytes: u64 = state.tickets.iter().map(|q| q.bytes).sum();
        let most_per_file = BLOCKS_PER_FILE * u64::from(image.block_size().max(1));
        let mut picked = Vec::with_capacity(room);
        // The directories gone through, for picked files to name theirs (by index here).
        let mut passed_through = Vec::new();
        let mut moves = 0;
        while picked.len() < room {
            if next >= at.listing.len() {
                let Some(order) = state.order else { break };
                if moves == DIRS_PER_READ {
                    break;
                }
                let Some(after) = walk_order::next_dir(image, parents, &at, order) else {
                    break;
                };
                moves += 1;
                self.counters.next_dirs.fetch_add(1, Ordering::Relaxed);
                passed_through.push(std::mem::replace(&mut at, after));
                next = 0;
                continue;
            }
            let entry = &at.listing[next];
            if entry.kind == FileKind::File {
                let bytes = image
                    .inode(entry.id)
                    .map_or(0, |inode| inode.size.min(most_per_file));
                if window_bytes + bytes > WINDOW_BYTES && !(picked.is_empty() && window_bytes == 0)
                {
                    break;
                }
                window_bytes += bytes;
                picked.push((passed_through.len(), next, entry.id, bytes));
            }
            next += 1;
        }
        passed_through.push(at);
        state.cursor = passed_through.last().map(|at| (at.clone(), next));
        if picked.is_empty() {
            return;
        }
        // Asked for here, not by a worker: workers that lag behind (a busy machine) would ask
        // for them after the reader has read them itself, waiting for each block's read.
        prefetch(image, picked.iter().map(|p| p.2));
        for (dir, index, id, bytes) in picked {
            let dir_id = passed_through[dir].id;
            let ticket = state.next_ticket;
            let claim = Arc::new(AtomicU8::new(QUEUED));
            let job = Job {
                image: image.clone(),
                id,
                what: What::File,
                ticket: Some(ticket),
                claim: Some(claim.clone()),
            };
            if !self.workers.offer(job) {
                // The queue is full (workers that lag behind have yet to take off the jobs of
                // files the reader came to): queueing goes on from this file at the next read,
                // so that the window has no gap where the walk would look missed.
                state.cursor = Some((passed_through[dir].clone(), index));
                break;
            }
            state.next_ticket += 1;
            state.tickets.push_back(Queued {
                dir: dir_id,
                index,
                ticket,
                id,
                bytes,
                claim,
            });
            self.counters.queued.fetch_add(1, Ordering::Relaxed);
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
