//! An image read through a Python file object (`seek` and `read`): what fsspec gives for the
//! file systems squashd has no source of its own for. Reads take the object's lock, then the
//! GIL; nothing takes them the other way round (every image call runs with the GIL released),
//! so they cannot deadlock. They are serialized: such an image gets no read-ahead threads.

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use squashd_core::source::Source;
use std::io;
use std::sync::{Mutex, PoisonError};

/// A Python file object as a [`Source`].
pub struct PySource {
    file: Mutex<Py<PyAny>>,
    len: u64,
    name: String,
}

impl PySource {
    /// Reads `file`, whose length is found by seeking to its end.
    pub fn new(file: &Bound<'_, PyAny>) -> PyResult<Self> {
        let len: u64 = file.call_method1("seek", (0, 2))?.extract()?;
        let name = ["path", "name"]
            .iter()
            .find_map(|attr| file.getattr(*attr).ok()?.str().ok().map(|s| s.to_string()))
            .unwrap_or_else(|| "<file object>".to_string());
        Ok(PySource {
            file: Mutex::new(file.clone().unbind()),
            len,
            name,
        })
    }

    /// What the file object calls itself (its `path` or `name`).
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Source for PySource {
    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> io::Result<()> {
        let file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        Python::attach(|py| -> PyResult<()> {
            let file = file.bind(py);
            file.call_method1("seek", (pos,))?;
            let mut done = 0;
            while done < buf.len() {
                let data = file.call_method1("read", (buf.len() - done,))?;
                let data = data.cast::<PyBytes>()?.as_bytes();
                if data.is_empty() {
                    return Err(pyo3::exceptions::PyEOFError::new_err(format!(
                        "{} bytes at {pos} run past the end of the file",
                        buf.len()
                    )));
                }
                let n = data.len().min(buf.len() - done);
                buf[done..done + n].copy_from_slice(&data[..n]);
                done += n;
            }
            Ok(())
        })
        .map_err(|e| {
            let text = Python::attach(|py| e.value(py).to_string());
            io::Error::other(text)
        })
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.len)
    }
}
