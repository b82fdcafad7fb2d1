//! Whole blocks into EROFS's page cache.
//!
//! A random 4 KiB read of a file on the kernel path misses EROFS's page cache for that one page
//! (a "standalone small random read" gets no read-ahead), and EROFS asks the blob for those
//! 4 KiB alone. squashd decompresses the whole SquashFS block to answer, and the kernel's own
//! squashfs would keep every page of it (it widens a read to the block, `readahead_expand`):
//! without that, each of the block's 32 pages costs its own round trip to squashd.
//!
//! So after a random read of part of a block, squashd asks the kernel to read the rest of the
//! block ahead on the EROFS file itself: `posix_fadvise(WILLNEED)` on a descriptor of the file
//! opened by its file handle (EROFS encodes the nid, which the translation knows). EROFS then
//! reads those pages from the blob, which squashd answers from the block it just left in its
//! data cache; the data lives once, in EROFS's page cache, as with the kernel's squashfs. The
//! read-ahead does not wait for the data: EROFS reads the blob with direct I/O, which FUSE sends
//! as asynchronous requests (FUSE_ASYNC_DIO), answered by the other request threads.
//!
//! A file read at random also gets other blocks brought in beside the reader, on idle cores
//! ([`crate::blob_sweep`]): once a sweep worker has decompressed one, the reader's next fill
//! asks EROFS for it on a descriptor of its file too, skipping blocks EROFS's page cache holds
//! whole (cachestat(2)), and its reads are answered from the data cache at once.
//!
//! The descriptor is opened and closed before the read that asked for the fill is answered.
//! The reader is then inside a read of a file of the mount, which keeps the mount busy anyway:
//! the fill never makes an `umount` fail (EBUSY) that would otherwise succeed. Nothing of the
//! mount is held between fills, not even its root.

use rustix::fs::{Advice, OFlags};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// `FILEID_INO32_GEN`: a 32-bit inode number and a generation (`generic_encode_ino32_fh`), the
/// handles EROFS gave before it encoded 64-bit nids.
const FILEID_INO32_GEN: i32 = 1;

/// `FILEID_INO64_GEN`: a 64-bit inode number (high word first) and a generation, the handles
/// EROFS gives on Linux 6.18.
const FILEID_INO64_GEN: i32 = 0x81;

/// The largest piece one `posix_fadvise(WILLNEED)` reads: the kernel caps a forced read-ahead
/// at the file's read-ahead window (128 KiB by default), so a larger block is asked for in
/// pieces of this size.
const ADVICE_PIECE: u64 = 128 << 10;

/// Blocks being filled, remembered so that the blob reads the fill causes are told apart from
/// readers' reads: a fill's read is not a reader seeking or streaming.
const RECENT: usize = 64;

/// How long a block is taken as being filled: the fill's reads arrive within microseconds of
/// the advice (on a loaded machine, milliseconds). A reader's read of the block meanwhile is
/// rare (its pages are cached, or being read for the fill, which the reader waits for) and
/// costs only the read-ahead it might have asked for.
const FILL_MS: u64 = 2000;

/// How file handles of the mounted EROFS are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HandleKind {
    Ino32 { generation: u32 },
    Ino64 { generation: u32 },
}

/// The EROFS mount a blob's files are read through.
#[derive(Debug)]
struct Mounted {
    /// Where it is mounted, as the daemon sees it.
    mountpoint: PathBuf,
    /// Its device number: the path must still lead to it when a fill opens it.
    dev: u64,
    handles: HandleKind,
}

/// Fills EROFS's page cache with the rest of blocks read in part.
#[derive(Debug)]
pub struct BlockFill {
    /// Where the mount is and what it was made from, once mounted.
    target: OnceLock<(PathBuf, PathBuf)>,
    /// The mount, once looked up (None: it cannot be used).
    mounted: OnceLock<Option<Mounted>>,
    /// `block + 1` of the last [`RECENT`] fills, a ring written at `next` (0: none). A ring,
    /// not a table indexed by the block: the blocks filled are the first 4 KiB blocks of
    /// SquashFS blocks (32 apart for 128 KiB blocks), which `block % RECENT` gave two slots, so
    /// a fill whose reads arrived after the next fill took its slot had them taken for a
    /// reader's, and filled again.
    recent: [AtomicU64; RECENT],
    /// When each recent fill stops counting, in ms since `epoch`.
    until: [AtomicU64; RECENT],
    /// Where the next fill is written in `recent`.
    next: AtomicUsize,
    epoch: Instant,
    fills: AtomicU64,
    filled_bytes: AtomicU64,
    failures: AtomicU64,
}

impl Default for BlockFill {
    fn default() -> Self {
        BlockFill {
            target: OnceLock::new(),
            mounted: OnceLock::new(),
            recent: std::array::from_fn(|_| AtomicU64::new(0)),
            until: std::array::from_fn(|_| AtomicU64::new(0)),
            next: AtomicUsize::new(0),
            epoch: Instant::now(),
            fills: AtomicU64::new(0),
            filled_bytes: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        }
    }
}

/// What the fills did, for `status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FillStats {
    /// Blocks asked of EROFS: the rest of those readers read in part, and those swept beside
    /// them.
    pub fills: u64,
    /// Bytes asked for (the pages EROFS already had are not read again).
    pub filled_bytes: u64,
    /// Fills that could not be asked for (the mount moved, or cannot be used: see the log).
    pub failures: u64,
}

impl BlockFill {
    /// Fills nothing until [`BlockFill::attach`] names the mount.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fills go to the EROFS mount on `mountpoint` from now on: the one made from the metadata
    /// image `source` (a file of the blob file system). Cheap: the mount is looked up on the
    /// first fill (a mount that is never read at random costs nothing; mounting 69 images at
    /// boot reads /proc/self/mountinfo no more often).
    pub fn attach(&self, mountpoint: &Path, source: &Path) {
        let _ = self
            .target
            .set((mountpoint.to_path_buf(), source.to_path_buf()));
    }

    /// The mount fills go to, looked up once; None until [`BlockFill::attach`], or when it
    /// cannot be used (said once, in the log).
    fn mounted(&self) -> Option<&Mounted> {
        let (mountpoint, source) = self.target.get()?;
        self.mounted
            .get_or_init(|| match find_mount(mountpoint, source) {
                Ok(mounted) => Some(mounted),
                Err(e) => {
                    tracing::warn!(
                        "random reads of {} fill no whole blocks: {e}",
                        mountpoint.display()
                    );
                    None
                }
            })
            .as_ref()
    }

    /// Whether blob block `block` (the first 4 KiB block of a SquashFS block in the blob) is
    /// being filled: a read of it now is the fill's.
    pub fn is_filling(&self, block: u64) -> bool {
        let now = self.now_ms();
        self.recent.iter().zip(&self.until).any(|(recent, until)| {
            recent.load(Ordering::Acquire) == block + 1 && now < until.load(Ordering::Acquire)
        })
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The file with nid `nid` of the mount, opened to fill blocks of it; None (counted in
    /// [`FillStats::failures`]) when the mount is not attached, moved, or cannot be used.
    pub fn open(&self, nid: u64) -> Option<FillFile<'_>> {
        self.target.get()?;
        let opened = self.mounted().map(|mounted| open_file(mounted, nid));
        match opened {
            Some(Ok(file)) => Some(FillFile { fill: self, file }),
            _ => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Remembers that blob block `block` is being filled, for [`BlockFill::is_filling`].
    fn remember(&self, block: u64) {
        let slot = self.next.fetch_add(1, Ordering::Relaxed) % RECENT;
        self.recent[slot].store(block + 1, Ordering::Release);
        self.until[slot].store(self.now_ms() + FILL_MS, Ordering::Release);
    }

    /// What the fills did so far.
    pub fn stats(&self) -> FillStats {
        FillStats {
            fills: self.fills.load(Ordering::Relaxed),
            filled_bytes: self.filled_bytes.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
        }
    }
}

/// A file of the EROFS mount opened for fills (see [`BlockFill::open`]); closed when dropped,
/// which must be before the read that asked for it is answered.
#[derive(Debug)]
pub struct FillFile<'a> {
    fill: &'a BlockFill,
    file: OwnedFd,
}

impl FillFile<'_> {
    /// Asks EROFS to read bytes `offset..offset + len` of the file ahead: blob block `block`
    /// (its first 4 KiB block), whose reads are then told from readers' reads
    /// ([`BlockFill::is_filling`]). Returns whether it could be asked.
    pub fn fill(&self, block: u64, offset: u64, len: u64) -> bool {
        self.fill.remember(block);
        if advise(&self.file, offset, len).is_ok() {
            self.fill.fills.fetch_add(1, Ordering::Relaxed);
            self.fill.filled_bytes.fetch_add(len, Ordering::Relaxed);
            true
        } else {
            self.fill.failures.fetch_add(1, Ordering::Relaxed);
            false
        }
    }

    /// Whether EROFS's page cache holds every page of bytes `offset..offset + len` of the file
    /// (cachestat(2)); false when it cannot be told.
    pub fn holds(&self, offset: u64, len: u64) -> bool {
        cached_whole(&self.file, offset, len)
    }
}

/// The EROFS mount on `mountpoint` made from the metadata image `source`: found in
/// /proc/self/mountinfo by its source (a name of the blob file system no other mount has), so
/// that a path that leads elsewhere (over-mounted since, or swapped) is never taken for it.
/// Fails when it is not there, when its file handles are of a kind not known here, or when
/// files cannot be opened by handle (that takes CAP_DAC_READ_SEARCH).
fn find_mount(mountpoint: &Path, source: &Path) -> std::io::Result<Mounted> {
    let dev = erofs_dev(source)?;
    let root = rustix::fs::open(
        mountpoint,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let stat = rustix::fs::fstat(&root)?;
    if stat.st_dev != dev {
        return Err(std::io::Error::other(format!(
            "{} is not the EROFS mount of {}",
            mountpoint.display(),
            source.display()
        )));
    }
    let handles = root_handle_kind(&root, stat.st_ino)
        .ok_or_else(|| std::io::Error::other("EROFS file handles of an unknown kind"))?;
    open_by_nid(&root, handles, stat.st_ino)
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot open files by handle: {e}")))?;
    Ok(Mounted {
        mountpoint: mountpoint.to_path_buf(),
        dev,
        handles,
    })
}

/// The device number of the EROFS mount whose source is `source`, from /proc/self/mountinfo
/// (`ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [TAGS...] - TYPE SOURCE SUPER_OPTIONS`).
fn erofs_dev(source: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let table = std::fs::read("/proc/self/mountinfo")?;
    let wanted = source.as_os_str().as_bytes();
    for line in table.split(|&b| b == b'\n') {
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == b"-") else {
            continue;
        };
        if fields.get(dash + 1) != Some(&&b"erofs"[..]) || fields.get(dash + 2) != Some(&wanted) {
            continue;
        }
        let number = |s: &[u8]| std::str::from_utf8(s).ok()?.parse::<u32>().ok();
        let dev = fields.get(2).and_then(|f| {
            let colon = f.iter().position(|&b| b == b':')?;
            Some(rustix::fs::makedev(
                number(&f[..colon])?,
                number(&f[colon + 1..])?,
            ))
        });
        if let Some(dev) = dev {
            return Ok(dev);
        }
    }
    Err(std::io::Error::other(format!(
        "no EROFS mount of {} in /proc/self/mountinfo",
        source.display()
    )))
}

/// Opens the file `nid` of the mount, if the mount is still where it was.
fn open_file(mounted: &Mounted, nid: u64) -> std::io::Result<OwnedFd> {
    // Not O_PATH: open_by_handle_at(2) refuses such a descriptor (EBADF).
    let root = rustix::fs::open(
        &mounted.mountpoint,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    if rustix::fs::fstat(&root)?.st_dev != mounted.dev {
        return Err(std::io::ErrorKind::NotFound.into());
    }
    open_by_nid(&root, mounted.handles, nid)
}

/// Advises the kernel to read `offset..offset + len` of `file`.
fn advise(file: &OwnedFd, offset: u64, len: u64) -> std::io::Result<()> {
    let end = offset.saturating_add(len);
    let mut at = offset;
    while at < end {
        let piece = (end - at).min(ADVICE_PIECE);
        let Some(piece) = std::num::NonZeroU64::new(piece) else {
            break;
        };
        rustix::fs::fadvise(file, at, Some(piece), Advice::WillNeed)?;
        at += piece.get();
    }
    Ok(())
}

/// Whether every page of `offset..offset + len` of `file` is in the page cache (cachestat(2),
/// a count, without mapping the file); false when it cannot be told.
fn cached_whole(file: &OwnedFd, offset: u64, len: u64) -> bool {
    crate::page_cache::cached_bytes_of(file, offset, len).is_ok_and(|cached| cached >= len)
}

/// A file handle as `name_to_handle_at(2)` and `open_by_handle_at(2)` take it, with room for
/// the handles EROFS gives (and for any other kind, up to MAX_HANDLE_SZ, when probing).
#[repr(C)]
struct Handle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; 128],
}

/// The kind of handle the mount gives its root (inode number `ino`), if one known here.
fn root_handle_kind(root: &OwnedFd, ino: u64) -> Option<HandleKind> {
    let mut handle = Handle {
        handle_bytes: 128,
        handle_type: 0,
        f_handle: [0; 128],
    };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: `root` is an open descriptor, the path is a NUL-terminated empty string (with
    // AT_EMPTY_PATH: the descriptor itself), `handle` is a `struct file_handle` header followed
    // by the 128 bytes its `handle_bytes` announces, and `mount_id` is a valid c_int: the
    // kernel writes only within them.
    let done = unsafe {
        libc::name_to_handle_at(
            root.as_raw_fd(),
            c"".as_ptr(),
            (&mut handle as *mut Handle).cast::<libc::file_handle>(),
            &mut mount_id,
            libc::AT_EMPTY_PATH,
        )
    };
    if done != 0 {
        return None;
    }
    let word = |i: usize| {
        handle
            .f_handle
            .get(i * 4..i * 4 + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_ne_bytes)
    };
    match (handle.handle_type, handle.handle_bytes) {
        (FILEID_INO32_GEN, 8) if u64::from(word(0)?) == ino => Some(HandleKind::Ino32 {
            generation: word(1)?,
        }),
        (FILEID_INO64_GEN, 12) if (u64::from(word(0)?) << 32 | u64::from(word(1)?)) == ino => {
            Some(HandleKind::Ino64 {
                generation: word(2)?,
            })
        }
        _ => None,
    }
}

/// Opens file `nid` of the mount `root` is the root of, read-only.
fn open_by_nid(root: &OwnedFd, kind: HandleKind, nid: u64) -> std::io::Result<OwnedFd> {
    let mut handle = Handle {
        handle_bytes: 0,
        handle_type: 0,
        f_handle: [0; 128],
    };
    let words: &[u32] = match kind {
        HandleKind::Ino32 { generation } => {
            let ino = u32::try_from(nid).map_err(|_| std::io::ErrorKind::InvalidInput)?;
            handle.handle_type = FILEID_INO32_GEN;
            &[ino, generation]
        }
        HandleKind::Ino64 { generation } => {
            handle.handle_type = FILEID_INO64_GEN;
            &[(nid >> 32) as u32, nid as u32, generation]
        }
    };
    for (i, w) in words.iter().enumerate() {
        handle.f_handle[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
    }
    handle.handle_bytes = (words.len() * 4) as u32;
    // SAFETY: `root` is an open descriptor of the mount, and `handle` is a `struct file_handle`
    // header followed by at least the `handle_bytes` bytes it announces; the kernel only reads
    // it. The descriptor returned, if any, is new and owned by nothing else.
    let fd = unsafe {
        libc::open_by_handle_at(
            root.as_raw_fd(),
            (&mut handle as *mut Handle).cast::<libc::file_handle>(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_fills_are_all_remembered() {
        let fill = BlockFill::new();
        // 64 fills of blocks 32 blob blocks apart (128 KiB SquashFS blocks), of which a table
        // indexed by `block % 64` remembered two.
        for i in 0..RECENT as u64 {
            fill.remember(i * 32);
        }
        let remembered = (0..RECENT as u64)
            .filter(|i| fill.is_filling(i * 32))
            .count();
        assert_eq!(remembered, RECENT);
        assert!(!fill.is_filling(RECENT as u64 * 32));
    }
}
