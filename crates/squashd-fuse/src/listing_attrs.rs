//! Which entries of a listing reach the kernel with their attributes.
//!
//! A READDIRPLUS answer can give an entry with its attributes, and the kernel then makes a
//! dentry and an inode for it (`fuse_direntplus_link`), or with a zero `entry_out`: only its
//! name, node and type, as READDIR gives them. Attributes for every entry save one LOOKUP per
//! entry for walks that stat what they list (`du`, `ls -l`, `tar`, `rsync`). For walks that
//! only read names (`find` without tests, `fts` of names, globs, Python's import path cache)
//! they cost squashd an inode load and the kernel an inode and a dentry per entry, nearly all
//! for files nobody stats: a cold `find` of usr took about half the time without them
//! (bench/results/2026-11-27-s11.md). The kernel's own squashfs makes neither until a name is
//! looked up.
//!
//! So directories always come with their attributes (a walk opens each of them: one LOOKUP
//! saved per directory), and other entries come with theirs only while the mount's walks stat
//! what they list. That is learnt from the LOOKUPs of non-directories ("late" lookups, of
//! entries listed without attributes): while at least one entry in [`LATE_SHARE`] of those
//! listed bare is looked up afterwards (and at least [`LATE_MIN`] of them), listings give
//! every entry's attributes, for the next [`HOLD`] entries listed; then bare listings are
//! tried again. A `du` of a cold mount so pays a few hundred LOOKUPs before its listings carry
//! attributes again; a `find` pays none.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// One late lookup in this many entries listed bare makes listings carry every attribute.
pub(crate) const LATE_SHARE: u64 = 4;
/// Late lookups needed before the share counts (an `ls -l` of one directory does not switch).
pub(crate) const LATE_MIN: u64 = 64;
/// Entries listed with every attribute before bare listings are tried again.
pub(crate) const HOLD: u64 = 1 << 16;
/// Past this many entries listed bare, both counts are halved: the share follows recent walks.
const WINDOW: u64 = 1 << 14;

/// How a mount's listings choose to give attributes, and what it learnt.
#[derive(Debug)]
pub(crate) struct AttrPolicy {
    /// False: every entry always comes with its attributes (the mount asked for that).
    adaptive: bool,
    /// Listings give every entry's attributes now.
    all: AtomicBool,
    /// Entries listed with every attribute since `all` was set.
    held: AtomicU64,
    /// Non-directories listed bare, in the current window.
    bare: AtomicU64,
    /// Lookups of non-directories, in the current window.
    late: AtomicU64,
}

impl AttrPolicy {
    /// A policy that learns (`adaptive`), or one that always gives every attribute.
    pub(crate) fn new(adaptive: bool) -> Self {
        AttrPolicy {
            adaptive,
            all: AtomicBool::new(!adaptive),
            held: AtomicU64::new(0),
            bare: AtomicU64::new(0),
            late: AtomicU64::new(0),
        }
    }

    /// Whether a listing gives the attributes of its entries that are not directories.
    pub(crate) fn all(&self) -> bool {
        self.all.load(Ordering::Relaxed)
    }

    /// A listing answered `entries` non-directories, bare (`bare`) or with their attributes.
    pub(crate) fn listed(&self, entries: u64, bare: bool) {
        if !self.adaptive || entries == 0 {
            return;
        }
        if !bare {
            let held = self.held.fetch_add(entries, Ordering::Relaxed) + entries;
            if held >= HOLD {
                self.held.store(0, Ordering::Relaxed);
                self.bare.store(0, Ordering::Relaxed);
                self.late.store(0, Ordering::Relaxed);
                self.all.store(false, Ordering::Relaxed);
            }
            return;
        }
        let listed = self.bare.fetch_add(entries, Ordering::Relaxed) + entries;
        if listed > WINDOW {
            // Racing halvings lose a little history; the policy only needs its trend.
            self.bare.store(listed / 2, Ordering::Relaxed);
            self.late
                .store(self.late.load(Ordering::Relaxed) / 2, Ordering::Relaxed);
        }
    }

    /// A LOOKUP found a non-directory: while listings are bare, an entry they did not link.
    pub(crate) fn looked_up(&self) {
        if !self.adaptive || self.all() {
            return;
        }
        let late = self.late.fetch_add(1, Ordering::Relaxed) + 1;
        if late >= LATE_MIN && late * LATE_SHARE >= self.bare.load(Ordering::Relaxed) {
            self.held.store(0, Ordering::Relaxed);
            self.all.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_only_walks_stay_bare() {
        let attrs = AttrPolicy::new(true);
        for _ in 0..1000 {
            attrs.listed(100, true);
        }
        // A few stats here and there (an import path, an `ls -l` of one directory).
        for _ in 0..LATE_MIN - 1 {
            attrs.looked_up();
        }
        assert!(!attrs.all());
    }

    #[test]
    fn stat_walks_switch_within_the_minimum_then_try_bare_again() {
        let attrs = AttrPolicy::new(true);
        let mut late = 0;
        for _ in 0..10 {
            attrs.listed(20, true);
            for _ in 0..20 {
                if !attrs.all() {
                    attrs.looked_up();
                    late += 1;
                }
            }
        }
        assert!(attrs.all());
        assert_eq!(late, LATE_MIN);
        attrs.listed(HOLD - 1, false);
        assert!(attrs.all());
        attrs.listed(1, false);
        assert!(!attrs.all());
    }

    #[test]
    fn a_rare_share_of_stats_does_not_switch() {
        let attrs = AttrPolicy::new(true);
        for _ in 0..200 {
            attrs.listed(LATE_SHARE * 10, true);
            for _ in 0..9 {
                attrs.looked_up();
            }
        }
        assert!(!attrs.all());
    }

    #[test]
    fn fixed_policy_always_gives_attributes() {
        let attrs = AttrPolicy::new(false);
        attrs.listed(HOLD * 2, false);
        assert!(attrs.all());
    }
}
