//! The metadata image as a file of the blob file system, and what keeps it in the kernel's
//! page cache.
//!
//! EROFS reads its metadata through the page cache of the `.meta` file, one 4 KiB folio at a
//! time (`read_mapping_folio` does no read-ahead), so a cold walk of /usr cost some 1,500 FUSE
//! round trips for it. When a read of one folio reaches squashd, that folio is missing and its
//! neighbours likely are too: after answering, a worker hands the kernel the whole 1 MiB window
//! around it (FUSE_NOTIFY_STORE), so the rest of the window never costs a round trip.

use squashd_fuse::page_store::StoreBytes;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

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
    #[cfg(test)]
    pub(crate) fn read(&self, offset: u64, size: u32) -> &[u8] {
        &self.bytes[self.read_range(offset, size)]
    }

    /// Where the bytes from `offset` are, at most `size` of them; counts the read.
    pub(crate) fn read_range(&self, offset: u64, size: u32) -> std::ops::Range<usize> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let start = offset.min(self.bytes.len() as u64) as usize;
        let end = start.saturating_add(size as usize).min(self.bytes.len());
        start..end
    }

    /// All its bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The window around `offset`, to store into the page cache, unless its store is already
    /// under way. Once the window is dropped (stored, or given up), a later miss in it stores
    /// it again.
    pub(crate) fn window_at(self: &Arc<Self>, offset: u64) -> Option<MetaWindow> {
        let index = usize::try_from(offset).ok()? / WINDOW;
        let busy = self.in_flight.get(index)?;
        if busy.swap(true, Ordering::AcqRel) {
            return None;
        }
        let start = index * WINDOW;
        Some(MetaWindow {
            file: self.clone(),
            index,
            start,
            end: (start + WINDOW).min(self.bytes.len()),
        })
    }
}

/// One window of a metadata image on its way to the page cache.
#[derive(Debug)]
pub struct MetaWindow {
    file: Arc<MetaFile>,
    index: usize,
    start: usize,
    end: usize,
}

impl MetaWindow {
    /// Where it starts in the file.
    pub fn offset(&self) -> u64 {
        self.start as u64
    }
}

impl StoreBytes for MetaWindow {
    fn bytes(&self) -> &[u8] {
        &self.file.bytes[self.start..self.end]
    }
}

impl Drop for MetaWindow {
    fn drop(&mut self) {
        if let Some(busy) = self.file.in_flight.get(self.index) {
            busy.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_stored_once_at_a_time_and_again_after() {
        let file = Arc::new(MetaFile::new(vec![7; 2 * WINDOW + 10]));
        let first = file.window_at(5).unwrap();
        assert_eq!((first.offset(), first.bytes().len()), (0, WINDOW));
        // Misses racing to the same window while its store is under way queue nothing.
        assert!(file.window_at(4096).is_none());
        let last = file.window_at(2 * WINDOW as u64 + 3).unwrap();
        assert_eq!((last.offset(), last.bytes().len()), (2 * WINDOW as u64, 10));
        assert!(file.window_at(3 * WINDOW as u64).is_none());
        // Once stored, a later miss (the page cache was dropped) stores it again.
        drop(first);
        assert_eq!(file.window_at(100).map(|w| w.offset()), Some(0));
        assert_eq!(file.read(WINDOW as u64 * 2, 100), &[7; 10][..]);
        assert_eq!(file.reads(), 1);
    }
}
