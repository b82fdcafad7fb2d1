//! `squashd._native.File`: a regular file of an image opened for reading, read at any offset
//! from any thread (`Image.open` wraps it in an `io.RawIOBase` with a position).

use crate::shared::Shared;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use squashd_core::read_ahead::ReadState;
use squashd_core::FileReader;
use std::sync::Arc;

/// An open regular file.
#[pyclass(frozen, module = "squashd._native", name = "File")]
pub struct NativeFile {
    shared: Arc<Shared>,
    reader: FileReader,
    state: ReadState,
    image_name: String,
}

impl NativeFile {
    /// `reader`'s file of the image `shared`.
    pub fn new(shared: Arc<Shared>, reader: FileReader, image_name: String) -> Self {
        NativeFile {
            shared,
            reader,
            state: ReadState::default(),
            image_name,
        }
    }
}

#[pymethods]
impl NativeFile {
    /// The file's size in bytes.
    #[getter]
    fn size(&self) -> u64 {
        self.reader.size()
    }

    /// Up to `size` bytes at `offset` (fewer at the end of the file; empty past it).
    fn pread<'py>(
        &self,
        py: Python<'py>,
        offset: u64,
        size: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let len = self.reader.size().saturating_sub(offset).min(size as u64) as usize;
        PyBytes::new_with(py, len, |buf| {
            py.detach(|| {
                self.shared
                    .read(&self.reader, Some(&self.state), offset, buf)
            })
            .map(drop)
            .map_err(|e| e.into_pyerr(py, &self.image_name, None))
        })
    }
}
