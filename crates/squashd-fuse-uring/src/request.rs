//! What a handler sees of one FUSE request, and how it answers: the interface shared by the ring
//! transport and a /dev/fuse session, so that one dispatcher serves both.

use crate::abi::{InHeader, IN_HEADER_SIZE};

/// One FUSE request, as either transport received it.
///
/// The kernel sends a request's in arguments as one byte stream: on /dev/fuse right after the
/// in header; over the ring split in two, the first argument (the per-opcode struct, e.g.
/// `fuse_read_in`) in the entry's `op_in` area and the rest (names, write data) in the payload
/// buffer. The stream is the same bytes in the same order either way, so a dispatcher parses
/// [`Request::args`] and never needs to know which transport it runs on.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The `fuse_in_header`.
    pub header: InHeader,
    /// The first in argument over the ring; empty on /dev/fuse.
    pub op_in: &'a [u8],
    /// The remaining in arguments over the ring; all of them on /dev/fuse.
    pub payload: &'a [u8],
    /// The ring queue (= CPU) that carried the request; `None` on /dev/fuse.
    pub queue: Option<usize>,
    /// Ring entries held by the thread answering (0 on /dev/fuse): 1 for a per-CPU entry
    /// thread, whose handler may wait without holding up any other request (the other entries
    /// of its queue still take that queue's requests); one per CPU for the idle start's thread,
    /// and the queue's depth for a thread that holds every entry of its CPU's queue
    /// ([`crate::QueueThreads::PerCpu`]), which answer their entries one after another, so that
    /// their handlers must not wait.
    pub thread_entries: usize,
    /// Whether other threads take requests of this request's queue while it is answered
    /// (true on /dev/fuse, whose request threads all take any request). False on the idle
    /// start's thread before the per-CPU threads start, and on a thread that holds every entry
    /// of its CPU's queue (the kernel gives the queue's next request to one of its free
    /// entries): its handler must then not wait for another request of its own mount (a read
    /// ahead of the kernel path's EROFS reads the blob through the same connection), which
    /// nothing else would answer.
    pub queue_shared: bool,
}

impl<'a> Request<'a> {
    /// A request as read from /dev/fuse: the in header followed by the in arguments. `None` if
    /// the bytes are shorter than a header or than the length the header claims.
    pub fn from_dev_fuse(bytes: &'a [u8]) -> Option<Request<'a>> {
        let header = InHeader::parse(bytes)?;
        let len = usize::try_from(header.len).ok()?;
        let payload = bytes.get(IN_HEADER_SIZE..len)?;
        Some(Request {
            header,
            op_in: &[],
            payload,
            queue: None,
            thread_entries: 0,
            queue_shared: true,
        })
    }

    /// A reader over the in arguments, whichever transport split them how.
    pub fn args(&self) -> ArgReader<'a> {
        ArgReader {
            segments: [self.op_in, self.payload],
            current: 0,
        }
    }
}

/// Reads a request's in arguments in order: fixed-size structs, then names.
#[derive(Clone, Debug)]
pub struct ArgReader<'a> {
    segments: [&'a [u8]; 2],
    current: usize,
}

impl<'a> ArgReader<'a> {
    fn segment(&mut self) -> &'a [u8] {
        while self.current < self.segments.len() {
            let segment = self.segments[self.current];
            if !segment.is_empty() {
                return segment;
            }
            self.current += 1;
        }
        &[]
    }

    /// The next `len` bytes, or `None` if fewer remain (an argument never straddles the
    /// `op_in`/payload boundary: the kernel puts whole arguments on either side).
    pub fn bytes(&mut self, len: usize) -> Option<&'a [u8]> {
        let segment = self.segment();
        let taken = segment.get(..len)?;
        if let Some(slot) = self.segments.get_mut(self.current) {
            *slot = &segment[len..];
        }
        Some(taken)
    }

    /// The next NUL-terminated name, without its NUL.
    pub fn name(&mut self) -> Option<&'a [u8]> {
        let segment = self.segment();
        let end = segment.iter().position(|&b| b == 0)?;
        let name = self.bytes(end + 1)?;
        name.get(..end)
    }

    /// The next native-endian `u32`.
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_ne_bytes(self.bytes(4)?.try_into().ok()?))
    }

    /// The next native-endian `u64`.
    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_ne_bytes(self.bytes(8)?.try_into().ok()?))
    }

    /// Everything not read yet, across both parts.
    pub fn remaining(&self) -> usize {
        self.segments[self.current.min(1)..]
            .iter()
            .map(|s| s.len())
            .sum()
    }
}

/// Why a reply could not be sent as asked.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReplyError {
    /// The out arguments do not fit the transport's buffer (the ring's payload size). The
    /// transport answers the request with EIO instead.
    #[error("reply of {len} bytes does not fit the {capacity}-byte reply buffer")]
    TooLarge {
        /// Bytes the handler tried to send.
        len: usize,
        /// Bytes the buffer holds.
        capacity: usize,
    },
    /// The request was answered already.
    #[error("the request was answered already")]
    AlreadyAnswered,
    /// [`ReplyWriter::commit`] before any answer.
    #[error("there is no answer to commit yet")]
    Unanswered,
    /// The transport could not send the answer.
    #[error("the answer could not be sent: {0}")]
    Transport(String),
}

/// Where a handler writes its answer to one request. Each request gets exactly one answer: a
/// handler that returns without one gets EIO sent for it.
pub trait ReplyWriter {
    /// The largest out arguments this reply can carry.
    fn capacity(&self) -> usize;

    /// Answers with success and the out arguments `parts` (concatenated).
    fn ok(&mut self, parts: &[&[u8]]) -> Result<(), ReplyError>;

    /// Answers with success and out arguments that `fill` writes into a buffer of at most
    /// `max_len` bytes (returning how many it wrote): a file read lands directly in the ring's
    /// payload buffer, with no copy. An `Err(errno)` from `fill` answers with that error.
    fn ok_with(
        &mut self,
        max_len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Result<usize, i32>,
    ) -> Result<(), ReplyError>;

    /// Answers with the (positive) errno.
    fn error(&mut self, errno: i32) -> Result<(), ReplyError>;

    /// Sends the answer given to the kernel now, before the handler returns, so that what the
    /// handler does next happens after the kernel has the answer (squashd ends a directory's
    /// listing turn only once the listing is in the kernel's cache, so that a duplicate request
    /// waiting for that turn is answered after it). Nothing can be written to the reply after.
    ///
    /// Without it, the ring commits the answer when the handler returns, in the same system
    /// call that waits for the next request: one system call per request instead of two. A
    /// writer that sends every answer as soon as it is given (as a /dev/fuse writer does) has
    /// nothing to do here.
    fn commit(&mut self) -> Result<(), ReplyError> {
        Ok(())
    }
}

/// Serves FUSE requests: squashd's dispatcher, run by the ring transport's queue threads (and by
/// the /dev/fuse session's readers).
pub trait Handler: Send + Sync + 'static {
    /// Answers `request` through `reply`. Called from many threads at once (one per queue).
    fn handle(&self, request: &Request<'_>, reply: &mut dyn ReplyWriter);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_read_the_same_split_or_whole() {
        // fuse_read_in-like struct of 8 bytes then a name: once split as the ring splits it,
        // once contiguous as /dev/fuse sends it.
        let mut whole = 7u64.to_ne_bytes().to_vec();
        whole.extend_from_slice(b"name\0");
        let split = Request {
            header: InHeader::default(),
            op_in: &whole[..8],
            payload: &whole[8..],
            queue: Some(0),
            thread_entries: 1,
            queue_shared: true,
        };
        let contiguous = Request {
            header: InHeader::default(),
            op_in: &[],
            payload: &whole,
            queue: None,
            thread_entries: 0,
            queue_shared: true,
        };
        for request in [split, contiguous] {
            let mut args = request.args();
            assert_eq!(args.remaining(), 13);
            assert_eq!(args.u64(), Some(7));
            assert_eq!(args.name(), Some(&b"name"[..]));
            assert_eq!(args.remaining(), 0);
            assert_eq!(args.u32(), None);
        }
    }

    #[test]
    fn dev_fuse_request_checks_the_claimed_length() {
        let header = InHeader {
            len: 45,
            ..InHeader::default()
        };
        let mut bytes = header.to_bytes().to_vec();
        bytes.extend_from_slice(b"abcd\0");
        let request = Request::from_dev_fuse(&bytes).expect("complete request");
        assert_eq!(request.payload, b"abcd\0");
        assert!(Request::from_dev_fuse(&bytes[..44]).is_none());
    }

    #[test]
    fn a_name_without_nul_is_none() {
        let request = Request {
            header: InHeader::default(),
            op_in: &[],
            payload: b"abc",
            queue: None,
            thread_entries: 0,
            queue_shared: true,
        };
        assert_eq!(request.args().name(), None);
    }
}
