//! Paths and names as `os` takes and gives them: `str` encoded with the file system encoding and
//! `surrogateescape` (so any bytes round-trip), `bytes` as they are, `os.PathLike` through
//! `os.fspath`; a name is returned as `bytes` when the path asked about was `bytes`.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyString};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// A path argument: its bytes, and whether it was given as `bytes`.
pub struct PathArg {
    /// The path's bytes (relative to the image's root whether it starts with '/' or not).
    pub bytes: Vec<u8>,
    /// Whether names derived from it are returned as `bytes`.
    pub as_bytes: bool,
}

impl PathArg {
    /// The path `obj` (str, bytes or os.PathLike).
    pub fn new(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        if let Ok(bytes) = obj.cast::<PyBytes>() {
            return Ok(PathArg {
                bytes: bytes.as_bytes().to_vec(),
                as_bytes: true,
            });
        }
        if obj.is_instance_of::<PyString>() {
            return Ok(PathArg {
                bytes: obj.extract::<OsString>()?.into_vec(),
                as_bytes: false,
            });
        }
        static FSPATH: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = obj.py();
        let fspath = FSPATH.get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("os")?.getattr("fspath")?.unbind())
        })?;
        let path = fspath.bind(py).call1((obj,))?;
        if path.is_instance_of::<PyString>() || path.cast::<PyBytes>().is_ok() {
            Self::new(&path)
        } else {
            Err(pyo3::exceptions::PyTypeError::new_err(
                "a path is str, bytes or os.PathLike",
            ))
        }
    }

    /// `name` in the same type as this path: `bytes`, or `str` decoded as `os` does.
    pub fn name<'py>(&self, py: Python<'py>, name: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        to_python(py, name, self.as_bytes)
    }

    /// `name` joined to this path with one '/', as `os.path.join` does for a scandir entry's
    /// `path`.
    pub fn join(&self, name: &[u8]) -> Vec<u8> {
        let mut joined = self.bytes.clone();
        if !joined.is_empty() && !joined.ends_with(b"/") {
            joined.push(b'/');
        }
        joined.extend_from_slice(name);
        joined
    }
}

/// `bytes` as Python `bytes`, or as `str` decoded with the file system encoding and
/// `surrogateescape`.
pub fn to_python<'py>(
    py: Python<'py>,
    bytes: &[u8],
    as_bytes: bool,
) -> PyResult<Bound<'py, PyAny>> {
    if as_bytes {
        Ok(PyBytes::new(py, bytes).into_any())
    } else {
        Ok(OsStr::from_bytes(bytes).into_pyobject(py)?.into_any())
    }
}
