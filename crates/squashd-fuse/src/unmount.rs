//! A handle that unmounts a mounted image from any thread: the mount recorded when it was
//! made ([`MountPoint`]), never whatever its path leads to later.

use crate::mount_point::MountPoint;
use std::io;
use std::path::Path;
use std::sync::Arc;

/// Unmounts a mounted image from another thread.
#[derive(Debug, Clone)]
pub struct Unmounter {
    pub(crate) mount: Arc<MountPoint>,
}

impl Unmounter {
    /// Unmounts; `lazy` detaches the mount even while it is busy (as `umount -l`). Only the
    /// mount squashd made: see [`MountPoint::unmount`].
    pub fn unmount(&self, lazy: bool) -> io::Result<()> {
        self.mount.unmount(lazy)
    }

    /// The mount point's canonical path when it was mounted.
    pub fn mountpoint(&self) -> &Path {
        self.mount.path()
    }
}
