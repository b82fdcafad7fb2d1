//! Reads of a file's range, split by blocks between threads when the range is long enough to
//! keep several cores decompressing: one Python thread reading a large file is not held to one
//! core's decompression speed.
//!
//! The helpers are scoped threads started for the read, not a pool: a pool's threads do not
//! survive `fork`, and Python programs fork (multiprocessing, data loaders) after opening an
//! image; a read of several blocks costs far more than starting a thread.

use crate::errors::{OpError, OpResult};
use squashd_core::FileReader;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

/// A range with at least this many blocks to decompress is split between threads.
const SPLIT_BLOCKS: u64 = 3;

/// Fills `out` from `offset` of `reader`'s file (the range lies within the file), with up to
/// `threads` threads. `once`: the caller reads this range once (see [`read_exact`]).
pub fn read_at(
    reader: &FileReader,
    offset: u64,
    out: &mut [u8],
    threads: usize,
    once: bool,
) -> OpResult<()> {
    let bs = u64::from(reader.block_size().max(1));
    let end = offset + out.len() as u64;
    let blocks = end.div_ceil(bs) - offset / bs;
    // Blocks the cache holds (read ahead) are copied, which is no work to share: a helper
    // would cost more to start, and to wait for at the end, than it saves.
    if threads < 2
        || blocks < SPLIT_BLOCKS
        || (offset / bs..end.div_ceil(bs))
            .filter(|&i| !reader.chunk_cached(i))
            .nth(SPLIT_BLOCKS as usize - 1)
            .is_none()
    {
        return read_exact(reader, offset, out, once);
    }
    // Pieces that end on block boundaries, so that no block is decompressed twice, taken one
    // at a time by whichever thread is free: none waits for another's share at the end (a
    // helper that starts late, or is not given a core at once, takes fewer).
    let mut pieces = Vec::with_capacity(blocks as usize);
    let mut rest = out;
    let mut at = offset;
    while !rest.is_empty() {
        let piece_end = ((at / bs + 1) * bs).min(end);
        let (piece, tail) = rest.split_at_mut((piece_end - at) as usize);
        pieces.push((at, piece));
        rest = tail;
        at = piece_end;
    }
    // Taken from the back: the first piece first.
    pieces.reverse();
    let pieces = Mutex::new(pieces);
    let failed = AtomicBool::new(false);
    let work = || -> OpResult<()> {
        loop {
            if failed.load(Ordering::Relaxed) {
                return Ok(());
            }
            let next = pieces.lock().unwrap_or_else(PoisonError::into_inner).pop();
            let Some((at, piece)) = next else {
                return Ok(());
            };
            if let Err(e) = read_exact(reader, at, piece, once) {
                failed.store(true, Ordering::Relaxed);
                return Err(e);
            }
        }
    };
    let helpers = (threads as u64 - 1).min(blocks - 1);
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (0..helpers)
            .map(|_| {
                std::thread::Builder::new()
                    .name("squashd-read".into())
                    .spawn_scoped(scope, work)
            })
            .collect();
        let mut result = work();
        for helper in helpers {
            let done = match helper {
                Ok(helper) => helper.join().unwrap_or_else(|_| {
                    Err(OpError::Errno(libc::EIO, "a read thread panicked".into()))
                }),
                // No thread to spare: this thread has read every piece.
                Err(_) => Ok(()),
            };
            result = result.and(done);
        }
        result
    })
}

/// Fills `out` from `offset`, which the file's size allows. `once`: blocks the data cache does
/// not hold are decompressed straight into `out` and not cached (`FileReader::read_once_at`).
fn read_exact(reader: &FileReader, offset: u64, out: &mut [u8], once: bool) -> OpResult<()> {
    let mut done = 0;
    while done < out.len() {
        let at = offset + done as u64;
        let n = if once {
            reader.read_once_at(at, &mut out[done..])?
        } else {
            reader.read_at(at, &mut out[done..])?
        };
        if n == 0 {
            // The caller bounded the range by the file's size: the reader ran short.
            break;
        }
        done += n;
    }
    Ok(())
}
