//! `Image.stats()`: an image's counters, with the names `squashd status --json` gives them.

use crate::shared::Shared;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use squashd_core::CacheStats;

/// One cache tier's counters.
fn tier<'py>(py: Python<'py>, s: &CacheStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("capacity_bytes", s.capacity_bytes)?;
    d.set_item("resident_bytes", s.resident_bytes)?;
    d.set_item("entries", s.entries)?;
    d.set_item("hits", s.hits)?;
    d.set_item("misses", s.misses)?;
    d.set_item("loads", s.loads)?;
    d.set_item("failures", s.load_failures)?;
    d.set_item("loaded_bytes", s.loaded_bytes)?;
    d.set_item("evictions", s.evictions)?;
    d.set_item("waits", s.waits)?;
    d.set_item("wait_seconds", s.wait_nanos as f64 / 1e9)?;
    d.set_item("hit_ratio", s.hit_ratio())?;
    Ok(d)
}

/// The counters of the image `shared`.
pub fn stats<'py>(py: Python<'py>, shared: &Shared) -> PyResult<Bound<'py, PyDict>> {
    let image = &shared.image;
    let s = image.stats();
    let d = PyDict::new(py);
    d.set_item("image", image.name())?;
    d.set_item("size_bytes", image.image_size())?;
    d.set_item("inodes", image.inode_count())?;
    d.set_item("bytes_read", s.bytes_read)?;
    d.set_item("reads", s.reads)?;
    let cache = PyDict::new(py);
    cache.set_item("metadata", tier(py, &s.metadata)?)?;
    cache.set_item("data", tier(py, &s.data)?)?;
    cache.set_item("compressed", tier(py, &s.compressed)?)?;
    d.set_item("cache", cache)?;
    let remote = match &shared.remote {
        Some(source) => {
            let r = source.stats();
            let rd = PyDict::new(py);
            rd.set_item("requests", r.requests)?;
            rd.set_item("retries", r.retries)?;
            rd.set_item("failures", r.failures)?;
            rd.set_item("bytes_fetched", r.bytes_fetched)?;
            rd.set_item("units_fetched", r.units_fetched)?;
            rd.set_item("units_prefetched", r.units_prefetched)?;
            rd.set_item("memory_hits", r.memory_hits)?;
            rd.set_item("disk_cache_hits", r.disk_hits)?;
            rd.set_item("wait_seconds", r.wait_ns as f64 / 1e9)?;
            Some(rd)
        }
        None => None,
    };
    d.set_item("remote", remote)?;
    // Read-ahead across a directory's files (none when read-ahead is off).
    let across = shared
        .siblings
        .as_ref()
        .map(|s| s.stats())
        .unwrap_or_default();
    let files = PyDict::new(py);
    files.set_item("queued", across.queued)?;
    files.set_item("files", across.files)?;
    files.set_item("chunks", across.chunks)?;
    files.set_item("dirs", across.dirs)?;
    files.set_item("next_dirs", across.next_dirs)?;
    files.set_item("missed", across.missed)?;
    files.set_item("passed", across.passed)?;
    files.set_item("helped", across.helped)?;
    d.set_item("files_read_ahead", files)?;
    Ok(d)
}
