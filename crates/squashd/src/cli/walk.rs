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
use serde::Serialize;
use squashd_core::{CacheStats, FileKind, Image, ImageStats, Inode};
use std::fmt::Write as _;
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

/// Everything `walk` prints, in text or JSON.
struct Report<'a> {
    image: &'a str,
    read: bool,
    warmup: Option<&'a Phase>,
    phases: &'a [Phase],
    /// Distinct metadata blocks one walk touches, from the warm-up's unbounded cache.
    distinct: Option<u64>,
}

impl Report<'_> {
    /// Distinct metadata blocks for a phase: the warm-up's count, or, when the phase's own cache
    /// still holds every block it decompressed, the blocks it holds. (The eviction counter is not
    /// relied on: quick_cache does not report every value it drops.)
    fn distinct_for(&self, p: &Phase) -> Option<u64> {
        self.distinct.or_else(|| {
            let m = &p.stats.metadata;
            (m.loads == m.entries).then_some(m.entries)
        })
    }

    fn speedup(&self) -> Option<f64> {
        match self.phases {
            [serial, parallel] => Some(serial.wall.as_secs_f64() / parallel.wall.as_secs_f64()),
            _ => None,
        }
    }

    fn text(&self) -> String {
        let mut out = String::new();
        let what = if self.read {
            "metadata and file contents"
        } else {
            "metadata only"
        };
        let _ = writeln!(out, "squashd walk {} ({what})", self.image);
        if let Some(w) = self.warmup {
            let _ = writeln!(
                out,
                "  warm-up: 1 walk in {:.3} s, {} entries ({} directories, {} files), {} distinct metadata blocks",
                w.wall.as_secs_f64(),
                w.count.entries,
                w.count.directories,
                w.count.files,
                w.stats.metadata.loads
            );
        }
        for p in self.phases {
            let walks = u64::from(p.threads) * u64::from(p.walks_per_thread);
            let _ = writeln!(
                out,
                "{}: {} thread(s) x {} walk(s) of {} entries: {:.3} s",
                p.label,
                p.threads,
                p.walks_per_thread,
                p.count.entries,
                p.wall.as_secs_f64()
            );
            if self.read {
                let mib = (p.count.content_bytes * walks) as f64 / f64::from(1 << 20);
                let _ = writeln!(
                    out,
                    "  contents read     {mib:.1} MiB ({:.1} MiB/s)",
                    mib / p.wall.as_secs_f64()
                );
            }
            let m = &p.stats.metadata;
            let distinct = self.distinct_for(p);
            let per_block = distinct.filter(|&d| d > 0).map_or("?".to_string(), |d| {
                format!("{:.2}", m.loads as f64 / d as f64)
            });
            let _ = writeln!(
                out,
                "  metadata cache    {} decompressions of {} distinct blocks ({per_block} per block); {}",
                m.loads,
                distinct.map_or("?".to_string(), |d| d.to_string()),
                cache_line(m)
            );
            let _ = writeln!(
                out,
                "  data cache        {} decompressions; {}",
                p.stats.data.loads,
                cache_line(&p.stats.data)
            );
            let _ = writeln!(
                out,
                "  read from image   {:.1} MiB in {} reads",
                p.stats.bytes_read as f64 / f64::from(1 << 20),
                p.stats.reads
            );
        }
        if let Some(s) = self.speedup() {
            let _ = writeln!(
                out,
                "same total work: {} thread(s) finish {s:.2}x faster than 1",
                self.phases[1].threads
            );
        }
        out
    }

    fn json(&self) -> serde_json::Result<String> {
        let phase = |p: &Phase| {
            let distinct = self.distinct_for(p);
            PhaseJson {
                label: p.label,
                threads: p.threads,
                walks_per_thread: p.walks_per_thread,
                wall_seconds: rounded(p.wall.as_secs_f64(), 6),
                entries_per_walk: p.count.entries,
                directories_per_walk: p.count.directories,
                files_per_walk: p.count.files,
                content_bytes_per_walk: p.count.content_bytes,
                distinct_metadata_blocks: distinct,
                decompressions_per_metadata_block: distinct
                    .filter(|&d| d > 0)
                    .map(|d| rounded(p.stats.metadata.loads as f64 / d as f64, 4)),
                metadata: CacheJson::from(&p.stats.metadata),
                data: CacheJson::from(&p.stats.data),
                bytes_read: p.stats.bytes_read,
                reads: p.stats.reads,
            }
        };
        serde_json::to_string(&ReportJson {
            image: self.image,
            read: self.read,
            warmup: self.warmup.map(phase),
            phases: self.phases.iter().map(phase).collect(),
            speedup: self.speedup().map(|s| rounded(s, 4)),
        })
    }
}

fn cache_line(c: &CacheStats) -> String {
    format!(
        "hit ratio {:.2}%, {} waits ({:.3} s), {} evictions, {:.1} of {:.0} MiB resident",
        c.hit_ratio() * 100.0,
        c.waits,
        c.wait_nanos as f64 / 1e9,
        c.evictions,
        c.resident_bytes as f64 / f64::from(1 << 20),
        c.capacity_bytes as f64 / f64::from(1 << 20)
    )
}

// The JSON output. bench/benchlib reads `phases[].wall_seconds`, `speedup`,
// `decompressions_per_metadata_block`, `distinct_metadata_blocks`, `threads`, `walks_per_thread`,
// `bytes_read` and `metadata.{loads,hit_ratio,wait_seconds}`: keep those names.

#[derive(Serialize)]
struct ReportJson<'a> {
    image: &'a str,
    read: bool,
    warmup: Option<PhaseJson>,
    phases: Vec<PhaseJson>,
    speedup: Option<f64>,
}

#[derive(Serialize)]
struct PhaseJson {
    label: &'static str,
    threads: u32,
    walks_per_thread: u32,
    wall_seconds: f64,
    entries_per_walk: u64,
    directories_per_walk: u64,
    files_per_walk: u64,
    content_bytes_per_walk: u64,
    distinct_metadata_blocks: Option<u64>,
    decompressions_per_metadata_block: Option<f64>,
    metadata: CacheJson,
    data: CacheJson,
    bytes_read: u64,
    reads: u64,
}

/// One cache's counters: the core's [`CacheStats`] (which knows nothing of serde), with the wait
/// time in seconds and the hit ratio added.
#[derive(Serialize)]
struct CacheJson {
    capacity_bytes: u64,
    resident_bytes: u64,
    entries: u64,
    hits: u64,
    misses: u64,
    loads: u64,
    load_failures: u64,
    loaded_bytes: u64,
    evictions: u64,
    waits: u64,
    wait_seconds: f64,
    hit_ratio: f64,
}

impl From<&CacheStats> for CacheJson {
    fn from(c: &CacheStats) -> Self {
        CacheJson {
            capacity_bytes: c.capacity_bytes,
            resident_bytes: c.resident_bytes,
            entries: c.entries,
            hits: c.hits,
            misses: c.misses,
            loads: c.loads,
            load_failures: c.load_failures,
            loaded_bytes: c.loaded_bytes,
            evictions: c.evictions,
            waits: c.waits,
            wait_seconds: rounded(c.wait_nanos as f64 / 1e9, 6),
            hit_ratio: rounded(c.hit_ratio(), 6),
        }
    }
}

/// `x` rounded to `digits` decimals: figures measured in nanoseconds printed to the microsecond,
/// ratios to what a report shows.
fn rounded(x: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

#[cfg(test)]
mod tests {
    //! The counters `walk` reports are deterministic; these tests hold them on an image the real
    //! mksquashfs builds from a generated tree, and check the walk against that tree.

    use super::*;
    use crate::cli::ImageArgs;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// Writes a tree of 60 directories of 120 files each (plus symlinks and a nested level), big
    /// enough for dozens of metadata blocks; returns it with its entry count and content bytes.
    fn build_tree(root: &Path) -> (u64, u64) {
        let (mut entries, mut bytes) = (1u64, 0u64);
        for d in 0..60 {
            let dir = root.join(format!("dir-{d:03}"));
            let sub = dir.join("nested");
            std::fs::create_dir_all(&sub).unwrap();
            entries += 2;
            for f in 0..120 {
                let len = (d * 131 + f * 977) % 20_000;
                let content: Vec<u8> = (0..len).map(|i| (i * 7 + f) as u8).collect();
                let at = if f % 4 == 0 { &sub } else { &dir };
                std::fs::write(at.join(format!("file-with-a-longish-name-{f:04}")), content)
                    .unwrap();
                bytes += len as u64;
                entries += 1;
            }
            std::os::unix::fs::symlink("nested", dir.join("link")).unwrap();
            entries += 1;
        }
        (entries, bytes)
    }

    /// A gzip image of a fresh tree, or None (with the SKIPPED line) without mksquashfs.
    fn image(tmp: &Path) -> Option<(PathBuf, u64, u64)> {
        let src = tmp.join("src");
        let (entries, bytes) = build_tree(&src);
        let image = tmp.join("walk.sqfs");
        let status = Command::new("mksquashfs")
            .arg(&src)
            .arg(&image)
            .args(["-comp", "gzip", "-noappend", "-quiet", "-no-progress"])
            .status();
        match status {
            Ok(s) if s.success() => Some((image, entries, bytes)),
            Ok(s) => panic!("mksquashfs failed: {s}"),
            Err(e) => {
                eprintln!("SKIPPED: mksquashfs cannot run ({e}); scripts/setup.sh installs it");
                None
            }
        }
    }

    fn args(image: &Path, metadata_cache: Option<u64>) -> ImageArgs {
        ImageArgs {
            image: image.to_path_buf(),
            offset: Some(0),
            partition: None,
            metadata_cache,
            data_cache: None,
            disk_cache: None,
            disk_cache_size: 0,
            verity: Default::default(),
        }
    }

    #[test]
    fn sixteen_parallel_walks_decompress_each_metadata_block_once() {
        let tmp = tempfile::tempdir().unwrap();
        let Some((image, entries, _)) = image(tmp.path()) else {
            return;
        };
        let reference = run_phase(&args(&image, Some(1 << 30)), "warm-up", 1, 1, false).unwrap();
        let distinct = reference.stats.metadata.loads;
        assert_eq!(reference.count.entries, entries);
        assert!(
            distinct > 10,
            "only {distinct} metadata blocks: the tree is too small"
        );

        let parallel = run_phase(&args(&image, None), "parallel", 16, 2, false).unwrap();
        let m = parallel.stats.metadata;
        assert_eq!(parallel.count.entries, entries);
        assert_eq!(parallel.count.files, 60 * 120);
        assert_eq!(m.loads, distinct, "a metadata block was decompressed twice");
        assert_eq!(m.entries, distinct);
        // Threads that wanted a block another thread was loading waited for it: counted as hits.
        assert_eq!(m.misses, distinct);
        assert!(m.hits > distinct * 16);
    }

    #[test]
    fn a_budget_smaller_than_the_metadata_makes_repeated_walks_decompress_again() {
        let tmp = tempfile::tempdir().unwrap();
        let Some((image, entries, _)) = image(tmp.path()) else {
            return;
        };
        let reference = run_phase(&args(&image, Some(1 << 30)), "warm-up", 1, 1, false).unwrap();
        let small = run_phase(&args(&image, Some(32 << 10)), "parallel", 1, 3, false).unwrap();
        assert_eq!(small.count.entries, entries);
        assert!(
            small.stats.metadata.loads > reference.stats.metadata.loads,
            "3 walks with a 32 KiB budget decompressed only {} blocks of {}",
            small.stats.metadata.loads,
            reference.stats.metadata.loads
        );
    }

    #[test]
    fn reading_walks_read_every_byte_and_agree_across_threads() {
        let tmp = tempfile::tempdir().unwrap();
        let Some((image, entries, bytes)) = image(tmp.path()) else {
            return;
        };
        let phase = run_phase(&args(&image, None), "parallel", 4, 1, true).unwrap();
        assert_eq!(phase.count.entries, entries);
        assert_eq!(phase.count.content_bytes, bytes);
        assert!(phase.stats.data.loads > 0);
        assert!(phase.stats.bytes_read > 0);
    }

    #[test]
    fn json_output_has_the_keys_bench_reads_and_escapes_the_image_name() {
        let phase = |label, threads| Phase {
            label,
            threads,
            walks_per_thread: 2,
            wall: Duration::from_micros(1_500_250),
            count: WalkCount::default(),
            stats: ImageStats::default(),
        };
        let phases = [phase("serial", 1), phase("parallel", 4)];
        let report = Report {
            image: "a\"b\\c\n",
            read: false,
            warmup: None,
            phases: &phases,
            distinct: Some(8),
        };
        let json: serde_json::Value = serde_json::from_str(&report.json().unwrap()).unwrap();
        assert_eq!(json["image"], "a\"b\\c\n");
        assert_eq!(json["warmup"], serde_json::Value::Null);
        assert_eq!(json["speedup"], 1.0);
        let p = &json["phases"][1];
        assert_eq!(p["label"], "parallel");
        assert_eq!(p["threads"], 4);
        assert_eq!(p["walks_per_thread"], 2);
        assert_eq!(p["wall_seconds"], 1.50025);
        assert_eq!(p["distinct_metadata_blocks"], 8);
        assert_eq!(p["decompressions_per_metadata_block"], 0.0);
        assert_eq!(p["bytes_read"], 0);
        for key in ["loads", "hit_ratio", "wait_seconds"] {
            assert!(p["metadata"][key].is_number(), "metadata.{key}: {p}");
        }
    }
}
