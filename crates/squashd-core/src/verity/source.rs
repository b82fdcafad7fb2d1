//! [`VeritySource`]: a [`Source`] whose every byte has been checked against a dm-verity hash
//! tree before it is handed up. Each data block is hashed the first time it is read and then
//! marked in a bitmap; hash blocks, once checked up to the root, are kept: the upper levels for
//! the image's life (`Pinned`), the bottom level in the image's metadata cache tier; the
//! bitmap's and the upper levels' bytes are reserved from that tier's budget: a verified image
//! needs no memory beyond the metadata budget (shared, under the daemon, by all images).
//! A block that fails its hash fails the reads that need it (and only those), is logged once
//! and counted.

use super::hash::{hash_block, BlockDigest};
use super::params::{first_tree_block, Geometry};
use super::{TreeParams, VerityError};
use crate::cache::{next_image_id, BlockKey};
use crate::image::MetadataBlock;
use crate::source::Source;
use crate::Caches;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

mod ahead;

/// Where a tree is and what it must hash to.
#[derive(Debug, Clone)]
pub struct TreeLocation {
    /// The tree's parameters (from its superblock, or given).
    pub params: TreeParams,
    /// Where the verity area starts in the hash source (its superblock, if it has one).
    pub hash_offset: u64,
    /// Whether a superblock precedes the tree.
    pub superblock: bool,
    /// The root hash the tree must have.
    pub root_hash: Vec<u8>,
}

/// Counters of one verified image.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerityStats {
    /// Data blocks the tree covers.
    pub data_blocks: u64,
    /// Data blocks checked and found good (the bitmap's set bits).
    pub verified_blocks: u64,
    /// Data blocks hashed, counting each time: above `verified_blocks` only where two reads
    /// checked one block at once (both hash it; neither waits for the other).
    pub data_block_hashes: u64,
    /// Blocks (data or hash) that failed their hash, counted at each failed read.
    pub failures: u64,
    /// Hash blocks read from the hash source and checked.
    pub hash_block_loads: u64,
    /// Hints given to the hash source for a read's bottom hash blocks, ahead of its check
    /// (one `posix_fadvise` each, for a file).
    pub hash_hints: u64,
    /// Bytes of checked hash blocks held now: the tree's upper levels, kept for the image's
    /// life, and blocks of the level above the data in the metadata cache tier.
    pub hash_cache_bytes: u64,
    /// Bytes of the bitmap of checked data blocks, reserved from the metadata tier's budget.
    pub bitmap_bytes: u64,
}

/// What a [`VeritySource`] keeps; shared with its [`VerityHandle`]s.
struct VerityState {
    name: Arc<str>,
    data: Arc<dyn Source>,
    data_start: u64,
    hash: Arc<dyn Source>,
    params: TreeParams,
    geometry: Geometry,
    root: Vec<u8>,
    verified: Vec<AtomicU64>,
    /// The tree's upper levels, each block checked once and then kept: see [`Pinned`].
    pinned: Pinned,
    /// The caches whose metadata tier holds the checked hash blocks (keyed by `cache_id`) and
    /// lends the bitmap its bytes.
    caches: Arc<Caches>,
    cache_id: u32,
    failures: AtomicU64,
    hash_block_loads: AtomicU64,
    /// Data blocks hashed (see [`VerityStats::data_block_hashes`]).
    data_block_hashes: AtomicU64,
    /// Hints for a read's bottom hash blocks (see [`VerityStats::hash_hints`]).
    hash_hints: AtomicU64,
    /// Blocks whose failure was logged: each is logged once (at most `MAX_LOGGED`).
    logged: Mutex<HashSet<(bool, u64)>>,
    /// Whether the source is open: a failure while it is being opened (a wrong root hash) is
    /// the opener's error to report, in one line, not logged here too.
    open: AtomicBool,
}

const MAX_LOGGED: usize = 1024;

/// The largest per-thread buffer of whole blocks kept between reads: a data block (1 MiB at
/// most) and the partial blocks around it.
const MAX_KEPT_BUFFER: usize = (1 << 20) + (1 << 16);

thread_local! {
    /// The whole blocks around the read being checked on this thread (see
    /// [`VeritySource::read_exact_at`]); taken out while in use.
    static WHOLE_BLOCKS: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The hash blocks of every level above the one that holds the data blocks' hashes (and the
/// top block when that level is the top), kept once checked. Every check of a data block
/// goes through a path of them to the root, so keeping them makes a check read at most one
/// hash block (its data block's, when the metadata cache does not hold it: evicted, or a
/// budget of 0) instead of the whole path; and there are few: about 1/128 of the level below
/// (sha256, 4 KiB blocks), about 120 KiB for a 1.8 GiB image. Their bytes are reserved from the
/// metadata budget as they are loaded, as the bitmap's are.
struct Pinned {
    /// The lowest level kept.
    from_level: usize,
    /// The first hash block kept (the top level's: the levels lie top first, one after the
    /// other).
    first_block: u64,
    blocks: Vec<OnceLock<Arc<[u8]>>>,
    /// Bytes kept now (reserved from the metadata budget).
    bytes: AtomicU64,
}

impl Pinned {
    fn new(geometry: &Geometry) -> Pinned {
        let (from_level, first_block, count) = match geometry.levels.as_slice() {
            [] => (0, 0, 0),
            // One level: its single block is the top.
            [(first, _)] => (0, *first, 1),
            [(bottom, _), .., (top, _)] => (1, *top, bottom - top),
        };
        Pinned {
            from_level,
            first_block,
            blocks: (0..count).map(|_| OnceLock::new()).collect(),
            bytes: AtomicU64::new(0),
        }
    }

    /// The slot of hash block `absolute` of `level`, if that level is kept.
    fn slot(&self, level: usize, absolute: u64) -> Option<&OnceLock<Arc<[u8]>>> {
        if level < self.from_level {
            return None;
        }
        let index = usize::try_from(absolute.checked_sub(self.first_block)?).ok()?;
        self.blocks.get(index)
    }
}

impl Drop for VerityState {
    /// The bitmap's and the kept blocks' bytes go back to the metadata budget, and the hash
    /// blocks leave the cache.
    fn drop(&mut self) {
        let pinned = self.pinned.bytes.load(Ordering::Relaxed);
        self.caches.metadata.release(self.bitmap_bytes() + pinned);
        self.caches.metadata.forget_image(self.cache_id);
    }
}

/// A source checked against a hash tree. Positions are counted from the start of the data
/// device (`data_start` in the underlying source); its length is the data the tree covers.
#[derive(Clone)]
pub struct VeritySource {
    state: Arc<VerityState>,
}

/// A handle on a [`VeritySource`]'s counters, kept by whoever shows them (`status`).
#[derive(Clone)]
pub struct VerityHandle {
    state: Arc<VerityState>,
}

impl VerityHandle {
    /// The source's counters now.
    pub fn stats(&self) -> VerityStats {
        self.state.stats()
    }

    /// The tree's parameters.
    pub fn params(&self) -> &TreeParams {
        &self.state.params
    }
}

impl std::fmt::Debug for VeritySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VeritySource")
            .field("name", &self.state.name)
            .field("params", &self.state.params)
            .finish_non_exhaustive()
    }
}

impl VeritySource {
    /// Checks `data` (from byte `data_start` on) against the tree `tree` in `hash`; the tree's
    /// top block is read and checked against the root hash here, so a wrong root hash fails
    /// now. Checked hash blocks are kept in the metadata tier of `caches` (give the image the
    /// same caches), which also lends the bitmap of checked blocks its bytes. `name` names the
    /// image in errors.
    pub fn new(
        name: Arc<str>,
        data: Arc<dyn Source>,
        data_start: u64,
        hash: Arc<dyn Source>,
        tree: &TreeLocation,
        caches: Arc<Caches>,
    ) -> Result<VeritySource, VerityError> {
        let params = tree.params.clone();
        let first = first_tree_block(tree.hash_offset, params.hash_block_size, tree.superblock);
        let geometry = Geometry::new(&params, first)?;
        if tree.root_hash.len() != params.algorithm.digest_len() {
            return Err(VerityError::Params(format!(
                "a {} root hash has {} bytes, not {}",
                params.algorithm.name(),
                params.algorithm.digest_len(),
                tree.root_hash.len()
            )));
        }
        let data_len = data.len().map_err(VerityError::Io)?;
        let data_end = data_start.checked_add(params.data_len());
        if data_end.is_none_or(|end| end > data_len) {
            return Err(VerityError::Params(format!(
                "the tree covers {} bytes from byte {data_start}, but the data has {data_len}",
                params.data_len()
            )));
        }
        let hash_len = hash.len().map_err(VerityError::Io)?;
        let tree_end = geometry.end_block * u64::from(params.hash_block_size);
        if tree_end > hash_len {
            return Err(VerityError::Params(format!(
                "the tree ends at byte {tree_end}, past the end of its {hash_len}-byte file"
            )));
        }
        let words = params.data_blocks.div_ceil(64);
        let verified: Vec<AtomicU64> = (0..words).map(|_| AtomicU64::new(0)).collect();
        caches.metadata.reserve(words * 8);
        let state = VerityState {
            name,
            data,
            data_start,
            hash,
            params,
            pinned: Pinned::new(&geometry),
            geometry,
            root: tree.root_hash.clone(),
            verified,
            caches,
            cache_id: next_image_id(),
            failures: AtomicU64::new(0),
            hash_block_loads: AtomicU64::new(0),
            hash_hints: AtomicU64::new(0),
            data_block_hashes: AtomicU64::new(0),
            logged: Mutex::new(HashSet::new()),
            open: AtomicBool::new(false),
        };
        // The upper levels (kept once checked), asked for in one request before the top is
        // read and checked against the root hash: a wrong root hash refuses the image.
        if let [(bottom, _), .., (top, _)] = state.geometry.levels.as_slice() {
            let size = u64::from(state.params.hash_block_size);
            state.hash.will_need(top * size, (bottom - top) * size);
        }
        match state.geometry.levels.len() {
            // One data block and no hash block: the root hash is that block's.
            0 if state.params.data_blocks > 0 => {
                let mut block = vec![0u8; state.params.data_block_size as usize];
                state
                    .data
                    .read_exact_at(&mut block, state.data_start)
                    .map_err(VerityError::Io)?;
                state.check_data_block(0, &block)?;
            }
            0 => {}
            levels => {
                state.hash_block(levels - 1, 0)?;
            }
        }
        state.open.store(true, Ordering::Release);
        Ok(VeritySource {
            state: Arc::new(state),
        })
    }

    /// A handle on this source's counters.
    pub fn handle(&self) -> VerityHandle {
        VerityHandle {
            state: self.state.clone(),
        }
    }

    /// The tree's parameters.
    pub fn params(&self) -> &TreeParams {
        &self.state.params
    }

    /// Checks data blocks `first..first + count` (each read whole, whether or not already
    /// checked), using `scratch` as the read buffer. Each block that fails (itself or a hash
    /// block above it) is given to `on_bad` with its number, and checking goes on; a read that
    /// fails is the error.
    pub fn verify_blocks(
        &self,
        first: u64,
        count: u64,
        scratch: &mut Vec<u8>,
        on_bad: &mut dyn FnMut(u64, VerityError),
    ) -> Result<(), VerityError> {
        let size = self.state.params.data_block_size as usize;
        let end = first
            .saturating_add(count)
            .min(self.state.params.data_blocks);
        let mut block = first;
        while block < end {
            let run = (end - block).min(((1usize << 20) / size).max(1) as u64);
            scratch.resize(run as usize * size, 0);
            let pos = self.state.data_start + block * size as u64;
            self.state
                .data
                .read_exact_at(scratch, pos)
                .map_err(VerityError::Io)?;
            for (i, bytes) in scratch.chunks(size).enumerate() {
                match self.state.check_data_block(block + i as u64, bytes) {
                    Ok(()) => {}
                    Err(VerityError::Io(e)) => return Err(VerityError::Io(e)),
                    Err(e) => on_bad(block + i as u64, e),
                }
            }
            block += run;
        }
        Ok(())
    }

    /// The counters now.
    pub fn stats(&self) -> VerityStats {
        self.state.stats()
    }
}

impl VerityState {
    fn stats(&self) -> VerityStats {
        VerityStats {
            data_blocks: self.params.data_blocks,
            verified_blocks: self
                .verified
                .iter()
                .map(|w| u64::from(w.load(Ordering::Relaxed).count_ones()))
                .sum(),
            data_block_hashes: self.data_block_hashes.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            hash_block_loads: self.hash_block_loads.load(Ordering::Relaxed),
            hash_hints: self.hash_hints.load(Ordering::Relaxed),
            hash_cache_bytes: self.caches.metadata.resident_bytes_of(self.cache_id)
                + self.pinned.bytes.load(Ordering::Relaxed),
            bitmap_bytes: self.bitmap_bytes(),
        }
    }

    fn bitmap_bytes(&self) -> u64 {
        self.verified.len() as u64 * 8
    }

    fn is_verified(&self, block: u64) -> bool {
        let word = &self.verified[(block / 64) as usize];
        word.load(Ordering::Acquire) & (1 << (block % 64)) != 0
    }

    fn mark_verified(&self, block: u64) {
        self.verified[(block / 64) as usize].fetch_or(1 << (block % 64), Ordering::Release);
    }

    /// Records a failed block: counted always, logged once per block.
    fn failed(&self, error: VerityError) -> VerityError {
        self.failures.fetch_add(1, Ordering::Relaxed);
        if let VerityError::BadBlock {
            hash_block, block, ..
        } = &error
        {
            if !self.open.load(Ordering::Acquire) {
                return error;
            }
            let mut logged = self.logged.lock().unwrap_or_else(PoisonError::into_inner);
            if logged.len() < MAX_LOGGED && logged.insert((*hash_block, *block)) {
                tracing::error!("{}: {error}", self.name);
            }
        }
        error
    }

    /// The digest stored for entry `index` of the level above `level` (or the root).
    fn expected(&self, level: usize, index: u64) -> Result<BlockDigest, VerityError> {
        let bits = self.geometry.per_block_bits;
        let len = self.params.algorithm.digest_len();
        if level == self.geometry.levels.len() {
            return Ok(BlockDigest::from_slice(&self.root[..len]));
        }
        let parent = self.hash_block(level, index >> bits)?;
        let slot = (index & ((1 << bits) - 1)) as usize * self.geometry.slot_len;
        Ok(BlockDigest::from_slice(&parent[slot..slot + len]))
    }

    /// Hash block `index` of `level` (0: the hashes of data blocks), checked up to the root:
    /// kept for good when its level is ([`Pinned`]), else through the metadata cache tier,
    /// where concurrent misses on one block read and check it once.
    fn hash_block(&self, level: usize, index: u64) -> Result<Arc<[u8]>, VerityError> {
        let (first, _) = self.geometry.levels[level];
        let absolute = first + index;
        if let Some(slot) = self.pinned.slot(level, absolute) {
            if let Some(bytes) = slot.get() {
                return Ok(bytes.clone());
            }
            // Two first readers may both load it (both copies are checked); one is kept.
            let bytes = self.load_hash_block(level, index, absolute)?;
            if slot.set(bytes.clone()).is_ok() {
                let len = bytes.len() as u64;
                self.pinned.bytes.fetch_add(len, Ordering::Relaxed);
                self.caches.metadata.reserve(len);
            }
            return Ok(bytes);
        }
        let key = BlockKey {
            image: self.cache_id,
            pos: absolute,
        };
        let loaded = self.caches.metadata.get_or_load(key, None, || {
            // A hash block has no successor: `next` is not used for it.
            Ok(MetadataBlock {
                data: self.load_hash_block(level, index, absolute)?,
                next: 0,
            })
        })?;
        Ok(loaded.data)
    }

    /// Reads hash block `index` of `level` (at `absolute` in the hash source) and checks it
    /// against its parent. The parent is fetched (and checked) first, while a caller may hold
    /// this block's cache guard: the loads nest upwards only, so no two loaders wait for each
    /// other.
    fn load_hash_block(
        &self,
        level: usize,
        index: u64,
        absolute: u64,
    ) -> Result<Arc<[u8]>, VerityError> {
        let expected = self.expected(level + 1, index)?;
        let size = u64::from(self.params.hash_block_size);
        let mut bytes = vec![0u8; size as usize];
        self.hash
            .read_exact_at(&mut bytes, absolute * size)
            .map_err(VerityError::Io)?;
        self.hash_block_loads.fetch_add(1, Ordering::Relaxed);
        if hash_block(&self.params, &bytes) != expected {
            return Err(self.failed(VerityError::BadBlock {
                hash_block: true,
                block: absolute,
                position: absolute * size,
                root: level + 1 == self.geometry.levels.len(),
            }));
        }
        Ok(bytes.into())
    }

    /// Checks data block `block`, whose bytes are `bytes`, and marks it good.
    fn check_data_block(&self, block: u64, bytes: &[u8]) -> Result<(), VerityError> {
        let expected = self.expected(0, block)?;
        self.data_block_hashes.fetch_add(1, Ordering::Relaxed);
        if hash_block(&self.params, bytes) != expected {
            let size = u64::from(self.params.data_block_size);
            return Err(self.failed(VerityError::BadBlock {
                hash_block: false,
                block,
                position: self.data_start + block * size,
                root: self.geometry.levels.is_empty(),
            }));
        }
        self.mark_verified(block);
        Ok(())
    }
}

impl Source for VeritySource {
    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> std::io::Result<()> {
        let state = &self.state;
        let size = u64::from(state.params.data_block_size);
        let end = pos
            .checked_add(buf.len() as u64)
            .filter(|&end| end <= state.params.data_len())
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!(
                        "{} bytes at {pos} run past the {} bytes the verity tree covers",
                        buf.len(),
                        state.params.data_len()
                    ),
                )
            })?;
        if buf.is_empty() {
            return Ok(());
        }
        let first = pos / size;
        let last = (end - 1) / size;
        if state.all_verified(first, last) {
            return state.data.read_exact_at(buf, state.data_start + pos);
        }
        // The hash block this check needs, asked for before the data is read: a cold one is
        // then read beside the data rather than after it.
        state.bottom_hash_blocks_ahead(first, last);
        // Whole blocks, hashed from the very bytes that are then copied up, read into this
        // thread's buffer: allocated and zeroed once, not per read, and still in the cache
        // when they are hashed and copied (a fresh buffer per read cost the kernel path's
        // sequential reads about as much CPU as the hashing: 2026-11-26-verity-s6.md).
        let whole_len = ((last - first + 1) * size) as usize;
        let mut whole = WHOLE_BLOCKS.with(|b| std::mem::take(&mut *b.borrow_mut()));
        if whole.len() < whole_len {
            whole.resize(whole_len, 0);
        }
        let result = (|| {
            let whole = &mut whole[..whole_len];
            state
                .data
                .read_exact_at(whole, state.data_start + first * size)?;
            for (i, bytes) in whole.chunks(size as usize).enumerate() {
                let block = first + i as u64;
                if !state.is_verified(block) {
                    state
                        .check_data_block(block, bytes)
                        .map_err(VerityError::into_io)?;
                }
            }
            let skip = (pos - first * size) as usize;
            buf.copy_from_slice(&whole[skip..skip + buf.len()]);
            Ok(())
        })();
        // Kept for the next read unless a rare large read grew it past what reads need.
        if whole.len() <= MAX_KEPT_BUFFER {
            WHOLE_BLOCKS.with(|b| *b.borrow_mut() = whole);
        }
        result
    }

    fn len(&self) -> std::io::Result<u64> {
        Ok(self.state.params.data_len())
    }

    /// A verified image stalls where its data does.
    fn may_stall(&self) -> bool {
        self.state.data.may_stall()
    }

    /// Passes the hint to the data, and asks for the hash blocks that will check those bytes
    /// too (unless they are all checked already): a region read ahead (an image's metadata on
    /// a mount's first walk) then finds its hash blocks read ahead with it, not one cold read
    /// each as the walk reaches them.
    fn will_need(&self, pos: u64, len: u64) {
        let state = &self.state;
        state
            .data
            .will_need(state.data_start.saturating_add(pos), len);
        let size = u64::from(state.params.data_block_size);
        let Some(end) = pos
            .checked_add(len)
            .map(|end| end.min(state.params.data_len()))
        else {
            return;
        };
        if pos < end {
            let (first, last) = (pos / size, (end - 1) / size);
            if !state.all_verified(first, last) {
                state.hash_blocks_ahead(first, last);
            }
        }
    }
}
