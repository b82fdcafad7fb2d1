//! Which queue thread answers a lone requester: the thread pinned to the requester's CPU, so
//! that a sequential caller (one `find`) is answered without a wake-up across CPUs. Needs root
//! and a kernel with /sys/module/fuse/parameters/enable_uring (turned on for the test and
//! restored after); skipped with a printed reason otherwise.

mod common;

use common::{cpus, missing_lookups_on_cpu, skip_reason, EnableUring, TestMount};

/// Lookups each requester makes, one after another.
const LOOKUPS: u64 = 200;

#[test]
fn a_lone_requesters_requests_are_answered_by_the_thread_pinned_to_its_cpu() {
    if let Some(reason) = skip_reason() {
        println!("SKIPPED: {reason}");
        return;
    }
    let _uring = EnableUring::on();
    // Two entries per CPU, each with its thread, both pinned to the CPU; the first registers last.
    let (mount, outcome) = TestMount::mount_with_ring(&TestMount::config(2).pinned(), 1);
    outcome.expect("the ring registers");
    let cpus = cpus().min(4);
    for cpu in 0..cpus {
        let root = mount.path();
        // One requester pinned to `cpu`, one lookup at a time: every one goes to that CPU's
        // queue, and the kernel gives each to the entry that became free last.
        missing_lookups_on_cpu(root, cpu, LOOKUPS);
    }
    let by_thread = mount.fs.missing_lookups_by_thread.lock().unwrap().clone();
    for cpu in 0..cpus {
        let pinned = by_thread
            .get(&(cpu, format!("fuse-uring-{cpu}")))
            .copied()
            .unwrap_or(0);
        let all: u64 = by_thread
            .iter()
            .filter(|((queue, _), _)| *queue == cpu)
            .map(|(_, n)| n)
            .sum();
        assert_eq!(all, LOOKUPS, "queue {cpu}: {by_thread:?}");
        // All but a few (a requester may be migrated for a moment, an entry be busy).
        assert!(
            pinned >= LOOKUPS * 9 / 10,
            "queue {cpu}: {pinned} of {all} answered by its pinned thread: {by_thread:?}"
        );
    }
    mount.unmount_ring();
}
