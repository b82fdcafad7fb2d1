//! The in-memory index of a disk cache: which entries exist, their recency, and the bytes that may
//! be on disk. Pure bookkeeping, no I/O: the caller holds it under a mutex only while it decides,
//! and does the file work with the mutex released.
//!
//! The budget holds at every instant because bytes are charged before a file is written and
//! released only after a file is unlinked: an entry being written (`Pending`) is charged for its
//! full length before its temporary file is created, and an entry chosen for eviction (`Dying`)
//! stays charged until the caller has removed its file. Both states also keep the id taken, so
//! that no put of the same unit can rename a file into place that an unlink meant for the old one
//! would then remove.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use super::entry::EntryId;

/// How often, at most, a hit moves an entry's mtime forward: recency survives a restart through
/// mtimes, and touching a file on every hit would write metadata on every read.
pub(super) const TOUCH_INTERVAL: Duration = Duration::from_secs(60);

#[derive(Debug)]
enum State {
    /// Reserved, its file being written.
    Pending,
    /// On disk and readable; `tick` is its place in the recency order.
    Ready { tick: u64 },
    /// Chosen for removal, its file being unlinked.
    Dying,
}

#[derive(Debug)]
struct Slot {
    state: State,
    /// The entry file's length.
    len: u64,
    /// Tells this slot from a later one of the same id.
    generation: u64,
    /// When the file's mtime was last set.
    touched: SystemTime,
}

/// A hit in the index.
pub(super) struct Hit {
    /// The entry's generation, for [`Index::mark_dying`] should its file turn out bad.
    pub generation: u64,
    /// Whether the caller should move the file's mtime to now.
    pub touch: bool,
}

/// What [`Index::reserve`] decided.
pub(super) enum Reservation {
    /// The unit is already there, being written or being removed: nothing to do.
    Present,
    /// Charged; write the file, then [`Index::commit`] or [`Index::abort`] this generation.
    Reserved(u64),
    /// Not enough room: this many more bytes must be released first.
    Short(u64),
}

/// The index. See the module's documentation.
#[derive(Debug, Default)]
pub(super) struct Index {
    slots: HashMap<EntryId, Slot>,
    /// Ready entries, least recently used first.
    recency: BTreeMap<u64, EntryId>,
    next_tick: u64,
    next_generation: u64,
    /// Bytes of every file that may be on disk: ready, pending and dying entries, and files that
    /// could not be unlinked.
    charged: u64,
    /// Bytes and number of ready entries.
    ready_len: u64,
    ready_count: u64,
    /// Pending and dying entries: work under way that will release bytes or add an evictable entry.
    busy: u64,
}

impl Index {
    /// Adds an entry found on disk at open; call in order of recency, oldest first.
    pub(super) fn insert_found(&mut self, id: EntryId, len: u64, mtime: SystemTime) {
        let generation = self.add_pending(id, len, mtime);
        self.commit(id, generation, mtime);
    }

    /// Adds `id` as pending (its file being written), charged `len` bytes; its generation.
    fn add_pending(&mut self, id: EntryId, len: u64, touched: SystemTime) -> u64 {
        let generation = self.generation();
        self.slots.insert(
            id,
            Slot {
                state: State::Pending,
                len,
                generation,
                touched,
            },
        );
        self.charged += len;
        self.busy += 1;
        generation
    }

    /// Looks up a ready entry and makes it the most recently used.
    pub(super) fn hit(&mut self, id: EntryId, now: SystemTime) -> Option<Hit> {
        let slot = self.slots.get_mut(&id)?;
        let State::Ready { tick } = &mut slot.state else {
            return None;
        };
        self.recency.remove(tick);
        *tick = self.next_tick;
        self.next_tick += 1;
        self.recency.insert(*tick, id);
        // A clock set back makes duration_since fail: touch then too, so the mtime is sane again.
        let touch = now
            .duration_since(slot.touched)
            .map_or(true, |age| age >= TOUCH_INTERVAL);
        if touch {
            slot.touched = now;
        }
        Some(Hit {
            generation: slot.generation,
            touch,
        })
    }

    /// Charges `len` bytes for writing `id`, if they fit in `budget`.
    pub(super) fn reserve(&mut self, id: EntryId, len: u64, budget: u64) -> Reservation {
        if self.slots.contains_key(&id) {
            return Reservation::Present;
        }
        let total = self.charged + len;
        if total > budget {
            return Reservation::Short(total - budget);
        }
        Reservation::Reserved(self.add_pending(id, len, SystemTime::UNIX_EPOCH))
    }

    /// Marks the least recently used ready entries dying until they hold at least `wanted` bytes
    /// (or none are left), and returns them with their lengths. Their bytes stay charged until
    /// [`Index::unlinked`].
    pub(super) fn evict(&mut self, wanted: u64) -> Vec<(EntryId, u64)> {
        let mut victims = Vec::new();
        let mut freed = 0;
        while freed < wanted {
            let Some((_, id)) = self.recency.pop_first() else {
                break;
            };
            let len = self.make_dying(id);
            freed += len;
            victims.push((id, len));
        }
        victims
    }

    /// Makes a ready entry of this generation dying (its file was found bad); returns its length.
    pub(super) fn mark_dying(&mut self, id: EntryId, generation: u64) -> Option<u64> {
        let slot = self.slots.get(&id).filter(|s| s.generation == generation)?;
        let State::Ready { tick } = slot.state else {
            return None;
        };
        self.recency.remove(&tick);
        Some(self.make_dying(id))
    }

    /// A pending entry's file is in place: it becomes the most recently used.
    pub(super) fn commit(&mut self, id: EntryId, generation: u64, now: SystemTime) {
        let Some(slot) = self
            .slots
            .get_mut(&id)
            .filter(|s| s.generation == generation)
        else {
            return;
        };
        if !matches!(slot.state, State::Pending) {
            return;
        }
        slot.state = State::Ready {
            tick: self.next_tick,
        };
        slot.touched = now;
        self.recency.insert(self.next_tick, id);
        self.next_tick += 1;
        self.ready_len += slot.len;
        self.ready_count += 1;
        self.busy -= 1;
    }

    /// A pending entry could not be written; `released` says whether its temporary file is gone
    /// (false if it could not be removed: its bytes then stay charged for good).
    pub(super) fn abort(&mut self, id: EntryId, generation: u64, released: bool) {
        self.remove_if(id, generation, |s| matches!(s, State::Pending), released);
    }

    /// A dying entry's file is gone; `released` says whether its bytes left the disk (false if
    /// the unlink failed: the file may still be there, so its bytes stay charged for good).
    pub(super) fn unlinked(&mut self, id: EntryId, released: bool) {
        if let Some(generation) = self.slots.get(&id).map(|s| s.generation) {
            self.remove_if(id, generation, |s| matches!(s, State::Dying), released);
        }
    }

    /// Whether work under way may yet free room (a pending entry becomes evictable, a dying one
    /// releases its bytes).
    pub(super) fn busy(&self) -> bool {
        self.busy > 0
    }

    /// Bytes that may be on disk (never above the budget).
    pub(super) fn charged(&self) -> u64 {
        self.charged
    }

    /// Bytes and number of ready entries.
    pub(super) fn ready(&self) -> (u64, u64) {
        (self.ready_len, self.ready_count)
    }

    fn generation(&mut self) -> u64 {
        self.next_generation += 1;
        self.next_generation
    }

    /// Makes a ready entry, already out of the recency order, dying; returns its length.
    fn make_dying(&mut self, id: EntryId) -> u64 {
        let Some(slot) = self.slots.get_mut(&id) else {
            return 0;
        };
        slot.state = State::Dying;
        self.ready_len -= slot.len;
        self.ready_count -= 1;
        self.busy += 1;
        slot.len
    }

    fn remove_if(
        &mut self,
        id: EntryId,
        generation: u64,
        state: fn(&State) -> bool,
        release: bool,
    ) {
        let Some(slot) = self
            .slots
            .get(&id)
            .filter(|s| s.generation == generation && state(&s.state))
        else {
            return;
        };
        if release {
            self.charged -= slot.len;
        }
        self.busy -= 1;
        self.slots.remove(&id);
    }
}
