//! `squashd._native.Image`: an opened image and the `os`-style calls on it. Every call that
//! reads the image releases the GIL; the object is shared freely between threads (the image is
//! read with positioned reads and thread-safe caches, and closing only drops this handle's
//! reference: calls in flight and open files keep the image until they are done).

use crate::entry::DirEntry;
use crate::errors::OpError;
use crate::file::NativeFile;
use crate::names::{to_python, PathArg};
use crate::opening::{open, DiskCacheSettings, Target};
use crate::pysource::PySource;
use crate::shared::Shared;
use crate::stat::{stat_result, Stat};
use pyo3::exceptions::{PyMemoryError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use squashd_core::{CacheBudgets, Image, OpenOptions};
use std::os::unix::ffi::OsStringExt;
use std::sync::{Arc, PoisonError, RwLock};

/// Bytes decompressed ahead of each sequential reader, as a mount's default `readahead`.
const READ_AHEAD_WINDOW: u64 = 2 << 20;
/// Bytes of the data cache kept for blocks read ahead and not yet read, with read-ahead on (at
/// most a quarter of the data budget). Read-ahead across files keeps up to 128 files and 8 MiB
/// of their blocks ahead of the reader, beside the fragment blocks of their tail ends; the
/// cache's default room for them (3% of its budget, split between 8 shards: at 128 MiB ~0.5 MiB,
/// 4 blocks of 128 KiB a shard) evicted some before their reader came, and a walk of every file of a
/// 530 MB environment decompressed ~10 MB twice (bench/results/2026-11-27-python-s11.md).
const READ_AHEAD_ROOM: u64 = 32 << 20;

/// The data cache's default budget in the package: half of squashd's (which a daemon shares
/// between many readers of many images). A package lives in its user's process, and a walk that
/// reads every file once fills whatever budget it has with blocks it will not read again: with
/// 64 MiB the walk of a 536 MB Python environment took 4-6% less CPU and 4% less time than with
/// 128 MiB, for the same bytes decompressed (bench/results/2026-12-07-python-s12.md). `cache=`
/// sets more for a program that re-reads a larger set of files.
const DATA_BUDGET: u64 = 64 << 20;

/// An opened SquashFS image.
#[pyclass(subclass, frozen, module = "squashd._native", name = "Image")]
pub struct NativeImage {
    shared: RwLock<Option<Arc<Shared>>>,
    name: String,
}

/// Cache budgets from `cache=`: bytes of decompressed data, or a dict of `metadata`, `data`
/// and `compressed` bytes.
fn budgets(cache: Option<&Bound<'_, PyAny>>) -> PyResult<CacheBudgets> {
    let defaults = CacheBudgets::new(CacheBudgets::default().metadata_bytes, DATA_BUDGET);
    let Some(cache) = cache.filter(|c| !c.is_none()) else {
        return Ok(defaults);
    };
    if let Ok(dict) = cache.cast::<PyDict>() {
        let mut budgets = defaults;
        for (key, value) in dict.iter() {
            let bytes: u64 = value.extract()?;
            match key.extract::<String>()?.as_str() {
                "metadata" => budgets.metadata_bytes = bytes,
                "data" => budgets.data_bytes = bytes,
                "compressed" => budgets.compressed_bytes = bytes,
                other => {
                    return Err(PyValueError::new_err(format!(
                        "cache: unknown tier {other:?} (metadata, data, compressed)"
                    )))
                }
            }
        }
        return Ok(budgets);
    }
    Ok(CacheBudgets::new(defaults.metadata_bytes, cache.extract()?))
}

/// Where the image is: a path, a remote address, or a file object.
fn target(obj: &Bound<'_, PyAny>) -> PyResult<Target> {
    if obj.hasattr("read")? && obj.hasattr("seek")? {
        return Ok(Target::PyFile(PySource::new(obj)?));
    }
    let path = PathArg::new(obj)?;
    Ok(Target::Location(
        std::ffi::OsString::from_vec(path.bytes).into(),
    ))
}

impl NativeImage {
    /// The image, or ValueError once closed.
    pub fn shared(&self) -> PyResult<Arc<Shared>> {
        self.shared
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| PyValueError::new_err(format!("{}: the image is closed", self.name)))
    }

    /// Runs `op` on the image with the GIL released; its error becomes the OSError Python users
    /// expect, about `path`.
    fn with_path<T: Send>(
        &self,
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        op: impl FnOnce(&Shared, &PathArg) -> Result<T, OpError> + Send,
    ) -> PyResult<(T, PathArg)> {
        let shared = self.shared()?;
        let arg = PathArg::new(path)?;
        let result = py.detach(|| op(&shared, &arg));
        match result {
            Ok(value) => Ok((value, arg)),
            Err(e) => Err(e.into_pyerr(py, &self.name, Some(path))),
        }
    }
}

#[pymethods]
impl NativeImage {
    /// Opens the image at `target`: a path, an `http(s)://` or `s3://` address, or a binary
    /// file object with `seek` and `read`.
    #[new]
    #[pyo3(signature = (target, *, offset=None, partition=None, cache=None, disk_cache=None,
                        disk_cache_size=4<<30, read_ahead=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        target: &Bound<'_, PyAny>,
        offset: Option<u64>,
        partition: Option<u32>,
        cache: Option<&Bound<'_, PyAny>>,
        disk_cache: Option<std::path::PathBuf>,
        disk_cache_size: u64,
        read_ahead: Option<usize>,
    ) -> PyResult<Self> {
        if offset.is_some() && partition.is_some() {
            return Err(PyValueError::new_err("give offset or partition, not both"));
        }
        let mut budgets = budgets(cache)?;
        let what = target_name(target);
        let target_source = self::target(target)?;
        let is_python_file = matches!(target_source, Target::PyFile(_));
        let settings = DiskCacheSettings {
            dir: disk_cache,
            budget: disk_cache_size,
        };
        let opened = py.detach(|| open(target_source, offset, partition, &settings));
        let opened = opened.map_err(|(errno, message)| {
            pyo3::exceptions::PyOSError::new_err((errno, message, what.clone_ref(py)))
        })?;
        let name = opened.name.to_string();
        // A file object's reads are serialized on it: threads would only wait for each other.
        let threads = if is_python_file {
            0
        } else {
            read_ahead.unwrap_or_else(squashd_core::cores)
        };
        if threads > 0 {
            budgets = budgets.with_data_waiting(READ_AHEAD_ROOM.min(budgets.data_bytes / 4));
        }
        let options = OpenOptions::default()
            .with_budgets(budgets)
            .with_offset(opened.offset);
        let source = opened.source;
        let image = py
            .detach(|| Image::from_source(source, name.clone().into(), &options))
            .map_err(|e| OpError::from(e).into_pyerr(py, &name, None))?;
        if opened.remote.is_none() && !is_python_file {
            image.prefetch_metadata();
        }
        let shared = Shared::new(
            image,
            opened.remote,
            opened.located,
            threads,
            READ_AHEAD_WINDOW,
        );
        Ok(NativeImage {
            shared: RwLock::new(Some(Arc::new(shared))),
            name,
        })
    }

    /// The image's name: its path, or its address without secrets.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.shared
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
    }

    /// Where the image starts in its file (an AppImage or SIF file holds it inside).
    #[getter]
    fn offset(&self) -> PyResult<u64> {
        Ok(self.shared()?.image.offset())
    }

    /// What holds the image: "raw SquashFS image", "AppImage (type 2)" or "Apptainer SIF";
    /// None when an offset was given.
    #[getter]
    fn container(&self) -> PyResult<Option<&'static str>> {
        Ok(self.shared()?.located.as_ref().map(|l| l.container.name()))
    }

    /// The data block size in bytes.
    #[getter]
    fn block_size(&self) -> PyResult<u32> {
        Ok(self.shared()?.image.block_size())
    }

    /// The compressor's name ("gzip", "xz", "zstd"...).
    #[getter]
    fn compressor(&self) -> PyResult<String> {
        Ok(format!("{:?}", self.shared()?.image.superblock().compressor).to_lowercase())
    }

    /// The number of inodes.
    #[getter]
    fn inode_count(&self) -> PyResult<u32> {
        Ok(self.shared()?.image.inode_count())
    }

    /// Drops this handle's reference to the image; files opened from it stay readable.
    fn close(&self) {
        self.shared
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close();
        false
    }

    /// The names in directory `path`, in the image's (sorted) order, without "." and "..".
    #[pyo3(signature = (path=None))]
    fn listdir<'py>(
        &self,
        py: Python<'py>,
        path: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let here = PyString::new(py, ".").into_any();
        let path = path.unwrap_or(&here);
        let (entries, arg) = self.with_path(py, path, |shared, arg| {
            let dir = shared.resolve(&arg.bytes, true)?;
            if !dir.is_dir() {
                return Err(OpError::errno(libc::ENOTDIR));
            }
            Ok(shared.image.read_dir(&dir)?)
        })?;
        let names = entries
            .iter()
            .map(|e| arg.name(py, &e.name))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, names)
    }

    /// The entries of directory `path` with their inodes (what `scandir` yields).
    #[pyo3(signature = (path=None))]
    fn _scandir(&self, py: Python<'_>, path: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<DirEntry>> {
        let here = PyString::new(py, ".").into_any();
        let path = path.unwrap_or(&here);
        let shared = self.shared()?;
        let (entries, arg) = self.with_path(py, path, |shared, arg| {
            let dir = shared.resolve(&arg.bytes, true)?;
            if !dir.is_dir() {
                return Err(OpError::errno(libc::ENOTDIR));
            }
            Ok(shared.image.read_dir_plus(&dir)?)
        })?;
        entries
            .into_iter()
            .map(|(entry, inode)| DirEntry::new(py, &shared, &self.name, &arg, &entry.name, inode))
            .collect()
    }

    /// `os.stat_result` of `path`, symlinks followed unless `follow_symlinks` is false.
    #[pyo3(signature = (path, *, follow_symlinks=true))]
    fn stat<'py>(
        &self,
        py: Python<'py>,
        path: &Bound<'py, PyAny>,
        follow_symlinks: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (stat, _) = self.with_path(py, path, |shared, arg| {
            let inode = shared.resolve(&arg.bytes, follow_symlinks)?;
            Ok(Stat::of(&shared.image, inode)?)
        })?;
        stat_result(py, &stat, self.shared()?.dev)
    }

    /// `os.stat_result` of `path` itself, a symlink not followed.
    fn lstat<'py>(&self, py: Python<'py>, path: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.stat(py, path, false)
    }

    /// Whether `path` exists (a broken symlink does not). An image that cannot be read raises.
    #[pyo3(signature = (path, *, follow_symlinks=true))]
    fn exists(
        &self,
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        follow_symlinks: bool,
    ) -> PyResult<bool> {
        let shared = self.shared()?;
        let arg = PathArg::new(path)?;
        match py.detach(|| shared.resolve(&arg.bytes, follow_symlinks)) {
            Ok(_) => Ok(true),
            Err(OpError::Errno(libc::ENOENT | libc::ENOTDIR | libc::ELOOP, _)) => Ok(false),
            Err(e) => Err(e.into_pyerr(py, &self.name, Some(path))),
        }
    }

    /// The target of symlink `path` (`bytes` if `path` is `bytes`).
    fn readlink<'py>(
        &self,
        py: Python<'py>,
        path: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (target, arg) = self.with_path(py, path, |shared, arg| {
            let inode = shared.resolve(&arg.bytes, false)?;
            inode
                .symlink_target()
                .map(<[u8]>::to_vec)
                .ok_or_else(|| OpError::errno(libc::EINVAL))
        })?;
        arg.name(py, &target)
    }

    /// The names of `path`'s extended attributes (`str`, or `bytes` if `path` is `bytes`).
    #[pyo3(signature = (path, *, follow_symlinks=true))]
    fn listxattr<'py>(
        &self,
        py: Python<'py>,
        path: &Bound<'py, PyAny>,
        follow_symlinks: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let (xattrs, arg) = self.with_path(py, path, |shared, arg| {
            let inode = shared.resolve(&arg.bytes, follow_symlinks)?;
            Ok(shared.image.xattrs(&inode)?)
        })?;
        let names = xattrs
            .iter()
            .map(|x| arg.name(py, &x.name))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, names)
    }

    /// The value of `path`'s extended attribute `attribute`; OSError(ENODATA) if it has none.
    #[pyo3(signature = (path, attribute, *, follow_symlinks=true))]
    fn getxattr<'py>(
        &self,
        py: Python<'py>,
        path: &Bound<'py, PyAny>,
        attribute: &Bound<'py, PyAny>,
        follow_symlinks: bool,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let wanted = PathArg::new(attribute)?.bytes;
        let (value, _) = self.with_path(py, path, |shared, arg| {
            let inode = shared.resolve(&arg.bytes, follow_symlinks)?;
            shared
                .image
                .xattrs(&inode)?
                .into_iter()
                .find(|x| x.name == wanted)
                .map(|x| x.value)
                .ok_or_else(|| OpError::errno(libc::ENODATA))
        })?;
        Ok(PyBytes::new(py, &value))
    }

    /// The whole contents of file `path` as `bytes`.
    fn read_bytes<'py>(
        &self,
        py: Python<'py>,
        path: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let shared = self.shared()?;
        let (reader, _) = self.with_path(py, path, |shared, arg| shared.open_file(&arg.bytes))?;
        let size = usize::try_from(reader.size())
            .ok()
            .filter(|&s| s <= isize::MAX as usize)
            .ok_or_else(|| {
                PyMemoryError::new_err(format!("{} bytes do not fit in memory", reader.size()))
            })?;
        PyBytes::new_with(py, size, |buf| {
            py.detach(|| shared.read(&reader, None, 0, buf))
                .map(drop)
                .map_err(|e| e.into_pyerr(py, &self.name, Some(path)))
        })
    }

    /// A reader of file `path` (what `Image.open` wraps in a Python file object).
    fn _open_file(&self, py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<NativeFile> {
        let shared = self.shared()?;
        let (reader, _) = self.with_path(py, path, |shared, arg| shared.open_file(&arg.bytes))?;
        Ok(NativeFile::new(shared, reader, self.name.clone()))
    }

    /// Extracts `path` (a file, or a directory and everything below it) into directory `dest`,
    /// as `squashd extract -d dest path` does; returns counts of what was made.
    #[pyo3(signature = (path, dest))]
    fn extract<'py>(
        &self,
        py: Python<'py>,
        path: &Bound<'py, PyAny>,
        dest: std::path::PathBuf,
    ) -> PyResult<Bound<'py, PyDict>> {
        let (report, _) = self.with_path(py, path, |shared, arg| {
            crate::extract::extract(&shared.image, &arg.bytes, &dest)
        })?;
        report.into_dict(py)
    }

    /// The image's counters: its cache tiers (as `squashd status --json` shows them), the
    /// bytes it read, and its remote source's requests.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let shared = self.shared()?;
        crate::counters::stats(py, &shared)
    }

    fn __repr__(&self) -> String {
        format!(
            "<squashd.Image {:?}{}>",
            self.name,
            if self.closed() { " (closed)" } else { "" }
        )
    }
}

/// How `target` is named in an error about opening it: as given.
fn target_name(target: &Bound<'_, PyAny>) -> Py<PyAny> {
    if target.is_instance_of::<PyString>() || target.cast::<PyBytes>().is_ok() {
        return target.clone().unbind();
    }
    match target.str() {
        Ok(s) => s.into_any().unbind(),
        Err(_) => to_python(target.py(), b"<image>", false)
            .map(Bound::unbind)
            .unwrap_or_else(|_| target.clone().unbind()),
    }
}
