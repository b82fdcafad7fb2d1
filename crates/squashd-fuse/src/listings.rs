//! The locks and the knowledge that directory listings go through: turns that answer the
//! listing requests of one directory one at a time, what squashd knows of the kernel's cache
//! of each listing, and the listings kept between the readdir calls that read one piece by
//! piece when the kernel sends no OPENDIR (so readdir has no handle to keep them in).
//!
//! How the kernel caches a listing (fs/fuse/readdir.c): a directory opened with
//! FOPEN_CACHE_DIR (every directory, with no opendir) keeps the entries of the answers it gets,
//! from position 0 on and in order, in its page cache; the cache serves listings only once an
//! answer with no entries (the end) came at the position where it stops. Until then every
//! `getdents` of every opener is a request, and nothing makes a second opener wait for the
//! first: parallel walkers of a cold mount reach a directory together and each lists it, two
//! requests each (the entries, then the end). Once the cache is complete, a `getdents` at a
//! position in it is answered from it.
//!
//! So a request that reaches squashd for a listing whose cache the kernel completed (it was
//! sent just before) is answered with one entry only: its next `getdents` then finds the rest
//! in the cache, one request instead of two, and neither squashd nor the kernel build the
//! entries and their attributes again. A READDIRPLUS from 0 that comes while another opener's
//! answer is filling the cache gets its entries without attributes (a zero `entry_out`, which
//! the kernel does not link): that other answer links them, and squashd loads no inode for a
//! duplicate. (Holding such a request until the fill ends would save its second request too,
//! but it would hold a request thread or ring entry that the fill's end may need.)

use fuser::INodeNo;
use squashd_core::DirEntry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// What squashd knows of the kernel's cache of one directory's listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CachedListing {
    /// Entries from position 0 on were answered: the kernel is filling its cache, which is
    /// complete once the end is answered.
    Filling,
    /// The end was answered after a fill: the kernel holds the whole listing, and answers
    /// every `getdents` from it but those that were on their way.
    Complete,
}

/// Directories whose cached listing is known, per turn (past it, the turn's are forgotten:
/// a forgotten listing costs one more full answer, nothing is lost).
const KNOWN_PER_TURN: usize = 4096;

/// The cached listings known of the directories of one turn.
#[derive(Default)]
pub(crate) struct KnownListings(HashMap<u64, CachedListing>);

impl KnownListings {
    pub(crate) fn get(&self, node: INodeNo) -> Option<CachedListing> {
        self.0.get(&node.0).copied()
    }

    /// Entries from position 0 were answered in full.
    pub(crate) fn filling(&mut self, node: INodeNo) {
        if self.0.len() >= KNOWN_PER_TURN {
            self.0.clear();
        }
        self.0.entry(node.0).or_insert(CachedListing::Filling);
    }

    /// The end was answered: a fill is complete.
    pub(crate) fn ended(&mut self, node: INodeNo) {
        if let Some(state) = self.0.get_mut(&node.0) {
            *state = CachedListing::Complete;
        }
    }

    /// A request came that a complete cache would have answered (the kernel dropped it, or
    /// the listing was read past a short answer): the next listing from 0 fills it again.
    pub(crate) fn forget(&mut self, node: INodeNo) {
        self.0.remove(&node.0);
    }
}

/// Turns at answering listing requests, one directory at a time, each with what is known of
/// its directories' cached listings.
///
/// Parallel walkers of a cold mount (16 `find`s at once) reach the same directories together,
/// and each sends its own listing requests before any reply has filled the kernel's listing
/// cache. Answered one after another, the walkers drift apart and the later ones find listings
/// cached (measured: bench/results/notes-from-code-comments.md, "listing turns"); those whose
/// request was already on its way get the short answer (see the module's documentation).
/// Directories hash onto a few locks, so listings of different directories still go in
/// parallel.
pub(crate) struct ListingTurns([Mutex<KnownListings>; LISTING_TURNS]);

const LISTING_TURNS: usize = 64;

impl Default for ListingTurns {
    fn default() -> Self {
        ListingTurns(std::array::from_fn(|_| Mutex::default()))
    }
}

impl ListingTurns {
    /// Waits for the turn of directory `node`; the turn ends when the guard drops.
    pub(crate) fn take(&self, node: INodeNo) -> ListingTurn<'_> {
        ListingTurn(
            self.0[(node.0 % LISTING_TURNS as u64) as usize]
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        )
    }
}

/// A directory's turn at being listed, returned with a listing: hold it until the reply is
/// sent, so that another request for the same listing is answered after this one has reached
/// the kernel.
///
/// Parallel walkers of a cold mount send duplicate listing requests for the same directories;
/// answered one after another, the later walkers find the listing in the kernel's cache instead
/// of walking in lockstep with the first. (Directories share a few locks, striped by node, so
/// different directories are still listed in parallel.)
#[must_use = "the turn ends when this drops: hold it until the reply is sent"]
pub struct ListingTurn<'a>(MutexGuard<'a, KnownListings>);

impl ListingTurn<'_> {
    /// What is known of the cached listings of this turn's directories.
    pub(crate) fn known(&mut self) -> &mut KnownListings {
        &mut self.0
    }
}

impl std::fmt::Debug for ListingTurn<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ListingTurn")
    }
}
/// Listings kept between readdir calls without a handle (one per directory being read).
const MAX_LISTINGS: usize = 256;

/// Listings being read in several readdir calls without a handle, by node.
///
/// Without a handle, each call would read the directory anew, and a listing bigger than one
/// reply buffer would be read once per buffer; keeping it also keeps the offsets of one pass
/// stable. The kernel comes back at least once, to find the end: the listing is forgotten at
/// that call. Bounded: past [`MAX_LISTINGS`] directories being read at once, all are forgotten
/// (a forgotten listing is read again, nothing is lost).
#[derive(Default)]
pub(crate) struct KeptListings(Mutex<HashMap<u64, Arc<[DirEntry]>>>);

impl KeptListings {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Arc<[DirEntry]>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The listing of `node` kept by an earlier call, if any.
    pub(crate) fn get(&self, node: INodeNo) -> Option<Arc<[DirEntry]>> {
        self.lock().get(&node.0).cloned()
    }

    /// Keeps `entries` for the next call on `node`, or forgets them when the call reached
    /// past the end (`done`).
    pub(crate) fn keep(&self, node: INodeNo, entries: &Arc<[DirEntry]>, done: bool) {
        if done && !self.lock().contains_key(&node.0) {
            return;
        }
        let mut kept = self.lock();
        if done {
            kept.remove(&node.0);
        } else {
            if kept.len() >= MAX_LISTINGS {
                kept.clear();
            }
            kept.insert(node.0, entries.clone());
        }
    }
}
