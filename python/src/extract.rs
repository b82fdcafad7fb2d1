//! `Image.extract`: part of an image written into a directory, safely, whatever the image holds.
//!
//! The CLI's extraction lives in the `squashd` binary, which is not a library; this is the same
//! design in a smaller form. Nothing is ever written outside `dest`:
//! - names are checked (one component, not "." or "..") before they are joined, and `..` in the
//!   path asked for is refused;
//! - every directory is reached from `dest`'s descriptor with `openat2(RESOLVE_BENEATH |
//!   RESOLVE_NO_SYMLINKS)`, so no lookup passes through a symlink or leaves `dest`;
//! - files are created with `O_CREAT | O_EXCL | O_NOFOLLOW`: a name that exists (a duplicate in
//!   a hostile image, anything already in `dest`) is never written through;
//! - the image's symlinks are made after every directory and file, and hard links last.
//!
//! Directories get their modes and times last, deepest first, so that a read-only directory does
//! not stop what goes inside it. Owners are set (and device nodes made) only as root; extended
//! attributes the destination refuses are counted and skipped.

use crate::errors::{OpError, OpResult};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rustix::fs::{
    chmodat, chownat, fchmod, fchown, fsetxattr, futimens, linkat, mkdirat, mknodat, openat,
    openat2, symlinkat, utimensat, AtFlags, FileType, Gid, Mode, OFlags, ResolveFlags, Timestamps,
    Uid, XattrFlags, CWD,
};
use rustix::io::Errno;
use squashd_core::{ChunkRead, FileKind, Image, Inode, InodeId};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Counts of what an extraction made and skipped.
#[derive(Debug, Default)]
pub struct Report {
    dirs: u64,
    files: u64,
    symlinks: u64,
    specials: u64,
    hard_links: u64,
    bytes: AtomicU64,
    xattrs_skipped: AtomicU64,
    devices_skipped: u64,
}

impl Report {
    /// The counts as a dict.
    pub fn into_dict(self, py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("dirs", self.dirs)?;
        d.set_item("files", self.files)?;
        d.set_item("symlinks", self.symlinks)?;
        d.set_item("specials", self.specials)?;
        d.set_item("hard_links", self.hard_links)?;
        d.set_item("bytes", self.bytes.into_inner())?;
        d.set_item("xattrs_skipped", self.xattrs_skipped.into_inner())?;
        d.set_item("devices_skipped", self.devices_skipped)?;
        Ok(d)
    }
}

/// Something to make, at `rel` (a path relative to `dest`, checked names joined with '/').
struct Job {
    rel: Vec<u8>,
    inode: Inode,
}

/// An extraction under way.
struct Extraction<'a> {
    image: &'a Image,
    dest: OwnedFd,
    dest_name: String,
    as_root: bool,
    report: Report,
}

/// Extracts `path` of `image` (everything when it is empty or "/") into `dest`, created if
/// missing; what the image holds goes under the same relative path in `dest`.
pub fn extract(image: &Image, path: &[u8], dest: &Path) -> OpResult<Report> {
    let mut names = Vec::new();
    for c in crate::resolve::components(path) {
        if c == b".." {
            return Err(OpError::Errno(
                libc::EINVAL,
                "'..' is not allowed in paths to extract".into(),
            ));
        }
        names.push(c);
    }
    // The path is looked up as the CLI does: no symlink followed, so what is extracted is what
    // lies at that path in the image.
    let mut leading = Vec::new();
    let mut node = image.root()?;
    for (i, name) in names.iter().enumerate() {
        let entry = image
            .lookup(&node, name)?
            .ok_or_else(|| OpError::errno(libc::ENOENT))?;
        let inode = image.inode(entry.id)?;
        if i + 1 < names.len() && !inode.is_dir() {
            return Err(OpError::errno(libc::ENOTDIR));
        }
        leading.push(std::mem::replace(&mut node, inode));
    }
    let dest_name = dest.display().to_string();
    let created_dest = match std::fs::create_dir(dest) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
        Err(e) => {
            let errno = Errno::from_io_error(&e).unwrap_or(Errno::IO);
            return Err(io_error(&dest_name, "cannot create", errno));
        }
    };
    let dest_fd = openat(
        CWD,
        dest,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_error(&dest_name, "cannot open", e))?;
    let mut x = Extraction {
        image,
        dest: dest_fd,
        dest_name,
        as_root: rustix::process::geteuid().is_root(),
        report: Report::default(),
    };
    let mut finish = Vec::new();
    if created_dest {
        finish.push(Job {
            rel: Vec::new(),
            inode: leading.first().cloned().unwrap_or_else(|| node.clone()),
        });
    }
    // The directories leading to the path, made where missing; the path's own entry last.
    let mut rel = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let parent = rel.clone();
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(name);
        if i + 1 == names.len() {
            let mut plan = Plan::default();
            plan.add(Job {
                rel: rel.clone(),
                inode: node.clone(),
            });
            return x.run(plan, finish);
        }
        match mkdirat(x.open_dir(&parent)?, *name, Mode::from_raw_mode(0o700)) {
            Ok(()) => finish.push(Job {
                rel: rel.clone(),
                inode: leading[i + 1].clone(),
            }),
            Err(Errno::EXIST) => {}
            Err(e) => return Err(x.fail(&rel, "cannot create", e)),
        }
    }
    // The whole image: its root's entries go straight into `dest`.
    let mut plan = Plan::default();
    x.list(&mut plan, &[], &node)?;
    x.run(plan, finish)
}

/// What to make, by kind, in the order that keeps extraction safe.
#[derive(Default)]
struct Plan {
    /// Directories, parents first; each is made when listed.
    dirs: Vec<Job>,
    /// Directories still to list.
    to_list: Vec<Job>,
    files: Vec<Job>,
    symlinks: Vec<Job>,
    specials: Vec<Job>,
    /// (new name, existing name) of further names of an inode.
    hard_links: Vec<(Vec<u8>, Vec<u8>)>,
    first_name: HashMap<InodeId, Vec<u8>>,
}

impl Plan {
    fn add(&mut self, job: Job) {
        if job.inode.kind == FileKind::Directory {
            self.to_list.push(job);
            return;
        }
        if job.inode.nlink > 1 {
            if let Some(existing) = self.first_name.get(&job.inode.id) {
                self.hard_links.push((job.rel, existing.clone()));
                return;
            }
            self.first_name.insert(job.inode.id, job.rel.clone());
        }
        match job.inode.kind {
            FileKind::File => self.files.push(job),
            FileKind::Symlink => self.symlinks.push(job),
            _ => self.specials.push(job),
        }
    }
}

/// The parent of `rel` and the last name in it.
fn split(rel: &[u8]) -> (&[u8], &[u8]) {
    match rel.iter().rposition(|&b| b == b'/') {
        Some(at) => (&rel[..at], &rel[at + 1..]),
        None => (&[], rel),
    }
}

/// The error for `what` failing on `path`, with the operating system's errno.
fn io_error(path: &str, what: &str, e: Errno) -> OpError {
    let io = std::io::Error::from(e);
    OpError::Errno(e.raw_os_error(), format!("{path}: {what}: {io}"))
}

impl Extraction<'_> {
    fn fail(&self, rel: &[u8], what: &str, e: Errno) -> OpError {
        let path = format!("{}/{}", self.dest_name, String::from_utf8_lossy(rel));
        io_error(&path, what, e)
    }

    /// The directory `rel` under `dest`, opened without following any symlink or leaving it.
    fn open_dir(&self, rel: &[u8]) -> OpResult<OwnedFd> {
        let path: &[u8] = if rel.is_empty() { b"." } else { rel };
        openat2(
            &self.dest,
            std::ffi::OsStr::from_bytes(path),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
        )
        .map_err(|e| self.fail(rel, "cannot open", e))
    }

    /// Makes the directories below `dir` (at `rel`) and plans everything else in them.
    fn list(&mut self, plan: &mut Plan, rel: &[u8], dir: &Inode) -> OpResult<()> {
        let mut seen = HashSet::from([dir.id]);
        let mut pending = vec![(rel.to_vec(), dir.clone())];
        while let Some((rel, dir)) = pending.pop() {
            let fd = self.open_dir(&rel)?;
            for (entry, inode) in self.image.read_dir_plus(&dir)? {
                check_name(&entry.name)?;
                let mut child = rel.clone();
                if !child.is_empty() {
                    child.push(b'/');
                }
                child.extend_from_slice(&entry.name);
                if inode.is_dir() {
                    if !seen.insert(inode.id) {
                        return Err(OpError::Errno(
                            libc::EIO,
                            format!(
                                "corrupt image: directory inode {} is reached twice",
                                inode.number
                            ),
                        ));
                    }
                    mkdirat(&fd, entry.name.as_slice(), Mode::from_raw_mode(0o700))
                        .map_err(|e| self.fail(&child, "cannot create", e))?;
                    self.report.dirs += 1;
                    plan.dirs.push(Job {
                        rel: child.clone(),
                        inode: inode.clone(),
                    });
                    pending.push((child, inode));
                } else {
                    plan.add(Job { rel: child, inode });
                }
            }
        }
        Ok(())
    }

    /// Makes what `plan` lists (its directories listed first), then gives the directories in
    /// `finish` and the plan's their attributes, deepest first.
    fn run(mut self, mut plan: Plan, mut finish: Vec<Job>) -> OpResult<Report> {
        for job in std::mem::take(&mut plan.to_list) {
            let (parent, name) = split(&job.rel);
            if !job.rel.is_empty() {
                mkdirat(self.open_dir(parent)?, name, Mode::from_raw_mode(0o700))
                    .map_err(|e| self.fail(&job.rel, "cannot create", e))?;
                self.report.dirs += 1;
            }
            let inode = job.inode.clone();
            self.list(&mut plan, &job.rel, &inode)?;
            finish.push(job);
        }
        self.write_files(&mut plan.files)?;
        for job in &plan.specials {
            self.make_special(job)?;
        }
        for job in &plan.symlinks {
            self.make_symlink(job)?;
        }
        for (new, existing) in &plan.hard_links {
            let (old_dir, old_name) = split(existing);
            let (new_dir, new_name) = split(new);
            linkat(
                self.open_dir(old_dir)?,
                old_name,
                self.open_dir(new_dir)?,
                new_name,
                AtFlags::empty(),
            )
            .map_err(|e| self.fail(new, "cannot link", e))?;
            self.report.hard_links += 1;
        }
        finish.extend(plan.dirs);
        for job in finish.iter().rev() {
            let fd = self.open_dir(&job.rel)?;
            self.set_attributes(&fd, &job.rel, &job.inode)?;
        }
        Ok(self.report)
    }

    /// Writes the regular files, in the order of their data in the image (which is then read
    /// front to back), on as many threads as there are cores.
    fn write_files(&mut self, files: &mut [Job]) -> OpResult<()> {
        let image = self.image;
        files.sort_by_key(|job| image.data_position(&job.inode).unwrap_or(u64::MAX));
        self.report.files = files.len() as u64;
        let next = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        let first_error = Mutex::new(None);
        let this = &*self;
        std::thread::scope(|scope| {
            for _ in 0..squashd_core::cores().max(1) {
                let work = || {
                    let mut buf = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let Some(job) = files.get(next.fetch_add(1, Ordering::Relaxed)) else {
                            break;
                        };
                        if let Err(e) = this.write_file(job, &mut buf) {
                            stop.store(true, Ordering::Relaxed);
                            first_error
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .get_or_insert(e);
                        }
                    }
                };
                if std::thread::Builder::new()
                    .spawn_scoped(scope, work)
                    .is_err()
                {
                    // No thread to spare: this one writes what is left.
                    work();
                }
            }
        });
        match first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Creates file `job` and writes its contents (holes left as holes) and attributes.
    fn write_file(&self, job: &Job, buf: &mut Vec<u8>) -> OpResult<()> {
        let (parent, name) = split(&job.rel);
        let dir = self.open_dir(parent)?;
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = openat(&dir, name, flags, Mode::from_raw_mode(0o600))
            .map_err(|e| self.fail(&job.rel, "cannot create", e))?;
        let file = File::from(fd);
        let reader = self.image.open_file(&job.inode)?;
        let write_error = |e: std::io::Error| {
            self.fail(
                &job.rel,
                "cannot write",
                Errno::from_io_error(&e).unwrap_or(Errno::IO),
            )
        };
        let mut at = 0u64;
        for index in 0..reader.chunk_count() {
            let len = match reader.read_chunk_into(index, buf)? {
                ChunkRead::Hole(len) => len,
                ChunkRead::Data => {
                    file.write_all_at(buf, at).map_err(write_error)?;
                    buf.len()
                }
                ChunkRead::Cached(chunk) => {
                    file.write_all_at(chunk.bytes(), at).map_err(write_error)?;
                    chunk.len()
                }
            };
            at += len as u64;
        }
        // A file that ends in a hole gets its length here.
        file.set_len(reader.size()).map_err(write_error)?;
        self.report
            .bytes
            .fetch_add(reader.size(), Ordering::Relaxed);
        self.set_attributes(file.as_fd(), &job.rel, &job.inode)
    }

    /// Owner (as root), mode, extended attributes and time of the file or directory `fd`.
    fn set_attributes(&self, fd: impl AsFd, rel: &[u8], inode: &Inode) -> OpResult<()> {
        let fd = fd.as_fd();
        if self.as_root {
            fchown(
                fd,
                Some(Uid::from_raw(inode.uid)),
                Some(Gid::from_raw(inode.gid)),
            )
            .map_err(|e| self.fail(rel, "cannot set the owner of", e))?;
        }
        // After the owner: chown clears the set-user-id bit.
        fchmod(fd, Mode::from_raw_mode(inode.permissions.into()))
            .map_err(|e| self.fail(rel, "cannot set the mode of", e))?;
        for xattr in self.image.xattrs(inode)? {
            match fsetxattr(fd, xattr.name.as_slice(), &xattr.value, XattrFlags::empty()) {
                Ok(()) => {}
                Err(Errno::PERM | Errno::NOTSUP | Errno::ACCESS) => {
                    self.report.xattrs_skipped.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => return Err(self.fail(rel, "cannot set an extended attribute of", e)),
            }
        }
        futimens(fd, &times(inode)).map_err(|e| self.fail(rel, "cannot set the time of", e))
    }

    /// Makes symlink `job`, with its owner (as root) and time.
    fn make_symlink(&mut self, job: &Job) -> OpResult<()> {
        let (parent, name) = split(&job.rel);
        let dir = self.open_dir(parent)?;
        let target = job.inode.symlink_target().unwrap_or_default();
        symlinkat(std::ffi::OsStr::from_bytes(target), &dir, name)
            .map_err(|e| self.fail(&job.rel, "cannot create", e))?;
        if self.as_root {
            chownat(
                &dir,
                name,
                Some(Uid::from_raw(job.inode.uid)),
                Some(Gid::from_raw(job.inode.gid)),
                AtFlags::SYMLINK_NOFOLLOW,
            )
            .map_err(|e| self.fail(&job.rel, "cannot set the owner of", e))?;
        }
        utimensat(&dir, name, &times(&job.inode), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| self.fail(&job.rel, "cannot set the time of", e))?;
        self.report.symlinks += 1;
        Ok(())
    }

    /// Makes fifo, socket or (as root) device node `job`.
    fn make_special(&mut self, job: &Job) -> OpResult<()> {
        let inode = &job.inode;
        let file_type = match inode.kind {
            FileKind::CharDevice => FileType::CharacterDevice,
            FileKind::BlockDevice => FileType::BlockDevice,
            FileKind::Fifo => FileType::Fifo,
            FileKind::Socket => FileType::Socket,
            _ => return Ok(()),
        };
        let is_device = matches!(file_type, FileType::CharacterDevice | FileType::BlockDevice);
        if is_device && !self.as_root {
            self.report.devices_skipped += 1;
            return Ok(());
        }
        let (parent, name) = split(&job.rel);
        let dir = self.open_dir(parent)?;
        mknodat(
            &dir,
            name,
            file_type,
            Mode::from_raw_mode(0o600),
            inode.rdev_linux(),
        )
        .map_err(|e| self.fail(&job.rel, "cannot create", e))?;
        // By name: the node was just made (O_EXCL-like: mknod fails on a name that exists), and
        // a fifo cannot be opened without blocking for a writer.
        if self.as_root {
            let (uid, gid) = (Uid::from_raw(inode.uid), Gid::from_raw(inode.gid));
            chownat(&dir, name, Some(uid), Some(gid), AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|e| self.fail(&job.rel, "cannot set the owner of", e))?;
        }
        let mode = Mode::from_raw_mode(inode.permissions.into());
        chmodat(&dir, name, mode, AtFlags::empty())
            .map_err(|e| self.fail(&job.rel, "cannot set the mode of", e))?;
        utimensat(&dir, name, &times(inode), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| self.fail(&job.rel, "cannot set the time of", e))?;
        self.report.specials += 1;
        Ok(())
    }
}

/// Access and modification times both the inode's modification time.
fn times(inode: &Inode) -> Timestamps {
    let t = rustix::fs::Timespec {
        tv_sec: inode.mtime.into(),
        tv_nsec: 0,
    };
    Timestamps {
        last_access: t,
        last_modification: t,
    }
}

/// A name that is safe to join to a path: one component, not "." or "..". The library refuses
/// such names already; this keeps extraction safe should it ever not.
fn check_name(name: &[u8]) -> OpResult<()> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(OpError::Errno(
            libc::EIO,
            format!(
                "corrupt image: unsafe name {:?} in a directory",
                String::from_utf8_lossy(name)
            ),
        ));
    }
    Ok(())
}
