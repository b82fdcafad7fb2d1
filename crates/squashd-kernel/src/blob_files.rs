//! The files of the blob file system: a flat directory of read-only files, named by the
//! images served through the kernel path, added and removed while it is mounted, and how many
//! times the kernel holds each open (which tells when an EROFS mount on them is gone).

use crate::blob::Blob;
use crate::meta_file::MetaFile;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// What a file of the blob file system holds.
#[derive(Debug, Clone)]
pub enum BlobFsContent {
    /// An EROFS metadata image, held in memory.
    Metadata(Arc<MetaFile>),
    /// The decompressed file data of an image.
    Blob(Arc<Blob>),
}

impl BlobFsContent {
    pub(crate) fn len(&self) -> u64 {
        match self {
            BlobFsContent::Metadata(m) => m.len() as u64,
            BlobFsContent::Blob(b) => b.layout().len_bytes(),
        }
    }
}

/// The root directory's node.
pub(crate) const ROOT: u64 = 1;

#[derive(Debug, Default)]
pub(crate) struct Table {
    /// Node of each name.
    pub(crate) by_name: BTreeMap<Vec<u8>, u64>,
    /// Content of each node.
    pub(crate) by_node: HashMap<u64, Arc<BlobFsContent>>,
}

/// How many times each node is open, and whether it ever was: the kernel opens a mount's
/// backing files when it mounts and closes them when the mount is gone, so "opened, then no
/// longer open" tells that an EROFS mount ended, however it was unmounted.
#[derive(Debug, Default)]
struct Opens {
    counts: std::sync::Mutex<HashMap<u64, (usize, bool)>>,
    changed: std::sync::Condvar,
}

/// The files served, shared between the FUSE session and whoever adds and removes them.
#[derive(Debug, Clone, Default)]
pub struct BlobFiles {
    table: Arc<RwLock<Table>>,
    next_node: Arc<AtomicU64>,
    opens: Arc<Opens>,
}

impl BlobFiles {
    /// An empty set of files.
    pub fn new() -> Self {
        BlobFiles {
            next_node: Arc::new(AtomicU64::new(ROOT + 1)),
            ..Default::default()
        }
    }

    pub(crate) fn read_table(&self) -> std::sync::RwLockReadGuard<'_, Table> {
        self.table.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_table(&self) -> std::sync::RwLockWriteGuard<'_, Table> {
        self.table.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Serves `content` as `name` (replacing what had that name).
    pub fn add(&self, name: &str, content: BlobFsContent) {
        let node = self.next_node.fetch_add(1, Ordering::Relaxed);
        let mut t = self.write_table();
        if let Some(old) = t.by_name.insert(name.as_bytes().to_vec(), node) {
            t.by_node.remove(&old);
        }
        t.by_node.insert(node, Arc::new(content));
    }

    /// Stops serving `name`. A kernel mount still holding it open keeps reading it until it
    /// closes it: the content lives as long as its last user.
    pub fn remove(&self, name: &str) {
        let mut t = self.write_table();
        if let Some(node) = t.by_name.remove(name.as_bytes()) {
            t.by_node.remove(&node);
            let mut counts = self.opens.counts.lock().unwrap_or_else(|e| e.into_inner());
            if counts.get(&node).is_some_and(|&(open, _)| open == 0) {
                counts.remove(&node);
            }
        }
    }

    pub(crate) fn get(&self, node: u64) -> Option<Arc<BlobFsContent>> {
        self.read_table().by_node.get(&node).cloned()
    }

    fn node_of(&self, name: &str) -> Option<u64> {
        self.read_table().by_name.get(name.as_bytes()).copied()
    }

    pub(crate) fn opened(&self, node: u64) {
        let mut counts = self.opens.counts.lock().unwrap_or_else(|e| e.into_inner());
        let entry = counts.entry(node).or_insert((0, false));
        *entry = (entry.0 + 1, true);
        self.opens.changed.notify_all();
    }

    pub(crate) fn closed(&self, node: u64) {
        let mut counts = self.opens.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = counts.get_mut(&node) {
            entry.0 = entry.0.saturating_sub(1);
        }
        self.opens.changed.notify_all();
    }

    /// Waits until every file of `names` has been opened and is no longer open: the mount the
    /// kernel made on them is gone. Returns false if a name is not served.
    pub fn wait_released(&self, names: &[&str]) -> bool {
        let Some(nodes) = names
            .iter()
            .map(|n| self.node_of(n))
            .collect::<Option<Vec<_>>>()
        else {
            return false;
        };
        let mut counts = self.opens.counts.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let done = nodes
                .iter()
                .all(|n| counts.get(n).is_some_and(|&(open, ever)| ever && open == 0));
            if done {
                return true;
            }
            counts = self
                .opens
                .changed
                .wait(counts)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// How many times the file `name` is open now.
    pub fn open_count(&self, name: &str) -> usize {
        let Some(node) = self.node_of(name) else {
            return 0;
        };
        let counts = self.opens.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.get(&node).map_or(0, |&(open, _)| open)
    }
}
