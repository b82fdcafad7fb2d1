//! Per-open state, named by the file handle (`fh`) the kernel passes back on every request.
//!
//! Handles are numbered from a counter and kept in a sharded map, so that readers of different
//! files do not share a lock; each value is an `Arc` so a request keeps its handle alive even
//! if a release races with it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

const SHARDS: usize = 32;

impl<T> Default for HandleTable<T> {
    fn default() -> Self {
        Self::new()
    }
}

type Shard<T> = RwLock<HashMap<u64, Arc<T>>>;

/// Open files (or directories) by handle: what the kernel names by `fh` on each request.
#[derive(Debug)]
pub struct HandleTable<T> {
    next: AtomicU64,
    shards: Box<[Shard<T>]>,
}

impl<T> HandleTable<T> {
    /// An empty table; handles count from 1 (0 means "no handle" to the kernel).
    pub fn new() -> Self {
        HandleTable {
            next: AtomicU64::new(1),
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
        }
    }

    fn shard(&self, fh: u64) -> &Shard<T> {
        &self.shards[fh as usize % SHARDS]
    }

    /// Keeps `value` under a new handle, returned.
    pub fn insert(&self, value: T) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        self.shard(fh)
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(fh, Arc::new(value));
        fh
    }

    /// The value of handle `fh`, if open.
    pub fn get(&self, fh: u64) -> Option<Arc<T>> {
        self.shard(fh)
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&fh)
            .cloned()
    }

    /// Forgets handle `fh`; its value, if it was open (requests still using it keep it).
    pub fn remove(&self, fh: u64) -> Option<Arc<T>> {
        self.shard(fh)
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&fh)
    }

    /// Number of open handles.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.read().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    /// Whether no handle is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_get_remove() {
        let t = HandleTable::new();
        let a = t.insert("a");
        let b = t.insert("b");
        assert_ne!(a, b);
        assert_eq!(t.get(a).as_deref(), Some(&"a"));
        assert_eq!(t.len(), 2);
        t.remove(a);
        assert!(t.get(a).is_none());
        assert_eq!(t.len(), 1);
    }
}
