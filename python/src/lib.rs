//! `squashd._native`: the native half of the `squashd` Python package, over squashd-core's
//! [`squashd_core::Image`] and squashd-remote's source. The Python half (`squashd/__init__.py`)
//! adds what is easier said in Python: `walk`, file objects, the fsspec file system.

mod counters;
mod entry;
mod errors;
mod extract;
mod file;
mod image;
mod names;
mod opening;
mod parents;
mod pysource;
mod read;
mod resolve;
mod shared;
mod siblings;
mod stat;
mod walk_order;

use pyo3::prelude::*;

/// The native module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<image::NativeImage>()?;
    m.add_class::<entry::DirEntry>()?;
    m.add_class::<file::NativeFile>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
