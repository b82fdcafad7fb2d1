//! `squashd walk`: the in-process parallel walk the benchmark suite (bench/) times.
//!
//! N threads each walk the whole tree (read_dir_plus: every directory listed with the inodes of its entries,
//! no lookups; with `--read` every file's contents too), all released together by a barrier and
//! timed until the last one ends. The image's own counters are printed beside the time:
//! decompressions of metadata blocks against the number of distinct blocks, hit ratios, time
//! spent waiting for another thread's load, bytes read from the image.
//!
//! `--split` answers "do N threads finish the same total work faster than one?": it runs
//! 1 thread doing N×R walks, then N threads doing R walks each, each phase on a freshly opened
//! image (cold squashd caches), after an untimed walk that warms the page cache for both.

use anyhow::{bail, Context};
use squashd_core::{FileKind, Image, ImageStats, Inode};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Arguments of `squashd walk`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    image: super::ImageArgs,
    /// Threads walking at once; each walks the whole tree.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    threads: u32,
    /// Walks each thread does, one after the other.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    repeat: u32,
    /// Also read the contents of every regular file.
    #[arg(long)]
    read: bool,
    /// Compare the same total work (threads × repeat walks) done by 1 thread and by `threads`
    /// threads, each on a freshly opened image, after an untimed warm-up walk.
    #[arg(long)]
    split: bool,
    /// Do an untimed single-threaded walk first (warms the page cache; counts the distinct
    /// metadata blocks a walk touches).
    #[arg(long)]
    warmup: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// What one walk of the tree saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct WalkCount {
    /// Entries, the root included.
    entries: u64,
    directories: u64,
    files: u64,
    /// Bytes of file contents read (0 without `--read`).
    content_bytes: u64,
}

/// One timed run: `threads` threads doing `walks_per_thread` walks each on one fresh image.
#[derive(Debug, Clone)]
struct Phase {
    label: &'static str,
    threads: u32,
    walks_per_thread: u32,
    wall: Duration,
    count: WalkCount,
    stats: ImageStats,
}

/// Runs `squashd walk`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let name = args.image.image.display().to_string();
    let mut warmup = None;
    if args.warmup || args.split {
        // Unbounded metadata budget: its decompressions are then the distinct blocks a walk
        // touches, whatever budget the timed phases get.
        let mut reference = args.image.clone();
        reference.metadata_cache = Some(4 << 30);
        warmup = Some(run_phase(&reference, "warm-up", 1, 1, args.read)?);
    }
    let mut phases = Vec::new();
    if args.split {
        let total = args
            .threads
            .checked_mul(args.repeat)
            .context("too many walks")?;
        phases.push(run_phase(&args.image, "serial", 1, total, args.read)?);
    }
    phases.push(run_phase(
        &args.image,
        "parallel",
        args.threads,
        args.repeat,
        args.read,
    )?);
    if let Some(w) = &warmup {
        for p in &phases {
            if p.count != w.count {
                bail!(
                    "{name}: walks disagree: the warm-up saw {:?}, the {} phase {:?}",
                    w.count,
                    p.label,
                    p.count
                );
            }
        }
    }
    let distinct = warmup.as_ref().map(|w| w.stats.metadata.loads);
    let report = Report {
        image: &name,
        read: args.read,
        warmup: warmup.as_ref(),
        phases: &phases,
        distinct,
    };
    if args.json {
        println!("{}", report.json()?);
    } else {
        print!("{}", report.text());
    }
    Ok(())
}

/// Opens the image afresh and runs `threads` threads of `walks` walks each, released together.
fn run_phase(
    image_args: &super::ImageArgs,
    label: &'static str,
    threads: u32,
    walks: u32,
    read: bool,
) -> anyhow::Result<Phase> {
    let image = image_args.open()?;
    let barrier = Barrier::new(threads as usize + 1);
    let (wall, results) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let mut counts = Vec::with_capacity(walks as usize);
                    for _ in 0..walks {
                        counts.push(walk_tree(&image, read)?);
                    }
                    anyhow::Ok(counts)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<_> = handles
            .into_iter()
            .map(|h| match h.join() {
                Ok(r) => r,
                Err(_) => Err(anyhow::anyhow!("a walking thread panicked")),
            })
            .collect();
        (start.elapsed(), results)
    });
    let mut first: Option<WalkCount> = None;
    for counts in results {
        for c in counts? {
            match first {
                None => first = Some(c),
                Some(f) if f != c => bail!(
                    "{}: two walks of the same image disagree: {f:?} and {c:?}",
                    image.name()
                ),
                Some(_) => {}
            }
        }
    }
    Ok(Phase {
        label,
        threads,
        walks_per_thread: walks,
        wall,
        count: first.unwrap_or_default(),
        stats: image.stats(),
    })
}

/// Walks the whole tree depth-first: every directory listed, every entry's inode loaded.
fn walk_tree(image: &Image, read: bool) -> anyhow::Result<WalkCount> {
    let mut count = WalkCount {
        entries: 1,
        directories: 1,
        ..WalkCount::default()
    };
    let mut buf = vec![0u8; image.superblock().block_size as usize];
    let mut stack: Vec<Inode> = vec![image.root()?];
    while let Some(dir) = stack.pop() {
        for (_, inode) in image.read_dir_plus(&dir)? {
            count.entries += 1;
            match inode.kind {
                FileKind::Directory => {
                    count.directories += 1;
                    stack.push(inode);
                }
                FileKind::File => {
                    count.files += 1;
                    if read {
                        count.content_bytes += read_all(image, &inode, &mut buf)?;
                    }
                }
                _ => {}
            }
        }
    }
    Ok(count)
}

/// Reads a whole file through one reader, block by block; checks it has the size its inode says.
fn read_all(image: &Image, inode: &Inode, buf: &mut [u8]) -> anyhow::Result<u64> {
    let file = image.open_file(inode)?;
    let mut at = 0u64;
    loop {
        let n = file.read_at(at, buf)?;
        if n == 0 {
            break;
        }
        at += n as u64;
    }
    if at != inode.size {
        bail!(
            "{}: inode {} holds {} bytes, its size says {}",
            image.name(),
            inode.number,
            at,
            inode.size
        );
    }
    Ok(at)
}

mod report;
#[cfg(test)]
mod tests;

use report::Report;
