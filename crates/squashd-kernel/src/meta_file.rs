//! The metadata image as a file of the blob file system, and what keeps it in the kernel's
//! page cache.
//!
//! EROFS reads its metadata through the page cache of the `.meta` file, one 4 KiB folio at a
//! time (`read_mapping_folio` does no read-ahead), so a cold walk of /usr cost some 1,500 FUSE
//! round trips for it. When a read of one folio reaches squashd, that folio is missing and its
//! neighbours likely are too: after answering, a worker hands the kernel the whole 1 MiB window
//! around it (FUSE_NOTIFY_STORE), so the rest of the window never costs a round trip.

use fuser::{INodeNo, Notifier};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};

/// Bytes stored into the page cache around a read that missed it.
const WINDOW: usize = 1 << 20;

/// An EROFS metadata image served from memory.
#[derive(Debug)]
pub struct MetaFile {
    bytes: Vec<u8>,
    reads: AtomicU64,
    /// Windows whose store is queued or running: misses in them meanwhile (readers racing to
    /// the same folios) queue nothing more. A miss after the store ended (the page cache was
    /// dropped since) stores the window again.
    in_flight: Vec<AtomicBool>,
}

impl MetaFile {
    /// The image `bytes`.
    pub fn new(bytes: Vec<u8>) -> Self {
        let windows = bytes.len().div_ceil(WINDOW);
        MetaFile {
            bytes,
            reads: AtomicU64::new(0),
            in_flight: (0..windows).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Reads that reached squashd (page-cache misses of the kernel).
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// The bytes from `offset`, at most `size` of them; counts the read.
    pub(crate) fn read(&self, offset: u64, size: u32) -> &[u8] {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let start = offset.min(self.bytes.len() as u64) as usize;
        let end = start.saturating_add(size as usize).min(self.bytes.len());
        &self.bytes[start..end]
    }

    /// The window around `offset` to store (its index, start and end), unless its store is
    /// already under way.
    fn window_to_store(&self, offset: u64) -> Option<(usize, usize, usize)> {
        let index = usize::try_from(offset).ok()? / WINDOW;
        let busy = self.in_flight.get(index)?;
        if busy.swap(true, Ordering::AcqRel) {
            return None;
        }
        let start = index * WINDOW;
        Some((index, start, (start + WINDOW).min(self.bytes.len())))
    }

    /// Marks the store of window `index` ended: a later miss in it stores it again.
    fn window_done(&self, index: usize) {
        if let Some(busy) = self.in_flight.get(index) {
            busy.store(false, Ordering::Release);
        }
    }
}

struct Job {
    node: u64,
    file: Arc<MetaFile>,
    window: usize,
    start: usize,
    end: usize,
}

/// Stores windows of metadata images into the kernel's page cache, on a thread of its own: a
/// store waits on the folio the kernel is still filling from the reply just sent.
#[derive(Default)]
pub(crate) struct PageFiller {
    notifier: Arc<OnceLock<Notifier>>,
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
}

impl std::fmt::Debug for PageFiller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageFiller").finish_non_exhaustive()
    }
}

impl PageFiller {
    /// Where the session's notifier goes once the session exists.
    pub(crate) fn notifier_slot(&self) -> Arc<OnceLock<Notifier>> {
        self.notifier.clone()
    }

    /// Stores the first window of `file` (node `node`) now, on the calling thread: for an open
    /// of it, when the kernel knows the node and holds none of its folios, so nothing waits.
    /// Small images (most of a boot's) then cost the kernel no read at all.
    pub(crate) fn store_first_window(&self, node: u64, file: &MetaFile) {
        let Some(notifier) = self.notifier.get() else {
            return;
        };
        let Some((window, start, end)) = file.window_to_store(0) else {
            return;
        };
        store_window(notifier, node, file, window, start, end);
    }

    /// After a read of `file` (node `node`) at `offset` was answered: queue its window.
    pub(crate) fn after_read(&self, node: u64, file: &Arc<MetaFile>, offset: u64) {
        let Some((window, start, end)) = file.window_to_store(offset) else {
            return;
        };
        let mut jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        if jobs.is_none() {
            let (send, receive) = mpsc::channel::<Job>();
            let notifier = self.notifier.clone();
            let started = std::thread::Builder::new()
                .name("meta-store".into())
                .spawn(move || {
                    for job in receive {
                        match notifier.get() {
                            Some(n) => {
                                store_window(n, job.node, &job.file, job.window, job.start, job.end)
                            }
                            None => job.file.window_done(job.window),
                        }
                    }
                });
            if started.is_err() {
                file.window_done(window);
                return;
            }
            *jobs = Some(send);
        }
        if let Some(send) = jobs.as_ref() {
            let _ = send.send(Job {
                node,
                file: file.clone(),
                window,
                start,
                end,
            });
        }
    }
}

/// Stores bytes `start..end` of `file` (node `node`), window `window`, into the page cache, and
/// marks that window's store ended.
fn store_window(
    notifier: &Notifier,
    node: u64,
    file: &MetaFile,
    window: usize,
    start: usize,
    end: usize,
) {
    // A failed store costs only the round trips it would have saved.
    let _ = notifier.store(INodeNo(node), start as u64, &file.bytes[start..end]);
    file.window_done(window);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_stored_once_at_a_time_and_again_after() {
        let file = MetaFile::new(vec![7; 2 * WINDOW + 10]);
        assert_eq!(file.window_to_store(5), Some((0, 0, WINDOW)));
        // Misses racing to the same window while its store is under way queue nothing.
        assert_eq!(file.window_to_store(4096), None);
        assert_eq!(
            file.window_to_store(2 * WINDOW as u64 + 3),
            Some((2, 2 * WINDOW, 2 * WINDOW + 10))
        );
        assert_eq!(file.window_to_store(3 * WINDOW as u64), None);
        // Once stored, a later miss (the page cache was dropped) stores it again.
        file.window_done(0);
        assert_eq!(file.window_to_store(100), Some((0, 0, WINDOW)));
        assert_eq!(file.read(WINDOW as u64 * 2, 100), &[7; 10][..]);
        assert_eq!(file.reads(), 1);
    }
}
