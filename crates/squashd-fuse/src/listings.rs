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
//! duplicate.
//!
//! Better still, a request from 0 that comes while another opener's fill is under way can wait
//! for that fill's end, and then get the one-entry answer: one request for that opener instead
//! of two (the full answer and its own end), and no entries built twice. It holds its thread
//! (and ring entry) while it waits, and the fill's end may need one of those, so a request
//! waits only where the transport allows it ([`with_listing_waits`]: the ring's per-CPU entry
//! threads, fewer at once per queue than the queue has entries), and never longer than the
//! transport says ([`FILL_WAIT`] on the ring: a fill abandoned halfway, an opener that read one
//! page and closed).

use fuser::INodeNo;
use squashd_core::DirEntry;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

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

/// The cached listings known of the directories of one turn, and how many requests wait for
/// one of their fills to end.
#[derive(Default)]
pub(crate) struct KnownListings {
    known: HashMap<u64, CachedListing>,
    waiting: usize,
}

impl KnownListings {
    pub(crate) fn get(&self, node: INodeNo) -> Option<CachedListing> {
        self.known.get(&node.0).copied()
    }

    /// Entries from position 0 were answered in full.
    pub(crate) fn filling(&mut self, node: INodeNo) {
        if self.known.len() >= KNOWN_PER_TURN {
            self.known.clear();
        }
        self.known.entry(node.0).or_insert(CachedListing::Filling);
    }

    /// The end was answered: a fill is complete. True if requests wait for a fill of this
    /// turn's directories (they must be woken).
    #[must_use]
    fn ended(&mut self, node: INodeNo) -> bool {
        if let Some(state) = self.known.get_mut(&node.0) {
            *state = CachedListing::Complete;
        }
        self.waiting > 0
    }

    /// A request came that a complete cache would have answered (the kernel dropped it, or
    /// the listing was read past a short answer): the next listing from 0 fills it again.
    pub(crate) fn forget(&mut self, node: INodeNo) {
        self.known.remove(&node.0);
    }
}

/// The longest a listing request from 0 of a ring mount waits for another opener's fill of the
/// same directory to end. A walker's next `getdents` (the one that ends its fill) follows its
/// first at once, unless the walker is preempted (a few ms on a loaded machine); a fill that
/// never ends (an opener that read one page and closed) costs each request that waits for it
/// this once.
pub const FILL_WAIT: Duration = Duration::from_millis(10);

/// Which transport queue the listing requests of this thread come from, and how many of that
/// queue's requests may wait for a fill at once (set by [`with_listing_waits`]).
#[derive(Clone, Copy)]
struct WaitAllowance {
    queue: usize,
    limit: u32,
    timeout: Duration,
}

thread_local! {
    static WAIT_ALLOWANCE: Cell<Option<WaitAllowance>> = const { Cell::new(None) };
}

/// Runs `f` (the dispatch of one request) with its listing requests allowed to wait for
/// another opener's fill of the same directory (see the module's documentation): at most
/// `limit` requests of transport queue `queue` wait at once, per mount, each at most
/// `timeout`.
///
/// A transport allows it only where a waiting request holds up no other request: a thread that
/// holds this one request (the ring's per-CPU entry threads), and fewer waits per queue than
/// the queue has other entries, so that the request that ends the fill always finds an entry.
/// Without it (the /dev/fuse readers, the ring's idle-start thread, tests), no request waits.
pub fn with_listing_waits<R>(
    queue: usize,
    limit: u32,
    timeout: Duration,
    f: impl FnOnce() -> R,
) -> R {
    struct Restore(Option<WaitAllowance>);
    impl Drop for Restore {
        fn drop(&mut self) {
            WAIT_ALLOWANCE.set(self.0);
        }
    }
    let _restore = Restore(WAIT_ALLOWANCE.replace(Some(WaitAllowance {
        queue,
        limit,
        timeout,
    })));
    f()
}

/// Requests waiting for a fill, per transport queue (queues past the slots share them, which
/// only lets fewer wait).
struct WaitingByQueue([AtomicU32; WAIT_SLOTS]);

const WAIT_SLOTS: usize = 64;

impl Default for WaitingByQueue {
    fn default() -> Self {
        WaitingByQueue(std::array::from_fn(|_| AtomicU32::new(0)))
    }
}

impl WaitingByQueue {
    /// Takes one of `allowance`'s waits, if one is free: the slot to give back.
    fn reserve(&self, allowance: WaitAllowance) -> Option<&AtomicU32> {
        let slot = &self.0[allowance.queue % WAIT_SLOTS];
        slot.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < allowance.limit).then_some(n + 1)
        })
        .ok()
        .map(|_| slot)
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
pub(crate) struct ListingTurns {
    stripes: [TurnStripe; LISTING_TURNS],
    waiting: WaitingByQueue,
}

/// The turns of the directories that hash to one lock, and where requests wait for a fill of
/// one of them to end.
#[derive(Default)]
struct TurnStripe {
    known: Mutex<KnownListings>,
    fill_ended: Condvar,
}

const LISTING_TURNS: usize = 64;

impl Default for ListingTurns {
    fn default() -> Self {
        ListingTurns {
            stripes: std::array::from_fn(|_| TurnStripe::default()),
            waiting: WaitingByQueue::default(),
        }
    }
}

impl ListingTurns {
    /// Waits for the turn of directory `node`; the turn ends when the guard drops.
    ///
    /// A request from `offset` 0 that finds another opener's fill of the directory under way
    /// first waits for that fill to end, if this thread's transport allows it
    /// ([`with_listing_waits`]): the turn it then gets knows the listing complete, and the
    /// request gets the one-entry answer. `waiting` is called as the wait starts.
    pub(crate) fn take(
        &self,
        node: INodeNo,
        offset: u64,
        waiting: impl FnOnce(),
    ) -> ListingTurn<'_> {
        let stripe = &self.stripes[(node.0 % LISTING_TURNS as u64) as usize];
        let mut known = stripe.known.lock().unwrap_or_else(|e| e.into_inner());
        let filling = |k: &mut KnownListings| k.get(node) == Some(CachedListing::Filling);
        if offset == 0 && filling(&mut known) {
            let allowance = WAIT_ALLOWANCE.get();
            let slot = allowance.and_then(|allowance| self.waiting.reserve(allowance));
            if let (Some(slot), Some(allowance)) = (slot, allowance) {
                waiting();
                known.waiting += 1;
                known = stripe
                    .fill_ended
                    .wait_timeout_while(known, allowance.timeout, filling)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                known.waiting -= 1;
                slot.fetch_sub(1, Ordering::AcqRel);
            }
        }
        ListingTurn {
            known,
            fill_ended: &stripe.fill_ended,
        }
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
pub struct ListingTurn<'a> {
    known: MutexGuard<'a, KnownListings>,
    fill_ended: &'a Condvar,
}

impl ListingTurn<'_> {
    /// What is known of the cached listings of this turn's directories.
    pub(crate) fn known(&mut self) -> &mut KnownListings {
        &mut self.known
    }

    /// The end of `node`'s listing is answered in this turn: a fill is complete. Requests
    /// waiting for it go on once this turn ends (after the answer reached the kernel).
    pub(crate) fn ended(&mut self, node: INodeNo) {
        if self.known.ended(node) {
            self.fill_ended.notify_all();
        }
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
