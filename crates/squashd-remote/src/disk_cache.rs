//! A disk cache of fetched units, shared by every remote image of a process, bounded in bytes.
//!
//! Layout: `DIR/lock`, flocked by the process that uses the directory; `DIR/units/`, one file per
//! unit (its format and name in `entry`) and, while one is written, `tmp.N` files.
//!
//! - **Bounded**: the bytes of entry files (headers included) and of files being written never
//!   exceed the budget, at any instant: a put charges its bytes before it creates its temporary
//!   file, and an evicted entry's bytes are released only once its file is unlinked (`index`).
//!   Lengths are counted, not allocated blocks (which round each file up to the file system's
//!   block, 4 KiB per 1 MiB unit at most). One thing no cache can bound: a reader that has an
//!   entry open when it is evicted keeps its blocks allocated until it closes it, at most one
//!   unit per reading thread for the time of one read.
//! - **Least recently used out first**, by an in-memory order that every hit updates.
//! - **Survives restarts**: names come from the object's identity (a hash of its full address
//!   and its version, [`UnitKey::object_identity`]) and the unit's index, so reopening finds the same units again; recency is carried by mtimes, which a hit
//!   moves forward at most once a minute (`index::TOUCH_INTERVAL`) and which order the entries
//!   at open.
//! - **Crash-safe without fsync**: an entry is written to a temporary file and renamed into place,
//!   so a reader never sees a half-written entry while the process runs. After a power loss, a
//!   rename can reach the disk before the data it names; such a torn entry fails its checksum at
//!   the first read, which removes it, so the unit is fetched again. An fsync per unit would stall
//!   every fetch on a disk flush to protect only what the checksum already catches, in a cache
//!   whose worst loss is a refetch. Temporary files left by a crash are removed at open.
//! - **Concurrency**: the index is behind one mutex, held only for in-memory bookkeeping; files are
//!   read, written, renamed and unlinked with it released.
//!
//! - **Private**: the directories are 0700 and the files 0600, set explicitly whatever the
//!   umask (and set again at open on a directory an older version left open to others); a
//!   directory owned by another user is refused (`open`). Entries hold what the daemon's users
//!   read, and a directory another user owns could be filled with forged entries by them.
//!
//! Errors never reach the caller of [`DiskCache::get`] or [`DiskCache::put`]: a cache that cannot
//! be read or written misses, and says so in the log and in [`DiskCacheStats`].

mod entry;
mod index;
mod open;
mod stats;

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use entry::{EntryId, Found};
use index::{Index, Reservation};
use sha2::{Digest, Sha256};
use stats::Counters;
pub use stats::DiskCacheStats;

/// How long a put waits for other puts and evictions to free room when every byte of the budget
/// is held by them; past it the unit is not cached (a stuck disk must not stall fetches forever).
const ROOM_WAIT: Duration = Duration::from_secs(10);

/// Identifies a unit: its object and its index in it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct UnitKey {
    /// The object's identity, written in its entries' headers and logged: for a remote image,
    /// [`UnitKey::object_identity`] of its full address and its version, so that a unit of
    /// another object, or of an object since replaced, is never taken for one of this object.
    pub object: Arc<str>,
    /// The unit's index: its offset in the object divided by the unit size.
    pub index: u64,
}

impl UnitKey {
    /// The identity of the object at `address` in `version` (its ETag, else its Last-Modified
    /// and size, else its size alone): `sha256:` and 64 hex digits.
    ///
    /// The address is the full one, query and user information included: two addresses that
    /// differ only there (`?img=1` and `?img=2`, two presigned URLs) may name two objects, and
    /// a version that is only a size cannot tell them apart. The cost: an object reached by a
    /// presigned URL whose signature changes is a new object to the cache at each new URL.
    /// Hashed, because the full address may hold a secret (a password, a signature), and
    /// identities are written in entry files and in log lines; the hash names the address
    /// without revealing it. The address's length comes first, so that no two
    /// (address, version) pairs hash the same bytes.
    pub fn object_identity(address: &str, version: &str) -> Arc<str> {
        let digest = Sha256::new()
            .chain_update((address.len() as u64).to_le_bytes())
            .chain_update(address)
            .chain_update(version)
            .finalize();
        let mut identity = String::with_capacity(7 + 64);
        identity.push_str("sha256:");
        for byte in digest {
            identity.push_str(&format!("{byte:02x}"));
        }
        identity.into()
    }
}

/// Why a disk cache could not be opened. The message names the directory.
#[derive(Debug, thiserror::Error)]
pub enum DiskCacheError {
    /// The directory, its lock file or its units directory could not be created, opened or listed.
    #[error("disk cache {}: {what}: {error}", dir.display())]
    Io {
        /// The cache directory.
        dir: PathBuf,
        /// What could not be done.
        what: &'static str,
        /// The operating system's error.
        error: io::Error,
    },
    /// The directory (or its units directory) belongs to another user: refused, not taken over.
    #[error(
        "disk cache {}: {} is owned by uid {owner}, not by this process's uid {me}: another user \
         could forge entries in it; remove it, or `chown -R {me} {}`, or give this process another \
         cache directory",
        dir.display(),
        path.display(),
        dir.display()
    )]
    NotOwned {
        /// The cache directory.
        dir: PathBuf,
        /// The directory found owned by another user.
        path: PathBuf,
        /// Its owner's uid.
        owner: u32,
        /// This process's effective uid.
        me: u32,
    },
    /// Another process uses the directory.
    #[error(
        "disk cache {}: in use by another process (which holds the lock on {}/lock); \
         stop it, or give this one another cache directory",
        dir.display(),
        dir.display()
    )]
    InUse {
        /// The cache directory.
        dir: PathBuf,
    },
}

/// A disk cache of units; share it between images as an `Arc<DiskCache>`.
pub struct DiskCache {
    dir: PathBuf,
    units: PathBuf,
    budget: u64,
    index: Mutex<Index>,
    /// Signalled whenever bytes are released or an entry becomes evictable.
    room: Condvar,
    counters: Counters,
    next_temp: AtomicU64,
    /// Holds the directory's lock for as long as the cache lives.
    _lock: File,
}

impl std::fmt::Debug for DiskCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskCache")
            .field("dir", &self.dir)
            .field("budget", &self.budget)
            .finish()
    }
}

impl DiskCache {
    /// Opens (creating it if need be) the cache in `dir`, holding at most `budget_bytes`.
    ///
    /// Takes the directory's lock, so that no other process uses it at the same time (refused
    /// with [`DiskCacheError::InUse`]), removes temporary files left by a crash, and indexes the
    /// entries already there, evicting the least recently used if they exceed the budget.
    /// A budget of 0 empties the directory and caches nothing: a caller that wants no disk
    /// cache does not open one.
    pub fn open(dir: &Path, budget_bytes: u64) -> Result<Arc<DiskCache>, DiskCacheError> {
        let opened = open::open(dir, budget_bytes)?;
        let (bytes, entries) = opened.index.ready();
        tracing::info!(
            "disk cache {}: {entries} entries, {bytes} of {budget_bytes} bytes",
            dir.display()
        );
        Ok(Arc::new(DiskCache {
            dir: dir.to_path_buf(),
            units: opened.units,
            budget: budget_bytes,
            index: Mutex::new(opened.index),
            room: Condvar::new(),
            counters: Counters::default(),
            next_temp: AtomicU64::new(0),
            _lock: opened.lock,
        }))
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The unit `key`, if the cache has it. `None` if it is absent, or found corrupt (it is then
    /// removed, so the caller fetches it and puts it again).
    pub fn get(&self, key: &UnitKey) -> Option<Vec<u8>> {
        let id = EntryId::of(key);
        let Some(hit) = self.lock().hit(id, SystemTime::now()) else {
            self.counters.misses.fetch_add(1, Relaxed);
            return None;
        };
        let path = self.units.join(id.name());
        let read = File::open(&path).and_then(|mut file| {
            let len = file.metadata()?.len();
            entry::read(&mut file, len, key).map(|found| (file, found))
        });
        let bad = match read {
            Ok((file, Found::Unit(unit))) => {
                if hit.touch {
                    if let Err(error) = file.set_modified(SystemTime::now()) {
                        tracing::debug!(
                            "disk cache: cannot set the mtime of {}: {error}",
                            path.display()
                        );
                    }
                }
                self.counters.hits.fetch_add(1, Relaxed);
                return Some(unit);
            }
            Ok((_, Found::Bad(what))) => {
                tracing::warn!(
                    "disk cache: {} removed: {what}; the unit will be fetched again",
                    path.display()
                );
                true
            }
            // Evicted since the lookup, or removed by someone else: its slot tells which.
            Err(error) if error.kind() == io::ErrorKind::NotFound => false,
            Err(error) => {
                tracing::warn!(
                    "disk cache: cannot read {}: {error}; removed",
                    path.display()
                );
                true
            }
        };
        // Bound first: a guard in an `if let` lives to the end of its block (edition 2021).
        let dying = self.lock().mark_dying(id, hit.generation);
        if let Some(len) = dying {
            if bad {
                self.counters.corrupt.fetch_add(1, Relaxed);
            }
            let released = !bad || open::unlink(&path);
            self.lock().unlinked(id, released);
            self.room.notify_all();
            tracing::trace!("disk cache: released {len} bytes of {}", path.display());
        }
        self.counters.misses.fetch_add(1, Relaxed);
        None
    }

    /// Stores the unit `key`, evicting the least recently used entries to make room. Never fails
    /// the caller: a unit that cannot be written is not cached, and the error is logged. A unit
    /// already cached, or being stored by another thread, is left as it is.
    pub fn put(&self, key: &UnitKey, unit: &[u8]) {
        let Some(len) = entry::encoded_len(key, unit).filter(|&len| len <= self.budget) else {
            tracing::debug!(
                "disk cache: unit {} of {:?} is larger than the budget; not cached",
                key.index,
                key.object
            );
            return;
        };
        let id = EntryId::of(key);
        let Some(generation) = self.reserve(id, len) else {
            return;
        };
        let temp = self.units.join(format!(
            "{}{}",
            open::TEMP_PREFIX,
            self.next_temp.fetch_add(1, Relaxed)
        ));
        // 0600 at creation, so that it is never readable by others, then set: the umask may
        // have taken more.
        let written = File::options()
            .write(true)
            .create_new(true)
            .mode(open::FILE_MODE)
            .open(&temp)
            .and_then(|mut file| {
                open::make_private(&file, open::FILE_MODE)?;
                entry::write(&mut file, key, unit)
            })
            .and_then(|()| fs::rename(&temp, self.units.join(id.name())));
        match written {
            Ok(()) => self.lock().commit(id, generation, SystemTime::now()),
            Err(error) => {
                let errors = self.counters.write_errors.fetch_add(1, Relaxed) + 1;
                // Every error would flood the log when the disk is full: the 1st, 2nd, 4th, 8th...
                if errors.is_power_of_two() {
                    tracing::warn!(
                        "disk cache {}: cannot write unit {} of {:?}: {error} ({errors} write errors so far)",
                        self.dir.display(),
                        key.index,
                        key.object
                    );
                }
                let released = open::unlink(&temp);
                self.lock().abort(id, generation, released);
            }
        }
        self.room.notify_all();
    }

    /// Counters and contents.
    pub fn stats(&self) -> DiskCacheStats {
        let (bytes_used, entries) = self.lock().ready();
        self.counters.snapshot(bytes_used, entries, self.budget)
    }

    /// Charges `len` bytes for entry `id`, evicting as needed. `None` if the entry is there
    /// already (or on its way), or if no room came free in time.
    fn reserve(&self, id: EntryId, len: u64) -> Option<u64> {
        let mut index = self.lock();
        loop {
            let wanted = match index.reserve(id, len, self.budget) {
                Reservation::Present => return None,
                Reservation::Reserved(generation) => return Some(generation),
                Reservation::Short(wanted) => wanted,
            };
            let victims = index.evict(wanted);
            if victims.is_empty() {
                // Everything charged is being written or removed by others: wait for them.
                if !index.busy() {
                    // Only files that could not be unlinked hold the budget.
                    return None;
                }
                let (guard, waited) = self
                    .room
                    .wait_timeout(index, ROOM_WAIT)
                    .unwrap_or_else(|e| e.into_inner());
                if waited.timed_out() {
                    tracing::debug!(
                        "disk cache {}: no room came free in {ROOM_WAIT:?}",
                        self.dir.display()
                    );
                    return None;
                }
                index = guard;
                continue;
            }
            drop(index);
            let released: Vec<_> = victims
                .iter()
                .map(|(id, _)| (*id, open::unlink(&self.units.join(id.name()))))
                .collect();
            self.counters
                .evictions
                .fetch_add(victims.len() as u64, Relaxed);
            index = self.lock();
            for (id, released) in released {
                index.unlinked(id, released);
            }
            self.room.notify_all();
        }
    }

    fn lock(&self) -> MutexGuard<'_, Index> {
        // The index is consistent between its methods, none of which can panic mid-way.
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }
}
