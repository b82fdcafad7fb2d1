//! A byte-bounded, crash-safe disk cache of fetched units, shared by every remote image of a process.
//! (Placeholder API; the real cache is being written beside this.)

use std::sync::Arc;

/// Identifies a unit: the object (its URL and version) and the unit's index.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UnitKey {
    /// The object's identity.
    pub object: Arc<str>,
    /// The unit's index.
    pub index: u64,
}

/// The disk cache.
#[derive(Debug)]
pub struct DiskCache;

impl DiskCache {
    /// A unit's bytes, if cached and intact.
    pub fn get(&self, _key: &UnitKey) -> Option<Vec<u8>> {
        None
    }
    /// Keeps a unit's bytes.
    pub fn put(&self, _key: &UnitKey, _bytes: &[u8]) {}
}

impl DiskCache {
    /// Opens (creating) the cache in `dir`, bounded to `budget_bytes`.
    pub fn open(_dir: &std::path::Path, _budget_bytes: u64) -> std::io::Result<Arc<DiskCache>> {
        Ok(Arc::new(DiskCache))
    }
}
