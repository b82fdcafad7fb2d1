//! Round-trip cost of the two transports with the test file system: a `stat` storm of cold
//! names (every stat is one LOOKUP: entry timeout 0) and a storm of 4 KiB direct reads (every
//! pread is one READ), from threads pinned one per CPU. /dev/fuse is served by one plain reader
//! thread per CPU; the ring by one queue per CPU. Ignored by default (it takes ~30 s):
//!
//! ```text
//! cargo test --release -p squashd-fuse-uring --test bench -- --ignored --nocapture
//! ```

mod common;

use std::fs::File;
use std::os::unix::fs::FileExt as _;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{cpus, on_cpu, skip_reason, EnableUring, TestMount};
use squashd_fuse_uring::UringConfig;

const RUN: Duration = Duration::from_secs(3);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Via {
    DevFuse,
    Ring,
}

#[derive(Clone, Copy, Debug)]
enum Storm {
    Stat,
    Read4k,
}

/// Operations per second of `threads` threads (pinned round-robin) doing `storm` for RUN.
fn storm(root: PathBuf, storm: Storm, threads: usize) -> f64 {
    let started = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let root = root.clone();
            on_cpu(t % cpus(), move || {
                let mut ops = 0u64;
                let file = File::open(root.join("big")).expect("open /big");
                let mut block = [0u8; 4096];
                while started.elapsed() < RUN {
                    match storm {
                        Storm::Stat => {
                            std::fs::metadata(root.join(format!("v{t}-{}", ops % 1000)))
                                .expect("stat");
                        }
                        Storm::Read4k => {
                            let offset = (ops * 4096 * 7) % (1 << 20);
                            file.read_exact_at(&mut block, offset).expect("pread");
                        }
                    }
                    ops += 1;
                }
                ops
            })
        })
        .collect();
    let ops: u64 = workers.into_iter().map(|w| w.join().expect("worker")).sum();
    ops as f64 / started.elapsed().as_secs_f64()
}

fn run(via: Via, kind: Storm, threads: usize) -> (f64, f64) {
    let mut mount = if via == Via::Ring {
        let (mount, ring) = TestMount::mount_with_ring(&TestMount::config(2), 1);
        ring.expect("prepare and register the ring");
        mount
    } else {
        TestMount::mount(false, cpus())
    };
    // Warm the root's dentries and /big's open path.
    let _ = std::fs::metadata(mount.path().join("big"));
    let before = requests(&mount);
    let started = Instant::now();
    let ops = storm(mount.path(), kind, threads);
    let reqs = (requests(&mount) - before) as f64 / started.elapsed().as_secs_f64();
    if via == Via::Ring {
        assert_eq!(
            mount.dev_reads.load(Ordering::Relaxed),
            0,
            "all requests over the ring"
        );
    }
    mount.unmount(nix::mount::MntFlags::empty());
    (ops, reqs)
}

fn requests(mount: &TestMount) -> u64 {
    mount.fs.ring_requests.load(Ordering::Relaxed) + mount.fs.dev_requests.load(Ordering::Relaxed)
}

#[test]
#[ignore = "a benchmark: ~30 s; run with --ignored --nocapture"]
fn round_trips_per_second() {
    if let Some(reason) = skip_reason() {
        println!("SKIPPED: {reason}");
        return;
    }
    let _uring = EnableUring::on();
    println!("| workload | threads | /dev/fuse ops/s | ring ops/s | ring / dev |");
    println!("|---|---|---|---|---|");
    for (kind, threads) in [
        (Storm::Stat, 1),
        (Storm::Stat, cpus()),
        (Storm::Read4k, 1),
        (Storm::Read4k, cpus()),
    ] {
        // Alternate the order, twice each, and keep the better of the two runs.
        let mut dev = 0f64;
        let mut ring = 0f64;
        for round in 0..2 {
            let order = if round == 0 {
                [Via::DevFuse, Via::Ring]
            } else {
                [Via::Ring, Via::DevFuse]
            };
            for via in order {
                let (ops, reqs) = run(via, kind, threads);
                eprintln!("{kind:?} x{threads} {via:?}: {ops:.0} ops/s, {reqs:.0} requests/s");
                match via {
                    Via::DevFuse => dev = dev.max(ops),
                    Via::Ring => ring = ring.max(ops),
                }
            }
        }
        println!(
            "| {kind:?} | {threads} | {dev:.0} | {ring:.0} | {:.2} |",
            ring / dev
        );
    }
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

#[test]
#[ignore = "a measurement: prints what one ring mount adds to the resident set"]
fn resident_memory_of_one_ring_mount() {
    if let Some(reason) = skip_reason() {
        println!("SKIPPED: {reason}");
        return;
    }
    let _uring = EnableUring::on();
    // What a mount served over /dev/fuse alone adds (the harness: mount point, reader thread
    // and its buffer), to compare with.
    let before = rss_kib();
    let mut plain = TestMount::mount(false, 1);
    let _ = std::fs::metadata(plain.path().join("vname"));
    println!(
        "/dev/fuse only: RSS +{} KiB",
        rss_kib().saturating_sub(before)
    );
    plain.unmount(nix::mount::MntFlags::empty());
    drop(plain);
    for depth in [1, 2] {
        let config = TestMount::config(depth);
        let before = rss_kib();
        let (mut mount, ring) = TestMount::mount_with_ring(&config, 1);
        ring.expect("prepare and register the ring");
        let registered = rss_kib();
        for _ in 0..1000 {
            let _ = std::fs::metadata(mount.path().join("vname"));
        }
        let after_stats = rss_kib();
        let readers: Vec<_> = (0..cpus())
            .map(|cpu| {
                let big = mount.path().join("big");
                on_cpu(cpu, move || std::fs::read(big).expect("read /big").len())
            })
            .collect();
        for reader in readers {
            reader.join().expect("reader");
        }
        let after_reads = rss_kib();
        println!(
            "depth {depth}: ring_memory {} KiB; RSS +{} KiB registered, +{} KiB after 1000 stats, \
             +{} KiB after 128 KiB reads on every queue",
            squashd_fuse_uring::ring_memory(&config) / 1024,
            registered.saturating_sub(before),
            after_stats.saturating_sub(before),
            after_reads.saturating_sub(before),
        );
        mount.unmount(nix::mount::MntFlags::empty());
    }
}

/// CPU time (user + system) of this process so far.
fn process_cpu() -> Duration {
    // SAFETY: getrusage writes one rusage into the zeroed local it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(
            libc::getrusage(libc::RUSAGE_SELF, &mut usage),
            0,
            "getrusage"
        );
        usage
    };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// Mounts `count` test file systems one after another (kept mounted, as a daemon keeps its
/// images), each until its first `stat` is answered; returns the median wall time per mount
/// and this process's CPU time per mount.
fn set_up(count: usize, config: Option<UringConfig>) -> (Duration, Duration) {
    let cpu_before = process_cpu();
    let mut times = Vec::with_capacity(count);
    let mut mounts = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        let mount = match &config {
            Some(config) => {
                let (mount, ring) = TestMount::mount_with_ring(config, 1);
                ring.expect("prepare and register the ring");
                mount
            }
            None => TestMount::mount(false, 1),
        };
        std::fs::metadata(mount.path().join("small")).expect("stat /small");
        times.push(started.elapsed());
        mounts.push(mount);
    }
    let cpu = (process_cpu() - cpu_before) / count as u32;
    for mut mount in mounts {
        mount.unmount(nix::mount::MntFlags::empty());
    }
    times.sort();
    (times[count / 2], cpu)
}

#[test]
#[ignore = "a measurement: what a ring mount adds to the time and CPU to be ready (~10 s)"]
fn set_up_cost_of_a_ring_mount() {
    if let Some(reason) = skip_reason() {
        println!("SKIPPED: {reason}");
        return;
    }
    let _uring = EnableUring::on();
    const MOUNTS: usize = 40;
    let idle = TestMount::config(1).idle_start(256);
    println!(
        "| transport | mounts | median wall to the first stat answered | process CPU per mount |"
    );
    println!("|---|---|---|---|");
    for round in 0..3 {
        for (name, config) in [("/dev/fuse", None), ("ring, idle start", Some(idle))] {
            let (wall, cpu) = set_up(MOUNTS, config);
            println!("| {name} (round {round}) | {MOUNTS} | {wall:?} | {cpu:?} |");
        }
    }
}
