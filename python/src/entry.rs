//! `squashd._native.DirEntry`: what `Image.scandir` yields, as `os.DirEntry`: the name, the
//! path, and the entry's inode read with the listing (so `is_dir()`, `stat()` and `inode()`
//! need no further read unless a symlink is followed).

use crate::names::PathArg;
use crate::shared::Shared;
use crate::stat::{stat_result, Stat};
use pyo3::prelude::*;
use squashd_core::{FileKind, Inode};
use std::sync::Arc;

/// An entry of a directory of an image.
#[pyclass(frozen, module = "squashd._native", name = "DirEntry")]
pub struct DirEntry {
    name: Py<PyAny>,
    path: Py<PyAny>,
    path_bytes: Vec<u8>,
    inode: Inode,
    shared: Arc<Shared>,
    image_name: String,
}

impl DirEntry {
    /// The entry `name` of the directory at `dir`.
    pub fn new(
        py: Python<'_>,
        shared: &Arc<Shared>,
        image_name: &str,
        dir: &PathArg,
        name: &[u8],
        inode: Inode,
    ) -> PyResult<Self> {
        let path_bytes = dir.join(name);
        Ok(DirEntry {
            name: dir.name(py, name)?.unbind(),
            path: dir.name(py, &path_bytes)?.unbind(),
            path_bytes,
            inode,
            shared: shared.clone(),
            image_name: image_name.to_string(),
        })
    }

    /// The inode the entry names, or (for a symlink, when following) the one it points to;
    /// `None` for a symlink to nothing (os.DirEntry's tests are false then, and raise for
    /// other failures: a loop, a name too long).
    fn target(&self, py: Python<'_>, follow: bool) -> PyResult<Option<Inode>> {
        if !follow || self.inode.kind != FileKind::Symlink {
            return Ok(Some(self.inode.clone()));
        }
        let shared = &self.shared;
        let path = &self.path_bytes;
        match py.detach(|| shared.resolve(path, true)) {
            Ok(inode) => Ok(Some(inode)),
            Err(crate::errors::OpError::Errno(libc::ENOENT, _)) => Ok(None),
            Err(e) => Err(e.into_pyerr(py, &self.image_name, Some(self.path.bind(py)))),
        }
    }
}

#[pymethods]
impl DirEntry {
    /// The entry's name (`bytes` if the directory was given as `bytes`).
    #[getter]
    fn name(&self, py: Python<'_>) -> Py<PyAny> {
        self.name.clone_ref(py)
    }

    /// The directory's path joined with the name.
    #[getter]
    fn path(&self, py: Python<'_>) -> Py<PyAny> {
        self.path.clone_ref(py)
    }

    /// The entry's inode number.
    fn inode(&self) -> u32 {
        self.inode.number
    }

    /// Whether it is a directory (or, following symlinks, a symlink to one).
    #[pyo3(signature = (*, follow_symlinks=true))]
    fn is_dir(&self, py: Python<'_>, follow_symlinks: bool) -> PyResult<bool> {
        Ok(self
            .target(py, follow_symlinks)?
            .is_some_and(|i| i.kind == FileKind::Directory))
    }

    /// Whether it is a regular file (or, following symlinks, a symlink to one).
    #[pyo3(signature = (*, follow_symlinks=true))]
    fn is_file(&self, py: Python<'_>, follow_symlinks: bool) -> PyResult<bool> {
        Ok(self
            .target(py, follow_symlinks)?
            .is_some_and(|i| i.kind == FileKind::File))
    }

    /// Whether it is a symbolic link.
    fn is_symlink(&self) -> bool {
        self.inode.kind == FileKind::Symlink
    }

    /// Whether it is a junction (never, on Linux; as os.DirEntry since Python 3.12).
    fn is_junction(&self) -> bool {
        false
    }

    /// `os.stat_result` of the entry (of its target, following symlinks).
    #[pyo3(signature = (*, follow_symlinks=true))]
    fn stat<'py>(&self, py: Python<'py>, follow_symlinks: bool) -> PyResult<Bound<'py, PyAny>> {
        match self.target(py, follow_symlinks)? {
            Some(inode) => {
                let image = &self.shared.image;
                let stat = py.detach(|| Stat::of(image, inode)).map_err(|e| {
                    crate::errors::OpError::from(e).into_pyerr(
                        py,
                        &self.image_name,
                        Some(self.path.bind(py)),
                    )
                })?;
                stat_result(py, &stat, self.shared.dev)
            }
            None => Err(crate::errors::OpError::errno(libc::ENOENT).into_pyerr(
                py,
                &self.image_name,
                Some(self.path.bind(py)),
            )),
        }
    }

    fn __fspath__(&self, py: Python<'_>) -> Py<PyAny> {
        self.path.clone_ref(py)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!("<DirEntry {}>", self.name.bind(py).repr()?))
    }
}
