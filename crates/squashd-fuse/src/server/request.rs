//! One request's bytes, parsed: the header and the operation with its arguments.
//!
//! Every length comes from the kernel, which is trusted; still, nothing here indexes or
//! unwraps on one: a message shorter than its header says, or than its operation's argument,
//! is an error ([`ParseError`]), answered EIO (or ignored, for operations with no answer).

use super::abi::{self, opcode, InHeader};
use squashd_fuse_uring::ArgReader;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use zerocopy::FromBytes;

/// Why a request could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParseError {
    /// Shorter than a request header: not even an id to answer.
    NoHeader,
    /// The operation's arguments are missing or cut short.
    Truncated,
}

/// A parsed request: who asked, about which node, and what.
#[derive(Debug)]
pub(crate) struct Request<'a> {
    pub(crate) header: InHeader,
    pub(crate) operation: Operation<'a>,
}

/// The operations squashd's servers answer, with their arguments; the rest are [`Operation::
/// Write`] (answered EROFS) or [`Operation::Other`] (ENOSYS).
#[derive(Debug)]
pub(crate) enum Operation<'a> {
    Init(abi::InitIn),
    Destroy,
    Lookup(&'a OsStr),
    Forget(u64),
    BatchForget(Vec<abi::ForgetOne>),
    Getattr(Option<u64>),
    Readlink,
    Open(abi::OpenIn),
    Read(abi::ReadIn),
    Flush(abi::FlushIn),
    Release(abi::ReleaseIn),
    Opendir(abi::OpenIn),
    Readdir(abi::ReadIn),
    Readdirplus(abi::ReadIn),
    Releasedir(abi::ReleaseIn),
    Statfs,
    Getxattr {
        size: u32,
        name: &'a OsStr,
    },
    Listxattr {
        size: u32,
    },
    Access(u32),
    Interrupt,
    /// An answer to a notification squashd never sends (RETRIEVE): nothing to do.
    NotifyReply,
    /// Anything that would change the file system.
    Write,
    /// An operation squashd does not implement (locks, ioctl, poll, lseek, bmap...).
    Other,
}

/// Reads the next argument, a `T`.
fn take<T: FromBytes>(args: &mut ArgReader<'_>) -> Result<T, ParseError> {
    let bytes = args
        .bytes(std::mem::size_of::<T>())
        .ok_or(ParseError::Truncated)?;
    T::read_from_bytes(bytes).map_err(|_| ParseError::Truncated)
}

/// The next argument, a NUL-terminated name (the kernel always terminates names).
fn name<'a>(args: &mut ArgReader<'a>) -> Result<&'a OsStr, ParseError> {
    args.name()
        .map(OsStr::from_bytes)
        .ok_or(ParseError::Truncated)
}

impl<'a> Request<'a> {
    /// The header alone, to answer a request whose arguments do not parse.
    pub(crate) fn header(bytes: &[u8]) -> Result<InHeader, ParseError> {
        InHeader::parse(bytes).ok_or(ParseError::NoHeader)
    }

    /// Parses one request as read from the FUSE device: the header, then the arguments.
    pub(crate) fn parse(bytes: &'a [u8]) -> Result<Request<'a>, ParseError> {
        let request =
            squashd_fuse_uring::Request::from_dev_fuse(bytes).ok_or(match Self::header(bytes) {
                Ok(_) => ParseError::Truncated,
                Err(e) => e,
            })?;
        Self::parse_args(request.header, request.args())
    }

    /// Parses one request from its header and its arguments, wherever the transport put them
    /// (after the header on /dev/fuse; split between a ring entry's header and payload).
    pub(crate) fn parse_args(
        header: InHeader,
        mut args: ArgReader<'a>,
    ) -> Result<Request<'a>, ParseError> {
        let args = &mut args;
        let operation = match header.opcode {
            opcode::INIT => {
                // Kernels before 7.36 send a shorter argument, without flags2.
                let mut init = abi::InitIn::default();
                let have = args.remaining().min(std::mem::size_of::<abi::InitIn>());
                if have < abi::INIT_IN_COMPAT_SIZE {
                    return Err(ParseError::Truncated);
                }
                let bytes = args.bytes(have).ok_or(ParseError::Truncated)?;
                zerocopy::IntoBytes::as_mut_bytes(&mut init)[..have].copy_from_slice(bytes);
                Operation::Init(init)
            }
            opcode::DESTROY => Operation::Destroy,
            opcode::LOOKUP => Operation::Lookup(name(args)?),
            opcode::FORGET => Operation::Forget(take::<abi::ForgetIn>(args)?.nlookup),
            opcode::BATCH_FORGET => {
                let batch = take::<abi::BatchForgetIn>(args)?;
                let fit = args.remaining() / std::mem::size_of::<abi::ForgetOne>();
                let mut nodes = Vec::with_capacity((batch.count as usize).min(fit));
                for _ in 0..batch.count {
                    nodes.push(take::<abi::ForgetOne>(args)?);
                }
                Operation::BatchForget(nodes)
            }
            opcode::GETATTR => {
                let getattr = take::<abi::GetattrIn>(args)?;
                Operation::Getattr(
                    (getattr.getattr_flags & abi::GETATTR_FH != 0).then_some(getattr.fh),
                )
            }
            opcode::READLINK => Operation::Readlink,
            opcode::OPEN => Operation::Open(take(args)?),
            opcode::READ => Operation::Read(take(args)?),
            opcode::FLUSH => Operation::Flush(take(args)?),
            opcode::RELEASE => Operation::Release(take(args)?),
            opcode::OPENDIR => Operation::Opendir(take(args)?),
            opcode::READDIR => Operation::Readdir(take(args)?),
            opcode::READDIRPLUS => Operation::Readdirplus(take(args)?),
            opcode::RELEASEDIR => Operation::Releasedir(take(args)?),
            opcode::STATFS => Operation::Statfs,
            opcode::GETXATTR => {
                let getxattr = take::<abi::GetxattrIn>(args)?;
                Operation::Getxattr {
                    size: getxattr.size,
                    name: name(args)?,
                }
            }
            opcode::LISTXATTR => Operation::Listxattr {
                size: take::<abi::GetxattrIn>(args)?.size,
            },
            opcode::ACCESS => Operation::Access(take::<abi::AccessIn>(args)?.mask),
            opcode::INTERRUPT => {
                take::<abi::InterruptIn>(args)?;
                Operation::Interrupt
            }
            opcode::NOTIFY_REPLY => Operation::NotifyReply,
            opcode::SETATTR
            | opcode::SYMLINK
            | opcode::MKNOD
            | opcode::MKDIR
            | opcode::UNLINK
            | opcode::RMDIR
            | opcode::RENAME
            | opcode::RENAME2
            | opcode::LINK
            | opcode::WRITE
            | opcode::CREATE
            | opcode::SETXATTR
            | opcode::REMOVEXATTR
            | opcode::FALLOCATE
            | opcode::TMPFILE
            | opcode::COPY_FILE_RANGE
            | opcode::COPY_FILE_RANGE_64 => Operation::Write,
            _ => Operation::Other,
        };
        Ok(Request { header, operation })
    }
}

/// Whether the kernel waits for an answer to a request with this opcode: FORGET, BATCH_FORGET,
/// INTERRUPT and NOTIFY_REPLY get none (an answer to them is an error the kernel logs).
pub(crate) fn expects_reply(opcode: u32) -> bool {
    !matches!(
        opcode,
        opcode::FORGET | opcode::BATCH_FORGET | opcode::INTERRUPT | opcode::NOTIFY_REPLY
    )
}
