//! Where answers are committed: on the CPU whose queue carried the request (the requester's
//! CPU), whichever of the queue's threads answers, so that the requester, asleep on that CPU,
//! is woken without a wake-up across CPUs. The transport counts such answers
//! (`TransportStats::local_requests_per_queue`); these tests check the count against requesters
//! pinned to each CPU. The transport is started from a thread pinned to CPU 0, so that a queue
//! thread that left its CPU to the scheduler would inherit CPU 0 alone and answer every other
//! CPU's requests from there. Needs root, two CPUs and a kernel with
//! /sys/module/fuse/parameters/enable_uring (turned on for the test and restored after);
//! skipped with a printed reason otherwise.

mod common;

use std::fs::File;
use std::io::Read as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{cpus, missing_lookups_on_cpu, on_cpu, skip_reason, EnableUring, TestMount};
use squashd_fuse_uring::{TransportStats, UringConfig};

/// Lookups each requester makes, one after another.
const LOOKUPS: u64 = 200;

/// Why these tests cannot run here, if they cannot.
fn skip() -> Option<String> {
    skip_reason().or_else(|| (cpus() < 2).then(|| "needs two CPUs".to_string()))
}

/// Mounts with `config`, preparing the transport on a thread pinned to CPU 0 (its queue threads
/// inherit that affinity unless they set their own).
fn mount_from_cpu0(config: UringConfig) -> TestMount {
    let (mount, outcome) = on_cpu(0, move || TestMount::mount_with_ring(&config, 1))
        .join()
        .expect("mount");
    outcome.expect("the ring registers");
    mount
}

/// A requester pinned to each CPU in turn, making [`LOOKUPS`] lookups of missing names (never
/// cached) one after another, while, if `hold_an_entry`, a read of /slow from the same CPU
/// holds one entry of that CPU's queue in its handler, so that the lookups go to the queue's
/// other entries. The transport's counters after all of them.
fn lookups_from_each_cpu(mount: &TestMount, hold_an_entry: bool) -> TransportStats {
    for cpu in 0..cpus().min(4) {
        let slow_reader = hold_an_entry.then(|| {
            mount.fs.slow_started.store(false, Ordering::SeqCst);
            let slow = mount.path().join("slow");
            let reader = on_cpu(cpu, move || {
                File::open(slow).and_then(|mut f| f.read(&mut [0u8; 16]))
            });
            let deadline = Instant::now() + Duration::from_secs(10);
            while !mount.fs.slow_started.load(Ordering::SeqCst) {
                assert!(Instant::now() < deadline, "/slow's READ never came");
                std::thread::sleep(Duration::from_millis(5));
            }
            reader
        });
        let root = mount.path();
        missing_lookups_on_cpu(root, cpu, LOOKUPS);
        if let Some(reader) = slow_reader {
            assert_eq!(reader.join().expect("reader").expect("read /slow"), 16);
        }
    }
    mount.transport.as_ref().expect("transport").stats()
}

/// Asserts that at least `share` percent of each queue's requests were answered on its CPU.
fn assert_local(stats: &TransportStats, share: u64) {
    for (cpu, (&all, &local)) in stats
        .requests_per_queue
        .iter()
        .zip(&stats.local_requests_per_queue)
        .enumerate()
        .take(cpus().min(4))
    {
        assert!(all >= LOOKUPS, "queue {cpu}: {stats:?}");
        assert!(
            local * 100 >= all * share,
            "queue {cpu}: {local} of {all} requests answered on CPU {cpu}: {stats:?}"
        );
    }
}

#[test]
fn every_thread_of_a_cpus_queue_answers_on_that_cpu() {
    if let Some(reason) = skip() {
        println!("SKIPPED: {reason}");
        return;
    }
    let _uring = EnableUring::on();
    // Two entries per CPU, each with its thread. The first thread's entry takes a lone
    // requester's requests (it registers last); /slow's READ holds it, so the lookups go to
    // the other thread's entry.
    let mount = mount_from_cpu0(TestMount::config(2).pinned());
    let stats = lookups_from_each_cpu(&mount, true);
    // Every thread of a queue runs on the queue's CPU: all answers are local.
    assert_local(&stats, 98);
    mount.unmount_ring();
}

#[test]
fn the_idle_start_thread_answers_on_the_requests_cpu() {
    if let Some(reason) = skip() {
        println!("SKIPPED: {reason}");
        return;
    }
    let _uring = EnableUring::on();
    // Only the idle start's thread, with one entry of every CPU's queue (the per-CPU threads
    // never start here): it answers every request, each on the CPU it came from.
    let mount = mount_from_cpu0(TestMount::config(2).pinned().idle_start(u64::MAX));
    let stats = lookups_from_each_cpu(&mount, false);
    assert_eq!(stats.idle_thread_requests, stats.requests(), "{stats:?}");
    assert_local(&stats, 95);
    mount.unmount_ring();
}
