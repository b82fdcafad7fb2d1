//! Memory the kernel writes into behind the compiler's back: each ring entry's header and
//! payload buffers (one mapping per queue: [`QueueBuffers`]), handed to the kernel by address
//! in a REGISTER command.
//!
//! They are raw allocations, not `Vec`s or `Box`es, because the kernel writes them while a
//! command is in flight: Rust must never hold a reference into them then. The queue creates
//! slices only between an entry's completion and its next submission, when the kernel has no
//! command of that entry (see `queue.rs`).

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

use crate::abi::RING_HEADER_SIZE;

/// One zeroed, aligned allocation, freed on drop (or deliberately leaked).
pub(crate) struct RawBuffer {
    ptr: NonNull<u8>,
    layout: Layout,
    mapped: bool,
}

// SAFETY: a RawBuffer owns its allocation and hands out no references that outlive a call
// (`QueueBuffers::entry_mut` borrows it); moving it to another thread moves that ownership, as
// moving a `Box<[u8]>` would. The kernel's access is ruled by the commands' lifetimes, which
// do not depend on the owning thread (queue.rs only touches buffers between a completion and
// the next submission, on the one thread that owns the queue).
unsafe impl Send for RawBuffer {}

impl RawBuffer {
    /// `size` (> 0) zeroed bytes aligned to `align` (a power of two) from the heap; `None` if
    /// out of memory.
    pub(crate) fn new(size: usize, align: usize) -> Option<RawBuffer> {
        let layout = Layout::from_size_align(size.max(1), align).ok()?;
        // SAFETY: the layout has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc_zeroed(layout) })?;
        Some(RawBuffer {
            ptr,
            layout,
            mapped: false,
        })
    }

    /// `size` (> 0) zeroed, page-aligned bytes of their own anonymous mapping, which take no
    /// memory until touched: an idle mount's payload buffers cost address space, not RSS. (The
    /// heap's aligned zeroed allocation writes every byte, so a payload would be resident from
    /// the start.)
    pub(crate) fn mapped(size: usize) -> Option<RawBuffer> {
        let layout = Layout::from_size_align(size.max(1), 4096).ok()?;
        // SAFETY: a new private anonymous mapping; no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                layout.size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        Some(RawBuffer {
            ptr: NonNull::new(ptr.cast())?,
            layout,
            mapped: true,
        })
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for RawBuffer {
    fn drop(&mut self) {
        if self.mapped {
            // SAFETY: mapped in mapped() with this length, and unmapped only here.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.layout.size()) };
        } else {
            // SAFETY: allocated in new() with this very layout, and freed only here.
            unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
        }
    }
}

/// Where each entry's header goes in a queue's mapping: 288 bytes, rounded up so that every
/// header starts on a 64-byte boundary.
const HEADER_STRIDE: usize = RING_HEADER_SIZE.div_ceil(64) * 64;

/// The header and payload buffers of every entry of one queue: the headers in one heap block,
/// the page-aligned payloads in one anonymous mapping (resident only once used), and the two
/// iovecs of each entry that point at them (the kernel reads an entry's iovecs when it
/// registers the entry). One mapping per queue instead of one per payload, and one heap block
/// instead of one per header: fewer system calls on the way to a mount's INIT answer. (The
/// headers stay on the heap: in the mapping they would take a resident page per queue.)
pub(crate) struct QueueBuffers {
    headers: RawBuffer,
    payloads: RawBuffer,
    payload_stride: usize,
    payload_size: usize,
    iovecs: Box<[[libc::iovec; 2]]>,
}

// SAFETY: the iovecs point only into this value's own two buffers (RawBuffer is Send, see
// above), so moving the whole value to another thread moves the memory they describe with it.
unsafe impl Send for QueueBuffers {}

impl QueueBuffers {
    /// Buffers for `entries` (> 0) entries of `payload_size`-byte payloads; `None` if the sizes
    /// overflow or the allocation or mapping fails.
    pub(crate) fn new(entries: usize, payload_size: usize) -> Option<QueueBuffers> {
        let payload_stride = payload_size.max(1).checked_next_multiple_of(4096)?;
        let headers = RawBuffer::new(entries.checked_mul(HEADER_STRIDE)?, 64)?;
        let payloads = RawBuffer::mapped(entries.checked_mul(payload_stride)?)?;
        let iovecs = (0..entries)
            .map(|index| {
                // The offsets are within the two buffers: their sizes are checked above.
                [
                    libc::iovec {
                        iov_base: headers.as_ptr().wrapping_add(index * HEADER_STRIDE).cast(),
                        iov_len: RING_HEADER_SIZE,
                    },
                    libc::iovec {
                        iov_base: payloads
                            .as_ptr()
                            .wrapping_add(index * payload_stride)
                            .cast(),
                        iov_len: payload_size,
                    },
                ]
            })
            .collect();
        Some(QueueBuffers {
            headers,
            payloads,
            payload_stride,
            payload_size,
            iovecs,
        })
    }

    /// The number of entries.
    pub(crate) fn len(&self) -> usize {
        self.iovecs.len()
    }

    /// Bytes of each entry's payload buffer.
    pub(crate) fn payload_size(&self) -> usize {
        self.payload_size
    }

    /// The two iovecs of entry `index` (header, payload), for its REGISTER command.
    pub(crate) fn iovecs(&self, index: usize) -> Option<*const libc::iovec> {
        self.iovecs.get(index).map(|pair| pair.as_ptr())
    }

    /// Entry `index`'s header and payload buffers.
    ///
    /// # Safety
    /// The kernel must not write them while the slices live (no command of the entry in
    /// flight), and no other slice of this entry's buffers may live meanwhile.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn entry_mut(&self, index: usize) -> Option<(&mut [u8], &mut [u8])> {
        if index >= self.len() {
            return None;
        }
        // SAFETY: the ranges lie inside the headers block and the payload mapping (see new)
        // and overlap no other entry's; the caller guarantees that nothing else reads or
        // writes them.
        unsafe {
            Some((
                std::slice::from_raw_parts_mut(
                    self.headers.as_ptr().add(index * HEADER_STRIDE),
                    RING_HEADER_SIZE,
                ),
                std::slice::from_raw_parts_mut(
                    self.payloads.as_ptr().add(index * self.payload_stride),
                    self.payload_size,
                ),
            ))
        }
    }

    /// Bytes of the entries' buffers, as [`crate::ring_memory`] counts them.
    pub(crate) fn memory(&self) -> usize {
        self.len() * (self.payload_size + RING_HEADER_SIZE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_do_not_overlap_and_payloads_are_page_aligned() {
        let buffers = QueueBuffers::new(3, 10_000).expect("map");
        let mut ranges = Vec::new();
        for index in 0..3 {
            let iovecs = buffers.iovecs(index).expect("entry");
            // SAFETY: two iovecs per entry, made by new.
            let [header, payload] = unsafe { [*iovecs, *iovecs.add(1)] };
            assert_eq!(header.iov_len, RING_HEADER_SIZE);
            assert_eq!(payload.iov_len, 10_000);
            assert_eq!(header.iov_base as usize % 64, 0);
            assert_eq!(payload.iov_base as usize % 4096, 0);
            for iovec in [header, payload] {
                ranges.push((
                    iovec.iov_base as usize,
                    iovec.iov_base as usize + iovec.iov_len,
                ));
            }
            // SAFETY: no kernel command holds these buffers in this test, and each pair of
            // slices ends with the iteration.
            let (header_bytes, payload_bytes) = unsafe { buffers.entry_mut(index) }.expect("entry");
            assert_eq!(header_bytes.as_ptr() as usize, header.iov_base as usize);
            assert_eq!(payload_bytes.as_ptr() as usize, payload.iov_base as usize);
            payload_bytes.fill(index as u8 + 1);
            header_bytes.fill(0xff);
        }
        ranges.sort();
        assert!(ranges.windows(2).all(|w| w[0].1 <= w[1].0), "{ranges:?}");
        assert!(buffers.iovecs(3).is_none());
        // SAFETY: as above.
        assert!(unsafe { buffers.entry_mut(3) }.is_none());
        // SAFETY: as above.
        let (_, payload) = unsafe { buffers.entry_mut(1) }.expect("entry");
        assert!(
            payload.iter().all(|&b| b == 2),
            "entry 2 and the headers left entry 1 alone"
        );
        assert_eq!(buffers.memory(), 3 * (10_000 + RING_HEADER_SIZE));
    }
}
