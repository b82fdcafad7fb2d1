//! The ring's [`ReplyWriter`]: out arguments go straight into the entry's payload buffer, the
//! out header into the entry's header (written by the queue after the handler returns).

use crate::request::{ReplyError, ReplyWriter};
use std::marker::PhantomData;

/// Sends an entry's answer (errno, out args length) to the kernel before the handler returns
/// ([`ReplyWriter::commit`]): writes the out header and submits COMMIT_AND_FETCH. `Err` says why
/// the submission failed (the queue then counts the entry as lost).
pub(crate) type CommitNow<'a> = dyn FnMut(i32, usize) -> Result<(), String> + 'a;

/// The answer to one ring request, written into the entry's payload buffer.
pub(crate) struct RingReply<'a> {
    /// The entry's payload buffer. Kept as a pointer, not a slice: once the answer is committed
    /// the kernel may write the next request there while this reply still exists, so a slice
    /// is made only for each write before the commit.
    payload: *mut u8,
    capacity: usize,
    _payload: PhantomData<&'a mut [u8]>,
    /// (errno, out args length) once answered.
    answer: Option<(i32, usize)>,
    refused: bool,
    /// How to commit early; `None` once committed (or where it cannot be: unit tests).
    commit: Option<&'a mut CommitNow<'a>>,
    committed: bool,
}

impl<'a> RingReply<'a> {
    /// A reply into `payload`, committed when the queue's handler returns, or earlier through
    /// `commit` if the handler asks ([`ReplyWriter::commit`]).
    pub(crate) fn new(payload: &'a mut [u8], commit: Option<&'a mut CommitNow<'a>>) -> Self {
        RingReply {
            payload: payload.as_mut_ptr(),
            capacity: payload.len(),
            _payload: PhantomData,
            answer: None,
            refused: false,
            commit,
            committed: false,
        }
    }

    /// Whether the handler asked for a reply that did not fit.
    pub(crate) fn refused(&self) -> bool {
        self.refused
    }

    /// Whether the answer was committed already (the queue must not commit it again).
    pub(crate) fn committed(&self) -> bool {
        self.committed
    }

    /// (errno, out args length) to commit: EIO if the handler gave no answer.
    pub(crate) fn outcome(&self) -> (i32, usize) {
        self.answer.unwrap_or((libc::EIO, 0))
    }

    fn check(&mut self, len: usize) -> Result<&mut [u8], ReplyError> {
        if self.answer.is_some() || self.committed {
            return Err(ReplyError::AlreadyAnswered);
        }
        if len > self.capacity {
            self.refused = true;
            return Err(ReplyError::TooLarge {
                len,
                capacity: self.capacity,
            });
        }
        // SAFETY: `payload` is the start of a `capacity`-byte buffer borrowed for 'a (new), and
        // not committed yet (checked above), so the kernel does not write it now and this is
        // the only slice of it (each method's slice ends with the method).
        Ok(unsafe { std::slice::from_raw_parts_mut(self.payload, self.capacity) })
    }
}

impl ReplyWriter for RingReply<'_> {
    fn capacity(&self) -> usize {
        self.capacity
    }

    fn ok(&mut self, parts: &[&[u8]]) -> Result<(), ReplyError> {
        let len = parts
            .iter()
            .try_fold(0usize, |sum, part| sum.checked_add(part.len()))
            .unwrap_or(usize::MAX);
        let payload = self.check(len)?;
        let mut at = 0;
        for part in parts {
            payload[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        self.answer = Some((0, len));
        Ok(())
    }

    fn ok_with(
        &mut self,
        max_len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Result<usize, i32>,
    ) -> Result<(), ReplyError> {
        let payload = self.check(max_len)?;
        let answer = match fill(&mut payload[..max_len]) {
            Ok(len) if len <= max_len => (0, len),
            Ok(_) => (libc::EIO, 0),
            Err(errno) => (errno, 0),
        };
        self.answer = Some(answer);
        Ok(())
    }

    fn error(&mut self, errno: i32) -> Result<(), ReplyError> {
        self.check(0)?;
        self.answer = Some((errno, 0));
        Ok(())
    }

    fn commit(&mut self) -> Result<(), ReplyError> {
        if self.committed {
            return Err(ReplyError::AlreadyAnswered);
        }
        let Some((errno, len)) = self.answer else {
            return Err(ReplyError::Unanswered);
        };
        let Some(commit) = self.commit.take() else {
            // Nothing to commit through (unit tests): the queue commits when the handler returns.
            return Ok(());
        };
        self.committed = true;
        commit(errno, len).map_err(ReplyError::Transport)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_concatenated_and_oversize_is_refused() {
        let mut buffer = [0u8; 8];
        let mut reply = RingReply::new(&mut buffer, None);
        assert_eq!(
            reply.ok(&[b"12345", b"6789"]),
            Err(ReplyError::TooLarge {
                len: 9,
                capacity: 8
            })
        );
        assert!(reply.refused());
        assert_eq!(reply.outcome(), (libc::EIO, 0));
        reply.ok(&[b"abc", b"de"]).expect("fits");
        assert_eq!(reply.outcome(), (0, 5));
        assert_eq!(reply.error(libc::ENOENT), Err(ReplyError::AlreadyAnswered));
        assert_eq!(&buffer[..5], b"abcde");
    }

    #[test]
    fn fill_writes_in_place_or_fails_with_its_errno() {
        let mut buffer = [0u8; 8];
        let mut reply = RingReply::new(&mut buffer, None);
        reply
            .ok_with(4, &mut |buf| {
                buf.copy_from_slice(b"wxyz");
                Ok(3)
            })
            .expect("fits");
        assert_eq!(reply.outcome(), (0, 3));
        let mut reply = RingReply::new(&mut buffer, None);
        reply.ok_with(4, &mut |_| Err(libc::EISDIR)).expect("fits");
        assert_eq!(reply.outcome(), (libc::EISDIR, 0));
    }
}
