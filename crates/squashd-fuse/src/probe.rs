//! The live figures of one mount (requests served, requests failed, handles open), counted by
//! the file system and read from outside the session, by a daemon's `status`.

use squashd_core::read_ahead::{RandomSweep, SweepStats};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

/// Live figures of one mount, readable from outside the session (by a daemon's `status`).
///
/// Clones share the same counters.
#[derive(Debug, Clone, Default)]
pub struct MountProbe {
    counters: Arc<MountCounters>,
}

#[derive(Debug, Default)]
struct MountCounters {
    /// Signed, so that a release of a handle that was never opened cannot wrap the count.
    open_handles: AtomicI64,
    failed_requests: AtomicU64,
    requests: AtomicU64,
    /// READDIR and READDIRPLUS requests (also counted in `requests`).
    listings: AtomicU64,
    /// Listing requests given the short answer of a listing the kernel has cached.
    short_listings: AtomicU64,
    /// READDIRPLUS answers whose entries the kernel does not link (another opener's do).
    unlinked_listings: AtomicU64,
    /// Listing requests that waited for another opener's fill to end.
    waited_listings: AtomicU64,
    /// Entries other than directories listed without their attributes (no walk stat them).
    bare_entries: AtomicU64,
    /// LOOKUPs of non-directories while listings were bare.
    late_lookups: AtomicU64,
    /// What the last failed request's error said (the image and the byte that was bad).
    last_error: std::sync::Mutex<Option<String>>,
    /// The session's transport, once it runs.
    transport: std::sync::OnceLock<crate::server::TransportProbe>,
    /// The random sweep of the mount's files, once the file system is made.
    sweep: std::sync::OnceLock<Arc<RandomSweep>>,
}

impl MountProbe {
    /// Files and directories open through the mount now.
    pub fn open_handles(&self) -> u64 {
        self.counters.open_handles.load(Ordering::Relaxed).max(0) as u64
    }

    /// Requests answered with EIO because the image could not be read or is corrupt.
    pub fn failed_requests(&self) -> u64 {
        self.counters.failed_requests.load(Ordering::Relaxed)
    }

    /// Requests served: lookups, attributes, reads, listings, links, xattrs and statfs (not
    /// the kernel's access checks, flushes, releases and forgets). What the kernel answers from
    /// its own caches never gets here: this shows how much of a workload it takes off the
    /// daemon.
    pub fn requests(&self) -> u64 {
        self.counters.requests.load(Ordering::Relaxed)
    }

    /// Listing requests served (READDIR and READDIRPLUS, also counted in
    /// [`MountProbe::requests`]): parallel walkers of a cold mount each list the directories
    /// they reach together until the kernel has cached the listing.
    pub fn listings(&self) -> u64 {
        self.counters.listings.load(Ordering::Relaxed)
    }

    /// Listing requests given one entry only, because the kernel's cache of the listing was
    /// complete by then (the requester reads the rest from it).
    pub fn short_listings(&self) -> u64 {
        self.counters.short_listings.load(Ordering::Relaxed)
    }

    /// READDIRPLUS answers from 0 given while another opener's answer was filling the
    /// kernel's cache of the listing: names, nodes and types only, which the kernel does not
    /// link (that other answer links them).
    pub fn unlinked_listings(&self) -> u64 {
        self.counters.unlinked_listings.load(Ordering::Relaxed)
    }

    /// Listing requests from 0 that waited (or wait now) for another opener's fill of the
    /// directory to end (most then get the one-entry answer, counted in
    /// [`MountProbe::short_listings`]).
    pub fn waited_listings(&self) -> u64 {
        self.counters.waited_listings.load(Ordering::Relaxed)
    }

    /// Entries other than directories that listings gave without their attributes, while the
    /// mount's walks did not stat what they listed: the kernel made no inode for them, and a
    /// stat of one costs a LOOKUP ([`MountProbe::late_lookups`]).
    pub fn bare_entries(&self) -> u64 {
        self.counters.bare_entries.load(Ordering::Relaxed)
    }

    /// LOOKUPs that found a non-directory while listings were bare: past a share of the bare
    /// entries, listings give every attribute again.
    pub fn late_lookups(&self) -> u64 {
        self.counters.late_lookups.load(Ordering::Relaxed)
    }

    /// Which transport carries the mount's requests ("dev-fuse" before the session runs).
    pub fn transport(&self) -> crate::server::TransportInfo {
        self.counters
            .transport
            .get()
            .map(|t| t.info())
            .unwrap_or_default()
    }

    /// What the sweeps beside random readers of the mount's files did.
    pub fn sweep_stats(&self) -> SweepStats {
        self.counters
            .sweep
            .get()
            .map(|s| s.stats())
            .unwrap_or_default()
    }

    pub(crate) fn set_sweep(&self, sweep: Arc<RandomSweep>) {
        let _ = self.counters.sweep.set(sweep);
    }

    pub(crate) fn set_transport(&self, transport: crate::server::TransportProbe) {
        let _ = self.counters.transport.set(transport);
    }

    pub(crate) fn opened(&self) {
        self.counters.open_handles.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn closed(&self) {
        self.counters.open_handles.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn listing(&self) {
        self.counters.listings.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn short_listing(&self) {
        self.counters.short_listings.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn waited_listing(&self) {
        self.counters
            .waited_listings
            .fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn unlinked_listing(&self) {
        self.counters
            .unlinked_listings
            .fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn listed_bare(&self, entries: u64) {
        self.counters
            .bare_entries
            .fetch_add(entries, Ordering::Relaxed);
    }

    pub(crate) fn late_lookup(&self) {
        self.counters.late_lookups.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn request(&self) {
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// What the last request that failed with EIO was told, if one did.
    pub fn last_error(&self) -> Option<String> {
        self.counters
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Counts a request that failed with EIO, and keeps what its error said.
    pub fn failed(&self, error: &dyn std::fmt::Display) {
        self.counters
            .failed_requests
            .fetch_add(1, Ordering::Relaxed);
        *self
            .counters
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(error.to_string());
    }
}
