//! The parts of the FUSE kernel ABI (`include/uapi/linux/fuse.h`, protocol 7.42+) that the ring
//! transport reads and writes. Everything is little-endian-agnostic native-endian bytes, parsed
//! with bounds checks: these bytes come from the kernel, but the transport never trusts a length.

/// Size of `struct fuse_in_header`.
pub const IN_HEADER_SIZE: usize = 40;
/// Size of `struct fuse_out_header`.
pub const OUT_HEADER_SIZE: usize = 16;

/// `FUSE_URING_IN_OUT_HEADER_SZ`: room for the in header (fetch) or the out header (commit).
pub const RING_IN_OUT_SIZE: usize = 128;
/// `FUSE_URING_OP_IN_OUT_SZ`: room for the first in argument (the per-opcode struct).
pub const RING_OP_IN_SIZE: usize = 128;
/// Offset of `struct fuse_uring_ent_in_out` in `struct fuse_uring_req_header`.
pub const RING_ENT_IN_OUT_OFFSET: usize = RING_IN_OUT_SIZE + RING_OP_IN_SIZE;
/// Size of `struct fuse_uring_req_header`: the first iovec of each ring entry.
pub const RING_HEADER_SIZE: usize = RING_ENT_IN_OUT_OFFSET + 32;

/// `FUSE_IO_URING_CMD_REGISTER`: hand an entry's buffers to the kernel.
pub const CMD_REGISTER: u32 = 1;
/// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`: reply to the entry's request and wait for the next.
pub const CMD_COMMIT_AND_FETCH: u32 = 2;

/// `FUSE_INIT_EXT` in `fuse_init_in.flags`: `flags2` holds bits 32..63 of the flags.
pub const FUSE_INIT_EXT: u32 = 1 << 30;
/// `FUSE_OVER_IO_URING` (bit 41 of the 64-bit init flags): the kernel offers (in the INIT
/// request) or the server accepts (in the INIT reply) FUSE requests over io_uring.
pub const FUSE_OVER_IO_URING: u64 = 1 << 41;
/// `FUSE_MIN_READ_BUFFER`: the smallest request buffer the kernel accepts.
pub const FUSE_MIN_READ_BUFFER: usize = 8192;

/// `struct fuse_in_header`, decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InHeader {
    /// Total length of the request: this header and all in arguments.
    pub len: u32,
    /// The FUSE opcode (`FUSE_LOOKUP` = 1 ...).
    pub opcode: u32,
    /// The request's id; the reply carries it back.
    pub unique: u64,
    /// The inode the request is about.
    pub nodeid: u64,
    /// Credentials of the calling process.
    pub uid: u32,
    /// Credentials of the calling process.
    pub gid: u32,
    /// The calling process.
    pub pid: u32,
    /// Length of request extensions (in 8-byte units), counted in `len`.
    pub total_extlen: u16,
}

impl InHeader {
    /// Decodes the header from the first [`IN_HEADER_SIZE`] bytes, or `None` if there are fewer.
    pub fn parse(bytes: &[u8]) -> Option<InHeader> {
        let bytes = bytes.get(..IN_HEADER_SIZE)?;
        Some(InHeader {
            len: read_u32(bytes, 0)?,
            opcode: read_u32(bytes, 4)?,
            unique: read_u64(bytes, 8)?,
            nodeid: read_u64(bytes, 16)?,
            uid: read_u32(bytes, 24)?,
            gid: read_u32(bytes, 28)?,
            pid: read_u32(bytes, 32)?,
            total_extlen: u16::from_ne_bytes(bytes.get(36..38)?.try_into().ok()?),
        })
    }

    /// Encodes the header (for tests and for building requests by hand).
    pub fn to_bytes(&self) -> [u8; IN_HEADER_SIZE] {
        let mut out = [0u8; IN_HEADER_SIZE];
        out[0..4].copy_from_slice(&self.len.to_ne_bytes());
        out[4..8].copy_from_slice(&self.opcode.to_ne_bytes());
        out[8..16].copy_from_slice(&self.unique.to_ne_bytes());
        out[16..24].copy_from_slice(&self.nodeid.to_ne_bytes());
        out[24..28].copy_from_slice(&self.uid.to_ne_bytes());
        out[28..32].copy_from_slice(&self.gid.to_ne_bytes());
        out[32..36].copy_from_slice(&self.pid.to_ne_bytes());
        out[36..38].copy_from_slice(&self.total_extlen.to_ne_bytes());
        out
    }
}

/// `struct fuse_out_header` for a reply of `args_len` bytes of out arguments.
pub fn out_header(unique: u64, errno: i32, args_len: usize) -> [u8; OUT_HEADER_SIZE] {
    let len = u32::try_from(OUT_HEADER_SIZE.saturating_add(args_len)).unwrap_or(u32::MAX);
    let mut out = [0u8; OUT_HEADER_SIZE];
    out[0..4].copy_from_slice(&len.to_ne_bytes());
    // The kernel wants the negated errno; 0 is success.
    out[4..8].copy_from_slice(&errno.saturating_neg().to_ne_bytes());
    out[8..16].copy_from_slice(&unique.to_ne_bytes());
    out
}

/// `struct fuse_uring_cmd_req`, in the first bytes of the SQE's 80-byte command area.
pub fn cmd_req(commit_id: u64, qid: u16) -> [u8; 80] {
    let mut cmd = [0u8; 80];
    // flags (0..8) stay 0.
    cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    cmd[16..18].copy_from_slice(&qid.to_ne_bytes());
    cmd
}

/// Reads a native-endian `u32` at `offset`, `None` past the end.
pub fn read_u32(bytes: &[u8], offset: usize) -> Option<u32> {
    let end = offset.checked_add(4)?;
    Some(u32::from_ne_bytes(bytes.get(offset..end)?.try_into().ok()?))
}

/// Reads a native-endian `u64` at `offset`, `None` past the end.
pub fn read_u64(bytes: &[u8], offset: usize) -> Option<u64> {
    let end = offset.checked_add(8)?;
    Some(u64::from_ne_bytes(bytes.get(offset..end)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_header_round_trips_and_short_input_is_none() {
        let header = InHeader {
            len: 52,
            opcode: 1,
            unique: 7,
            nodeid: 1,
            uid: 1000,
            gid: 100,
            pid: 42,
            total_extlen: 0,
        };
        assert_eq!(InHeader::parse(&header.to_bytes()), Some(header));
        assert_eq!(InHeader::parse(&header.to_bytes()[..39]), None);
    }

    #[test]
    fn ring_header_is_the_kernels_288_bytes() {
        // fuse_uring_req_header: in_out[128], op_in[128], fuse_uring_ent_in_out (32 bytes).
        assert_eq!(RING_HEADER_SIZE, 288);
    }

    #[test]
    fn out_header_negates_errno() {
        let header = out_header(9, libc::ENOENT, 0);
        assert_eq!(read_u32(&header, 0), Some(16));
        assert_eq!(read_u32(&header, 4), Some((-libc::ENOENT) as u32));
        assert_eq!(read_u64(&header, 8), Some(9));
    }
}
