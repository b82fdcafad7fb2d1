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
//! entries listed without attributes): once [`LATE_MIN`] of them come within the last
//! [`WINDOW`] or so entries listed bare, listings give every entry's attributes, for the next
//! [`HOLD`] entries listed; then bare listings are tried again. No share of the entries listed
//! is asked for: a walk that stats what it lists may list far ahead of its stats (`du`'s
//! `fts` stats an entry when it visits it, after the subtrees before it), so the share seen at
//! any moment says little. A `du` of a cold mount so pays a few hundred LOOKUPs before its
//! listings carry attributes again (those of entries listed bare before the switch); a `find`
//! pays none, and a names-only walk with a few stats gets what every entry linked gives.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Late lookups that make listings carry every attribute (an `ls -l` of a small directory,
/// or a few imports, do not).
pub(crate) const LATE_MIN: u64 = 64;
/// Entries listed with every attribute before bare listings are tried again: past a whole
/// `/usr` (180k entries), so that one `du` of it probes once.
pub(crate) const HOLD: u64 = 1 << 18;
/// Past this many entries listed bare, both counts are halved: late lookups spread thin over
/// a long names-only walk do not add up to a switch.
pub(crate) const WINDOW: u64 = 1 << 14;

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
        if late >= LATE_MIN {
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
    fn stat_walks_switch_at_the_minimum_then_try_bare_again() {
        let attrs = AttrPolicy::new(true);
        // Listings far ahead of the stats, as `du` walks.
        attrs.listed(WINDOW, true);
        let mut late = 0;
        while !attrs.all() {
            attrs.looked_up();
            late += 1;
        }
        assert_eq!(late, LATE_MIN);
        attrs.listed(HOLD - 1, false);
        assert!(attrs.all());
        attrs.listed(1, false);
        assert!(!attrs.all());
    }

    #[test]
    fn late_lookups_spread_over_a_long_walk_do_not_add_up() {
        let attrs = AttrPolicy::new(true);
        for _ in 0..100 {
            attrs.listed(WINDOW / 8, true);
            for _ in 0..LATE_MIN / 16 {
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
