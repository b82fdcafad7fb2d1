//! A queue thread that has answered looks for the next request for `UringConfig::spin` before
//! it sleeps, while requests come that fast from one requester; the transport counts the
//! requests found so (`TransportStats::spun_requests`). These tests check the count against a
//! requester making lookups one after another, and against two taking turns. Needs root and a
//! kernel with /sys/module/fuse/parameters/enable_uring (turned on for the test and restored
//! after); skipped with a printed reason otherwise.

mod common;

use std::time::Duration;

use common::{missing_lookups_on_cpu, on_cpu, skip_reason, EnableUring, TestMount};
use squashd_fuse_uring::{TransportStats, UringConfig};
use std::sync::mpsc;

/// Lookups the requester makes, one after another.
const LOOKUPS: u64 = 200;

/// Mounts with `config`, makes [`LOOKUPS`] lookups of missing names (never cached, so each is a
/// request) from CPU 0, and returns the transport's counters once it has ended.
fn lookups_with(config: UringConfig) -> TransportStats {
    lookups_by(config, |root| missing_lookups_on_cpu(root, 0, LOOKUPS))
}

/// Mounts with `config`, has `requesters` make their requests under the mount's root, and
/// returns the transport's counters once it has ended.
fn lookups_by(config: UringConfig, requesters: impl FnOnce(std::path::PathBuf)) -> TransportStats {
    let (mount, outcome) = TestMount::mount_with_ring(&config, 1);
    outcome.expect("the ring registers");
    requesters(mount.path());
    let stats = mount.transport.as_ref().expect("transport").stats();
    mount.unmount_ring();
    stats
}

/// Two requesters on CPU 0 (one queue, one thread answering) take turns: each looks up a
/// missing name, then hands the turn to the other, [`LOOKUPS`] in all.
fn lookups_in_turns(root: std::path::PathBuf) {
    let (to_second, second_turn) = mpsc::channel::<u64>();
    let (to_first, first_turn) = mpsc::channel::<u64>();
    let turns = |name: &'static str, mine: mpsc::Receiver<u64>, other: mpsc::Sender<u64>| {
        let root = root.clone();
        on_cpu(0, move || {
            while let Ok(i) = mine.recv() {
                if i >= LOOKUPS {
                    let _ = other.send(i);
                    return;
                }
                assert!(std::fs::symlink_metadata(root.join(format!("{name}-{i}"))).is_err());
                if other.send(i + 1).is_err() {
                    return;
                }
            }
        })
    };
    let first = turns("first", first_turn, to_second);
    let second = turns("second", second_turn, to_first.clone());
    to_first.send(0).expect("first turn");
    first.join().expect("first requester");
    second.join().expect("second requester");
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

#[test]
fn requesters_taking_turns_get_no_spin() {
    if let Some(reason) = skip_reason() {
        println!("SKIPPED: {reason}");
        return;
    }
    let _uring = EnableUring::on();
    // The same spin as above, but each request comes from another thread than the one before:
    // many requesters keep the threads busy and the CPUs wanted, so none spins.
    let turns = lookups_by(
        TestMount::config(1).spinning(Duration::from_millis(20)),
        lookups_in_turns,
    );
    assert!(turns.requests() >= LOOKUPS, "{turns:?}");
    assert_eq!(turns.spun_requests, 0, "{turns:?}");
}
