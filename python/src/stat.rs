//! Inodes as `os.stat_result`, with the fields the kernel's squashfs gives a mounted image.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyTuple;
use squashd_core::{Image, Inode, Result};

/// `st_blksize` as the kernel's squashfs reports it on a loop device: its device block size,
/// `SQUASHFS_DEVBLK_SIZE`.
const BLKSIZE: u64 = 1024;

/// An inode and its `st_blocks`, which may take a read of the xattr id table (done with the
/// GIL released, before the result is built).
pub struct Stat {
    /// The inode.
    pub inode: Inode,
    /// 512-byte blocks as the kernel reports them.
    pub blocks: u64,
}

impl Stat {
    /// The `stat` of `inode` of `image`.
    pub fn of(image: &Image, inode: Inode) -> Result<Stat> {
        let blocks = image.stat_blocks(&inode)?;
        Ok(Stat { inode, blocks })
    }
}

/// `stat` as an `os.stat_result`; `dev` is the image's `st_dev`. The times are all the
/// modification time, as the kernel shows a squashfs file's.
pub fn stat_result<'py>(py: Python<'py>, stat: &Stat, dev: u64) -> PyResult<Bound<'py, PyAny>> {
    let inode = &stat.inode;
    static STAT_RESULT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let ty = STAT_RESULT.get_or_try_init(py, || {
        Ok::<_, PyErr>(py.import("os")?.getattr("stat_result")?.unbind())
    })?;
    let t = inode.mtime as i64;
    let t_float = t as f64;
    let t_ns = t as i128 * 1_000_000_000;
    let fields = PyTuple::new(
        py,
        [
            inode.mode().into_pyobject(py)?.into_any(),
            inode.number.into_pyobject(py)?.into_any(),
            dev.into_pyobject(py)?.into_any(),
            inode.nlink.into_pyobject(py)?.into_any(),
            inode.uid.into_pyobject(py)?.into_any(),
            inode.gid.into_pyobject(py)?.into_any(),
            inode.size.into_pyobject(py)?.into_any(),
            t.into_pyobject(py)?.into_any(),
            t.into_pyobject(py)?.into_any(),
            t.into_pyobject(py)?.into_any(),
            t_float.into_pyobject(py)?.into_any(),
            t_float.into_pyobject(py)?.into_any(),
            t_float.into_pyobject(py)?.into_any(),
            t_ns.into_pyobject(py)?.into_any(),
            t_ns.into_pyobject(py)?.into_any(),
            t_ns.into_pyobject(py)?.into_any(),
            BLKSIZE.into_pyobject(py)?.into_any(),
            stat.blocks.into_pyobject(py)?.into_any(),
            inode.rdev_linux().into_pyobject(py)?.into_any(),
        ],
    )?;
    ty.bind(py).call1((fields,))
}
