//! Writing regular files: contents (sparse where the image has holes), then owner, xattrs,
//! mode and times, on many threads through [`queue`](super::queue).
//!
//! The work is one list of pieces in image order: a small file is one piece, a large one is cut
//! into ranges of [`SPLIT_CHUNKS`] chunks so that one large file keeps every thread busy. The
//! first piece of a file to run creates it, the last one to finish sets its size and attributes.

use super::plan::Job;
use super::queue;
use super::write::{io_context, Writer};
use squashd_core::{ChunkRead, FileReader};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Bytes gathered before a write: fewer, larger writes when blocks are small.
const WRITE_BUFFER: usize = 1 << 20;
/// Files of more chunks than this are split among threads.
const SPLIT_CHUNKS: u64 = 32;

/// One unit of work: chunks `first..end` of file `file`; `split` indexes its shared state when
/// the file is cut into several pieces.
struct Piece {
    file: u32,
    first: u64,
    end: u64,
    split: Option<u32>,
}

/// A file being written by several pieces at once.
#[derive(Default)]
struct Split {
    /// Created by whichever piece runs first.
    open: Mutex<Option<Arc<OpenedFile>>>,
    /// Pieces not finished yet: the one that brings this to zero finishes the file.
    left: AtomicU64,
    /// Whether some piece skipped a hole.
    holes: AtomicBool,
}

/// A destination file, created, and the image file it is filled from.
struct OpenedFile {
    file: File,
    reader: FileReader,
    /// The mode it was created with, when that is not the final one.
    chmod: bool,
}

/// Buffers one thread reuses from piece to piece.
#[derive(Default)]
struct Scratch {
    /// One decompressed block.
    block: Vec<u8>,
    /// Consecutive small blocks gathered into one write.
    gather: Vec<u8>,
}

impl Writer<'_> {
    /// Writes the regular files, in parallel, in the order given (image order).
    pub fn write_files(&self, files: &[Job], threads: usize) -> anyhow::Result<()> {
        let bs = self.image.superblock().block_size as u64;
        let mut pieces = Vec::with_capacity(files.len());
        let mut splits: Vec<Split> = Vec::new();
        for (i, job) in files.iter().enumerate() {
            let count = job.inode.size.div_ceil(bs);
            if count <= SPLIT_CHUNKS {
                pieces.push(Piece {
                    file: i as u32,
                    first: 0,
                    end: count,
                    split: None,
                });
                continue;
            }
            let split = splits.len() as u32;
            let n = count.div_ceil(SPLIT_CHUNKS);
            splits.push(Split {
                left: AtomicU64::new(n),
                ..Split::default()
            });
            for first in (0..count).step_by(SPLIT_CHUNKS as usize) {
                pieces.push(Piece {
                    file: i as u32,
                    first,
                    end: (first + SPLIT_CHUNKS).min(count),
                    split: Some(split),
                });
            }
        }
        queue::run(threads, &pieces, Scratch::default, |scratch, piece| {
            let job = &files[piece.file as usize];
            match piece.split {
                None => {
                    let opened = self.create(job)?;
                    let holes = self.write_range(&opened, job, piece, scratch)?;
                    self.complete(&opened, job, holes)
                }
                Some(s) => {
                    let split = &splits[s as usize];
                    let opened = {
                        let mut open = split.open.lock().unwrap_or_else(|p| p.into_inner());
                        match &*open {
                            Some(opened) => opened.clone(),
                            None => open.insert(Arc::new(self.create(job)?)).clone(),
                        }
                    };
                    if self.write_range(&opened, job, piece, scratch)? {
                        split.holes.store(true, Ordering::Relaxed);
                    }
                    if split.left.fetch_sub(1, Ordering::AcqRel) == 1 {
                        split.open.lock().unwrap_or_else(|p| p.into_inner()).take();
                        self.complete(&opened, job, split.holes.load(Ordering::Relaxed))?;
                    }
                    Ok(())
                }
            }
        })
    }

    /// Creates the destination file of `job` and opens its image file.
    fn create(&self, job: &Job) -> anyhow::Result<OpenedFile> {
        let path = &job.path;
        self.clear(path)?;
        // Created with its final permissions (the umask is 0) when nothing needs them later:
        // saves a chmod per file. Special bits must follow the chown, and a non-root user
        // needs write permission to set xattrs.
        let perms = job.inode.permissions as u32;
        let create_mode = if perms & 0o7000 == 0 && (self.as_root || perms & 0o200 != 0) {
            perms
        } else {
            0o600
        };
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(create_mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| io_context(e, "cannot create", path))?;
        Ok(OpenedFile {
            file,
            reader: self.image.open_file(&job.inode)?,
            chmod: create_mode != perms,
        })
    }

    /// Writes chunks `piece.first..piece.end`; whether it skipped a hole.
    fn write_range(
        &self,
        opened: &OpenedFile,
        job: &Job,
        piece: &Piece,
        scratch: &mut Scratch,
    ) -> anyhow::Result<bool> {
        let path = &job.path;
        let reader = &opened.reader;
        let bs = reader.block_size() as u64;
        let Scratch { block, gather } = scratch;
        let mut pending = PendingWrite {
            file: &opened.file,
            at: piece.first * bs,
            buf: gather,
        };
        pending.buf.clear();
        let mut holes = false;
        for i in piece.first..piece.end {
            let written = match reader.read_chunk_into(i, block)? {
                ChunkRead::Hole(len) => {
                    holes = true;
                    pending.skip(i * bs + len as u64)
                }
                ChunkRead::Data => pending.add(i * bs, block, i + 1 == piece.end),
            };
            written.map_err(|e| io_context(e, "cannot write", path))?;
        }
        pending
            .flush()
            .map_err(|e| io_context(e, "cannot write", path))?;
        if let Some(bar) = &self.progress {
            bar.inc((piece.end * bs).min(reader.size()) - piece.first * bs);
        }
        Ok(holes)
    }

    /// Sizes a file that ends in a hole, then sets its attributes.
    fn complete(&self, opened: &OpenedFile, job: &Job, holes: bool) -> anyhow::Result<()> {
        if holes {
            // A trailing hole is never written: give the file its size without allocating it.
            opened
                .file
                .set_len(opened.reader.size())
                .map_err(|e| io_context(e, "cannot set the size of", &job.path))?;
        }
        self.finish_fd(&opened.file, &job.inode, &job.path, opened.chmod, true)
    }
}

/// Consecutive data gathered into one buffer and written with one pwrite; holes are skipped
/// (the file is sized at the end), so they stay unallocated.
struct PendingWrite<'f> {
    file: &'f File,
    at: u64,
    buf: &'f mut Vec<u8>,
}

impl PendingWrite<'_> {
    /// A hole up to `end`: what is gathered is written, and the next bytes go at `end`.
    fn skip(&mut self, end: u64) -> io::Result<()> {
        self.flush()?;
        self.at = end;
        Ok(())
    }

    /// Adds `bytes` at `offset`; `last` says no more follow (so a lone chunk is not copied).
    fn add(&mut self, offset: u64, bytes: &[u8], last: bool) -> io::Result<()> {
        if self.buf.is_empty() && (last || bytes.len() >= WRITE_BUFFER / 2) {
            // Large blocks, and lone ones, go straight from the block buffer: no copy.
            self.file.write_all_at(bytes, offset)?;
            self.at = offset + bytes.len() as u64;
            return Ok(());
        }
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= WRITE_BUFFER {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            self.file.write_all_at(self.buf, self.at)?;
            self.at += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }
}
