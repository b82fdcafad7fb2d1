//! What `squashd walk` prints: the phases' times and the image's counters, in text or JSON.

use super::Phase;
use serde::Serialize;
use squashd_core::CacheStats;
use std::fmt::Write as _;

/// Everything `walk` prints, in text or JSON.
pub(super) struct Report<'a> {
    pub(super) image: &'a str,
    pub(super) read: bool,
    pub(super) warmup: Option<&'a Phase>,
    pub(super) phases: &'a [Phase],
    /// Distinct metadata blocks one walk touches, from the warm-up's unbounded cache.
    pub(super) distinct: Option<u64>,
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

    pub(super) fn text(&self) -> String {
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

    pub(super) fn json(&self) -> serde_json::Result<String> {
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
