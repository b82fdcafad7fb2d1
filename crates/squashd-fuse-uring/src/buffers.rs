//! Memory the kernel writes into behind the compiler's back: each ring entry's header and
//! payload buffers, handed to the kernel by address in a REGISTER command.
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
// (`bytes` and `bytes_mut` borrow it); moving it to another thread moves that ownership, as
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

    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The bytes.
    ///
    /// # Safety
    /// The kernel must not write the buffer while the slice lives: no command that registered
    /// it may be in flight.
    pub(crate) unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: ptr is a live allocation of layout.size() initialized (zeroed) bytes; the
        // caller guarantees no concurrent writer.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }

    /// The bytes, writable.
    ///
    /// # Safety
    /// As [`RawBuffer::bytes`], and no other slice of this buffer may live meanwhile.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn bytes_mut(&self) -> &mut [u8] {
        // SAFETY: as in bytes(); the caller guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
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

/// One ring entry: its `fuse_uring_req_header`, its payload buffer, and the two iovecs that
/// point at them (the kernel reads the iovec array when it registers the entry).
pub(crate) struct EntryBuffers {
    pub(crate) header: RawBuffer,
    pub(crate) payload: RawBuffer,
    iovecs: Box<[libc::iovec; 2]>,
}

// SAFETY: the iovecs point only into this entry's own two buffers (RawBuffer is Send, see
// above), so moving the whole entry to another thread moves the memory they describe with it.
unsafe impl Send for EntryBuffers {}

impl EntryBuffers {
    pub(crate) fn new(payload_size: usize) -> Option<EntryBuffers> {
        let header = RawBuffer::new(RING_HEADER_SIZE, 64)?;
        // Page-aligned (a file read into it is page-aligned too), and resident only once used.
        let payload = RawBuffer::mapped(payload_size)?;
        let iovecs = Box::new([
            libc::iovec {
                iov_base: header.as_ptr().cast(),
                iov_len: header.len(),
            },
            libc::iovec {
                iov_base: payload.as_ptr().cast(),
                iov_len: payload.len(),
            },
        ]);
        Some(EntryBuffers {
            header,
            payload,
            iovecs,
        })
    }

    pub(crate) fn iovecs(&self) -> *const libc::iovec {
        self.iovecs.as_ptr()
    }

    /// Bytes this entry holds.
    pub(crate) fn memory(&self) -> usize {
        self.header.len() + self.payload.len()
    }
}
