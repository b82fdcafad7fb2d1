//! The ring's [`ReplyWriter`]: out arguments go straight into the entry's payload buffer, the
//! out header into the entry's header (written by the queue after the handler returns).

use crate::request::{ReplyError, ReplyWriter};

/// The answer to one ring request, written into the entry's payload buffer.
pub(crate) struct RingReply<'a> {
    payload: &'a mut [u8],
    /// (errno, out args length) once answered.
    answer: Option<(i32, usize)>,
    refused: bool,
}

impl<'a> RingReply<'a> {
    pub(crate) fn new(payload: &'a mut [u8]) -> RingReply<'a> {
        RingReply {
            payload,
            answer: None,
            refused: false,
        }
    }

    /// Whether the handler asked for a reply that did not fit.
    pub(crate) fn refused(&self) -> bool {
        self.refused
    }

    /// (errno, out args length) to commit: EIO if the handler gave no answer.
    pub(crate) fn outcome(&self) -> (i32, usize) {
        self.answer.unwrap_or((libc::EIO, 0))
    }

    fn check(&mut self, len: usize) -> Result<(), ReplyError> {
        if self.answer.is_some() {
            return Err(ReplyError::AlreadyAnswered);
        }
        if len > self.payload.len() {
            self.refused = true;
            return Err(ReplyError::TooLarge {
                len,
                capacity: self.payload.len(),
            });
        }
        Ok(())
    }
}

impl ReplyWriter for RingReply<'_> {
    fn capacity(&self) -> usize {
        self.payload.len()
    }

    fn ok(&mut self, parts: &[&[u8]]) -> Result<(), ReplyError> {
        let len = parts
            .iter()
            .try_fold(0usize, |sum, part| sum.checked_add(part.len()))
            .unwrap_or(usize::MAX);
        self.check(len)?;
        let mut at = 0;
        for part in parts {
            self.payload[at..at + part.len()].copy_from_slice(part);
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
        self.check(max_len)?;
        self.answer = Some(match fill(&mut self.payload[..max_len]) {
            Ok(len) if len <= max_len => (0, len),
            Ok(_) => (libc::EIO, 0),
            Err(errno) => (errno, 0),
        });
        Ok(())
    }

    fn error(&mut self, errno: i32) -> Result<(), ReplyError> {
        self.check(0)?;
        self.answer = Some((errno, 0));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_concatenated_and_oversize_is_refused() {
        let mut buffer = [0u8; 8];
        let mut reply = RingReply::new(&mut buffer);
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
        let mut reply = RingReply::new(&mut buffer);
        reply
            .ok_with(4, &mut |buf| {
                buf.copy_from_slice(b"wxyz");
                Ok(3)
            })
            .expect("fits");
        assert_eq!(reply.outcome(), (0, 3));
        let mut reply = RingReply::new(&mut buffer);
        reply.ok_with(4, &mut |_| Err(libc::EISDIR)).expect("fits");
        assert_eq!(reply.outcome(), (libc::EISDIR, 0));
    }
}
