//! What each mount path is given from the typed options: the FUSE path a
//! [`squashd_fuse::MountConfig`], the kernel path a [`squashd_kernel::KernelMountOptions`] (what to
//! translate, how to read ahead) and mount(2) flags ([`super::MountFlags::ms_flags`]).

use super::Options;
use squashd_core::Image;
use squashd_fuse::MountConfig;
use squashd_kernel::{KernelMountOptions, OwnerOverride, ReadAhead};

impl Options {
    /// How the FUSE path mounts and serves the image.
    // `..default()` though every field is set today: MountConfig may gain fields (its crate is
    // being reworked) without this code changing.
    #[allow(clippy::needless_update)]
    pub(crate) fn fuse_config(&self) -> MountConfig {
        MountConfig {
            subdir: self.subdir.clone(),
            uid: self.uid,
            gid: self.gid,
            allow_other: self.allow_other,
            allow_root: self.allow_root,
            threads: self.threads,
            read_ahead_threads: self.read_ahead_threads,
            read_ahead_bytes: self.read_ahead_bytes,
            fsname: self.fsname.clone(),
            idle_timeout: self.idle_timeout,
            flags: self.flags.fuse_names(),
            owner: self.owner,
            uring: self.uring,
            listing_attrs: self.listing_attrs,
            ..MountConfig::default()
        }
    }

    /// What the kernel path translates of `image` and how its blob reads ahead: the `subdir=`
    /// root (which must be a directory of the image), owner overrides, mtime encoding.
    pub(crate) fn kernel_options(&self, image: &Image) -> anyhow::Result<KernelMountOptions> {
        let subdir = match &self.subdir {
            Some(dir) => {
                use std::os::unix::ffi::OsStrExt;
                let inode = image.resolve_path(dir.as_os_str().as_bytes())?;
                if !inode.is_dir() {
                    anyhow::bail!(
                        "{}: subdir {} is not a directory",
                        image.name(),
                        dir.display()
                    );
                }
                Some(inode)
            }
            None => None,
        };
        Ok(KernelMountOptions {
            subdir,
            owner: OwnerOverride {
                uid: self.uid,
                gid: self.gid,
            },
            read_ahead: ReadAhead {
                threads: self.read_ahead_threads,
                bytes: self.read_ahead_bytes,
            },
            relative_mtimes: kernel_reads_relative_mtimes(),
        })
    }
}

/// Whether this kernel reads a compact inode's own mtime (Linux 6.15+).
fn kernel_reads_relative_mtimes() -> bool {
    crate::engine::kernel_version().1 >= (6, 15)
}
