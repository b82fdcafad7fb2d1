//! The one SQE the transport submits: IORING_OP_URING_CMD on /dev/fuse with a
//! `fuse_uring_cmd_req` in its command area and the entry's two iovecs (header, payload).
//!
//! `io_uring::opcode::UringCmd80` (0.7.16) sets the opcode, fd, command op, the 80-byte command
//! area and `addr`, but not `len`, and `fs/fuse/dev_uring.c` refuses a command whose `sqe->len`
//! is not 2 (`FUSE_URING_IOV_SEGS`). So the built entry gets its `len` set here, through the
//! byte layout the kernel ABI fixes (`struct io_uring_sqe`: `len` is the u32 at offset 24) and
//! that `Entry128` keeps with `#[repr(C)]`. The test below checks the layout against what the
//! crate itself wrote, so a change in the crate fails a test instead of a mount.

use std::os::fd::RawFd;

use io_uring::{opcode, squeue::Entry128, types};

use crate::abi::cmd_req;

/// Offset of `len` in `struct io_uring_sqe`.
const SQE_LEN_OFFSET: usize = 24;

/// The uring command `cmd_op` for the entry whose `[header, payload]` iovecs are at `iovecs`.
pub(crate) fn fuse_uring_cmd(
    dev_fuse: RawFd,
    cmd_op: u32,
    iovecs: *const libc::iovec,
    commit_id: u64,
    qid: u16,
    user_data: u64,
) -> Entry128 {
    let entry = opcode::UringCmd80::new(types::Fd(dev_fuse), cmd_op)
        .cmd(cmd_req(commit_id, qid))
        .addr(Some(iovecs as u64))
        .build()
        .user_data(user_data);
    with_len(entry, 2)
}

fn with_len(entry: Entry128, len: u32) -> Entry128 {
    // SAFETY: Entry128 is #[repr(C)] (Entry, [u8; 64]) and Entry is #[repr(C)] around the
    // kernel's 64-byte `struct io_uring_sqe` (the crate asserts both sizes), so the entry is
    // exactly 128 plain bytes with no padding-dependent invariants: every field is an integer
    // or a union of integers, so any byte pattern is a valid Entry128 and transmuting to and
    // from [u8; 128] (same size, checked by the compiler) is sound.
    let mut bytes: [u8; 128] = unsafe { std::mem::transmute::<Entry128, [u8; 128]>(entry) };
    bytes[SQE_LEN_OFFSET..SQE_LEN_OFFSET + 4].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: as above; the bytes came from a valid Entry128 and only `len` changed.
    unsafe { std::mem::transmute::<[u8; 128], Entry128>(bytes) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{read_u32, read_u64, CMD_COMMIT_AND_FETCH};

    #[test]
    fn sqe_bytes_are_the_kernels_layout() {
        let iovecs = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 2];
        let entry = fuse_uring_cmd(7, CMD_COMMIT_AND_FETCH, iovecs.as_ptr(), 0x1234, 3, 99);
        assert_eq!(
            entry.get_opcode(),
            u32::from(io_uring::opcode::UringCmd80::CODE)
        );
        assert_eq!(entry.get_user_data(), 99);
        // SAFETY: see with_len: an Entry128 is 128 plain bytes.
        let bytes: [u8; 128] = unsafe { std::mem::transmute::<Entry128, [u8; 128]>(entry) };
        assert_eq!(bytes[0], io_uring::opcode::UringCmd80::CODE);
        assert_eq!(read_u32(&bytes, 4), Some(7), "fd");
        assert_eq!(read_u32(&bytes, 8), Some(CMD_COMMIT_AND_FETCH), "cmd_op");
        assert_eq!(read_u64(&bytes, 16), Some(iovecs.as_ptr() as u64), "addr");
        assert_eq!(read_u32(&bytes, SQE_LEN_OFFSET), Some(2), "len");
        assert_eq!(read_u64(&bytes, 32), Some(99), "user_data");
        // The command area starts at offset 48: flags, commit_id, qid.
        assert_eq!(read_u64(&bytes, 48), Some(0));
        assert_eq!(read_u64(&bytes, 56), Some(0x1234));
        assert_eq!(u16::from_ne_bytes([bytes[64], bytes[65]]), 3);
    }
}
