//! Writing the regular files: in the order of their data in the image, on every core, with
//! the image's bytes prefetched ahead of the writers.
//!
//! The files are sorted by where their data lies and shared out among the threads (rayon), each
//! taking a run of neighbouring files, so each thread reads the image front to back. A thread of
//! its own prefetches the bytes ahead of each of them (asks the kernel to read them). Cold, a /usr image otherwise
//! kept both cores waiting on reads: the kernel's read-ahead keeps one state per descriptor,
//! which readers at distant places confuse. (Handing out neighbouring files to all threads
//! instead, which would make one stream of the image, measured much slower: threads creating
//! files in one directory spin on its lock.)

use super::dirs::DirsMade;
use super::plan::Job;
use super::write::Writer;
use rayon::prelude::*;
use squashd_core::Image;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Files of more chunks than this are cut into pieces of this many, which any thread may write.
const PIECE_CHUNKS: u64 = 32;
/// The most files a writer takes at once (see [`write_files`]).
const FILES_PER_SPLIT: usize = 16;
/// How far ahead of each writer thread the image is prefetched.
const PREFETCH_LEAD: u64 = 32 << 20;
/// Bytes asked for at once.
const PREFETCH_STEP: u64 = 2 << 20;
/// A writer's position before its first file.
const NOWHERE: u64 = u64::MAX;

/// Where in the image each writer thread is reading.
struct Positions {
    at: Vec<AtomicU64>,
    done: AtomicBool,
}

impl Positions {
    fn set(&self, pos: Option<u64>) {
        let (Some(pos), Some(thread)) = (pos, rayon::current_thread_index()) else {
            return;
        };
        if let Some(at) = self.at.get(thread) {
            at.store(pos, Ordering::Relaxed);
        }
    }
}

/// Writes `files`, which [`order_by_data`] sorted, on rayon's threads, reading `spans` ahead;
/// each file once `dirs` says its directory exists.
pub fn write_files(
    writer: &Writer,
    files: &[Job],
    spans: &[(u64, u64)],
    dirs: &DirsMade,
) -> anyhow::Result<()> {
    let image = writer.image;
    let positions = Positions {
        at: (0..rayon::current_num_threads())
            .map(|_| AtomicU64::new(NOWHERE))
            .collect(),
        done: AtomicBool::new(false),
    };
    std::thread::scope(|scope| {
        let prefetcher = std::thread::Builder::new()
            .name("prefetch".into())
            .spawn_scoped(scope, || {
                prefetch_ahead_of_writers(image, spans, &positions)
            });
        // Stops the prefetch however the writers end, a panic included: the scope joins it.
        let _stop = StopPrefetch {
            positions: &positions,
            thread: prefetcher.ok().map(|t| t.thread().clone()),
        };
        // Rayon runs the files of a split it has not shared out one after another, and a split
        // already started cannot be stolen: without a cap, one thread was left writing a long
        // run of files alone at the end (a third of a second of a /usr extraction).
        files
            .par_iter()
            .with_max_len(FILES_PER_SPLIT)
            .try_for_each(|job| {
                dirs.wait_for(job.parent)?;
                write_file(writer, job, &positions)
            })
    })
}

/// Tells the prefetch thread to end, when dropped.
struct StopPrefetch<'a> {
    positions: &'a Positions,
    thread: Option<std::thread::Thread>,
}

impl Drop for StopPrefetch<'_> {
    fn drop(&mut self) {
        self.positions.done.store(true, Ordering::Relaxed);
        if let Some(thread) = &self.thread {
            thread.unpark();
        }
    }
}

fn write_file(writer: &Writer, job: &Job, positions: &Positions) -> anyhow::Result<()> {
    let open = writer.create_file(job)?;
    let count = open.reader.chunk_count();
    let write = |(first, end): (u64, u64)| {
        positions.set(open.reader.chunk_position(first));
        writer.write_chunks(&open, &job.path, first, end)
    };
    let holes = if count > PIECE_CHUNKS {
        let pieces: Vec<(u64, u64)> = (0..count)
            .step_by(PIECE_CHUNKS as usize)
            .map(|s| (s, (s + PIECE_CHUNKS).min(count)))
            .collect();
        pieces
            .into_par_iter()
            .map(write)
            .collect::<anyhow::Result<Vec<bool>>>()?
            .contains(&true)
    } else {
        write((0, count))?
    };
    writer.finish_file(&open, job, holes)
}

/// Sorts `files` by where their data lies in the image (files without data last), so that
/// writing them in order reads the image front to back, and returns the image ranges holding
/// their data, for the prefetch of [`write_files`].
pub fn order_by_data(image: &Image, files: &mut Vec<Job>) -> Vec<(u64, u64)> {
    let mut keyed: Vec<(Option<u64>, Job)> = std::mem::take(files)
        .into_par_iter()
        .map(|job| (image.data_position(&job.inode), job))
        .collect();
    // `None` sorts first: the key puts files without data last.
    keyed.par_sort_by_key(|(pos, _)| pos.unwrap_or(u64::MAX));
    let starts: Vec<(u64, u64)> = keyed
        .iter()
        .filter_map(|(pos, job)| Some(((*pos)?, job.inode.size)))
        .collect();
    *files = keyed.into_iter().map(|(_, job)| job).collect();
    data_spans(&starts, image.superblock().block_size as u64)
}

/// The image ranges holding the data of files that start at `starts` (sorted, with their sizes),
/// merged: each file from its data's start to the next file's, but no further than its size
/// and a block past its start can reach (its stored blocks are never larger than the data,
/// and a tail end's fragment block is at most a block), so that a partial extraction does not
/// read what lies between its files.
fn data_spans(starts: &[(u64, u64)], block_size: u64) -> Vec<(u64, u64)> {
    let mut ends = vec![0; starts.len()];
    let mut next_start = u64::MAX;
    for (i, &(start, size)) in starts.iter().enumerate().rev() {
        ends[i] = start
            .saturating_add(size)
            .saturating_add(block_size)
            .min(next_start);
        if i > 0 && starts[i - 1].0 < start {
            next_start = start;
        }
    }
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for (&(start, _), &end) in starts.iter().zip(&ends) {
        match spans.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ if end > start => spans.push((start, end)),
            _ => {}
        }
    }
    spans
}

/// Keeps the image prefetched [`PREFETCH_LEAD`] ahead of each writer thread, within `spans`, until
/// the writers are done. A writer that jumps (to work taken from another) starts a new stream.
fn prefetch_ahead_of_writers(image: &Image, spans: &[(u64, u64)], positions: &Positions) {
    let threads = positions.at.len();
    // Per thread: where its stream began, and how far it has been asked for.
    let mut streams = vec![(NOWHERE, NOWHERE); threads];
    while !positions.done.load(Ordering::Relaxed) {
        let mut asked_any = false;
        for (at, (base, asked)) in positions.at.iter().zip(streams.iter_mut()) {
            let pos = at.load(Ordering::Relaxed);
            if pos == NOWHERE {
                continue;
            }
            if *base == NOWHERE || pos < *base || pos > *asked {
                (*base, *asked) = (pos, pos);
            }
            let limit = pos.saturating_add(PREFETCH_LEAD);
            if *asked < limit {
                let to = limit.min(asked.saturating_add(PREFETCH_STEP));
                ask(image, spans, *asked, to);
                *asked = to;
                asked_any = true;
            }
        }
        if !asked_any {
            std::thread::park_timeout(Duration::from_millis(2));
        }
    }
}

/// Asks for the parts of `from..to` that lie in `spans`.
fn ask(image: &Image, spans: &[(u64, u64)], from: u64, to: u64) {
    let first = spans.partition_point(|&(_, end)| end <= from);
    for &(start, end) in spans[first..].iter().take_while(|&&(start, _)| start < to) {
        let (start, end) = (start.max(from), end.min(to));
        image.prefetch(start, end - start);
    }
}

#[cfg(test)]
mod tests {
    use super::data_spans;

    #[test]
    fn spans_join_neighbours_and_stop_at_what_a_file_can_hold() {
        // Two files sharing a start (a duplicate, or tails in one fragment), one just after,
        // and one far away: the first three make one range, capped by the third's size; the
        // gap before the last is not read.
        let starts = [(100, 1000), (100, 50), (600, 10), (5000, 10)];
        assert_eq!(data_spans(&starts, 128), vec![(100, 738), (5000, 5138)]);
        // A small file far before the next one reaches no further than it can hold.
        assert_eq!(
            data_spans(&[(0, 10), (1 << 30, 5)], 128),
            vec![(0, 138), (1 << 30, (1 << 30) + 133)]
        );
        assert!(data_spans(&[], 128).is_empty());
    }
}
