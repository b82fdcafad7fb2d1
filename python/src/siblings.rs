//! Read-ahead across files. A reader that reads a directory's files one after another, in the
//! listing's order (a walk that reads every file: an environment being loaded, a data set being
//! scanned), gets the next files' blocks decompressed into the data cache by worker threads
//! while it copies out the current one. Most files of such trees are smaller than a block, so
//! read-ahead within a file (squashd-core's `read_ahead`) has nothing to do for them, and one
//! Python thread would otherwise be held to one core's decompression.
//!
//! It starts when a directory's first file is read, or two reads in a row were of neighbours in
//! one directory, and keeps a bounded window of files ahead; anything else (random access, several readers interleaving)
//! leaves it idle. The state sits behind a lock that readers only try: a reader that finds it
//! taken goes on without read-ahead rather than waiting.

use squashd_core::workers::Workers;
use squashd_core::{DirEntry, FileKind, Image, Inode, InodeId};
use std::sync::{Arc, Mutex};

/// Files kept queued ahead of the reader.
const WINDOW_FILES: usize = 32;
/// Blocks of each file read ahead: a larger file's reader splits its read between threads.
const BLOCKS_PER_FILE: u64 = 16;
/// Jobs waiting at most.
const QUEUE: usize = 64;

/// A file to read ahead.
struct Job {
    image: Image,
    id: InodeId,
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
    /// Reads in a row of neighbours.
    streak: u32,
}

/// Read-ahead across the files of a directory, for one image.
pub struct SiblingReadAhead {
    state: Mutex<State>,
    workers: Workers<Job>,
}

impl SiblingReadAhead {
    /// Read-ahead by `threads` threads (started on first use).
    pub fn new(threads: usize) -> Self {
        SiblingReadAhead {
            state: Mutex::new(State::default()),
            workers: Workers::new(
                "read-ahead across files",
                |i| format!("squashd-files-{i}"),
                threads,
                QUEUE,
                load,
            ),
        }
    }

    /// Notes that file `name` of directory `dir` is being read and, if it follows the file read
    /// before, queues the files after it.
    pub fn on_read(&self, image: &Image, dir: &Inode, name: &[u8]) {
        let Ok(mut state) = self.state.try_lock() else {
            return;
        };
        let listing = match &state.dir {
            Some((id, listing)) if *id == dir.id => listing.clone(),
            _ => {
                let Ok(listing) = image.read_dir(dir) else {
                    return;
                };
                let listing = Arc::new(listing);
                *state = State {
                    dir: Some((dir.id, listing.clone())),
                    ..State::default()
                };
                listing
            }
        };
        // Listings are sorted; one that is not (a hostile image) finds nothing: no read-ahead.
        let Ok(index) = listing.binary_search_by(|e| e.name.as_slice().cmp(name)) else {
            return;
        };
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
        let mut files = listing[index + 1..next.min(listing.len())]
            .iter()
            .filter(|e| e.kind == FileKind::File)
            .count();
        while next < listing.len() && files < WINDOW_FILES {
            let entry = &listing[next];
            if entry.kind == FileKind::File {
                let job = Job {
                    image: image.clone(),
                    id: entry.id,
                };
                if !self.workers.offer(job) {
                    break;
                }
                files += 1;
            }
            next += 1;
        }
        state.queued_until = next;
    }
}

/// Decompresses the first blocks of a file into the data cache. Errors are left for the reader
/// to meet when it gets there.
fn load(job: Job) {
    let Ok(inode) = job.image.inode(job.id) else {
        return;
    };
    let Ok(reader) = job.image.open_file(&inode) else {
        return;
    };
    for index in 0..reader.chunk_count().min(BLOCKS_PER_FILE) {
        if reader.chunk(index).is_err() {
            return;
        }
    }
}
