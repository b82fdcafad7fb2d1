//! How much of a file the kernel's page cache holds, asked with cachestat(2) (Linux 6.5+).
//!
//! Not mmap(2) and mincore(2), as fincore(1) of util-linux 2.38 does: mapping a FUSE file
//! opened with FOPEN_DIRECT_IO (every open of a blob) first drops its page cache
//! (`invalidate_inode_pages2` in fuse_file_mmap), so that way always reads zero.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// cachestat(2)'s number: one table for every architecture since Linux 5.x's new calls.
const SYS_CACHESTAT: libc::c_long = 451;

/// `struct cachestat_range`: the bytes asked about (`len` 0: to the end of the file).
#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

/// `struct cachestat`: pages of the range in the page cache, and what state they are in.
#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// Bytes of `file` in the page cache (pages times the page size).
pub fn cached_bytes(file: &std::fs::File) -> io::Result<u64> {
    cached_bytes_of(file, 0, 0)
}

/// Bytes of `offset..offset + len` of `file` in the page cache (`len` 0: to the end).
pub fn cached_bytes_of(file: &impl AsFd, offset: u64, len: u64) -> io::Result<u64> {
    let range = CachestatRange { off: offset, len };
    let mut stat = Cachestat::default();
    // SAFETY: the descriptor is open for the call's duration (borrowed from `file`), `range`
    // and `stat` are live, properly aligned `#[repr(C)]` structs of the layout the kernel's
    // uapi gives them (five and two u64s); the kernel reads `range` and writes only `stat`.
    let done = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_fd().as_raw_fd(),
            &range as *const CachestatRange,
            &mut stat as *mut Cachestat,
            0u32,
        )
    };
    if done != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stat.nr_cache.saturating_mul(page_size()))
}

/// The page size the counts are in.
fn page_size() -> u64 {
    // SAFETY: sysconf reads a constant of the process; it has no memory arguments.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_file_read_is_cached_and_one_dropped_is_not() {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&vec![7u8; 1 << 20]).unwrap();
        file.sync_all().unwrap();
        rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).unwrap();
        let dropped = match cached_bytes(&file) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                eprintln!("SKIPPED: no cachestat(2) on this kernel");
                return;
            }
            Err(e) => panic!("cachestat: {e}"),
        };
        let mut back = Vec::new();
        std::io::Seek::rewind(&mut file).unwrap();
        file.read_to_end(&mut back).unwrap();
        let read = cached_bytes(&file).unwrap();
        assert!(dropped < 1 << 20, "{dropped} bytes cached after DONTNEED");
        assert_eq!(read, 1 << 20, "a file just read whole is cached whole");
    }
}
