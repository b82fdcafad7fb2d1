//! A queue thread that has answered looks for the next request for `UringConfig::spin` before
//! it sleeps, while requests come that fast; the transport counts the requests found so
//! (`TransportStats::spun_requests`). These tests check the count against a requester making
//! lookups one after another. Needs root and a kernel with
//! /sys/module/fuse/parameters/enable_uring (turned on for the test and restored after);
//! skipped with a printed reason otherwise.

mod common;

use std::time::Duration;

use common::{missing_lookups_on_cpu, skip_reason, EnableUring, TestMount};
use squashd_fuse_uring::{TransportStats, UringConfig};

/// Lookups the requester makes, one after another.
const LOOKUPS: u64 = 200;

/// Mounts with `config`, makes [`LOOKUPS`] lookups of missing names (never cached, so each is a
/// request) from CPU 0, and returns the transport's counters once it has ended.
fn lookups_with(config: UringConfig) -> TransportStats {
    let (mount, outcome) = TestMount::mount_with_ring(&config, 1);
    outcome.expect("the ring registers");
    missing_lookups_on_cpu(mount.path(), 0, LOOKUPS);
    let stats = mount.transport.as_ref().expect("transport").stats();
    mount.unmount_ring();
    stats
}

#[test]
fn a_requesters_next_request_is_found_by_spinning_and_never_without_a_spin() {
    if let Some(reason) = skip_reason() {
        println!("SKIPPED: {reason}");
        return;
    }
    let _uring = EnableUring::on();
    // Without a spin, every request is waited for asleep.
    let still = lookups_with(TestMount::config(1));
    assert!(still.requests() >= LOOKUPS, "{still:?}");
    assert_eq!(still.spun_requests, 0, "{still:?}");
    // With a spin far longer than a lookup's turn around in the requester, each lookup after
    // the first few follows its predecessor's answer within the spin: the thread finds it
    // awake. (Long, so that a loaded machine cannot make the requester miss it.)
    let spinning = lookups_with(TestMount::config(1).spinning(Duration::from_millis(20)));
    assert!(
        spinning.spun_requests >= LOOKUPS / 2,
        "{} of {} requests found by spinning: {spinning:?}",
        spinning.spun_requests,
        spinning.requests()
    );
}
