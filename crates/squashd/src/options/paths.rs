//! What each mount path is given from the typed options: the FUSE path a
//! [`squashd_fuse::MountConfig`], the kernel path a [`squashd_kernel::KernelMountOptions`] (what to
//! translate, how to read ahead) and mount(2) flags ([`super::MountFlags::ms_flags`]).

use super::Options;
use squashd_core::Image;
use squashd_fuse::MountConfig;
use squashd_kernel::{KernelMountOptions, OwnerOverride, ReadAhead};

impl Options {
    /// How the FUSE path mounts and serves the image.
    pub(crate) fn fuse_config(&self) -> MountConfig {
        // Field by field rather than a struct literal: MountConfig may gain fields without this
        // code changing.
        let mut config = MountConfig::default();
        config.subdir = self.subdir.clone();
        config.uid = self.uid;
        config.gid = self.gid;
        config.allow_other = self.allow_other;
        config.allow_root = self.allow_root;
        config.threads = self.threads;
        config.prefetch_threads = self.prefetch_threads;
        config.readahead_bytes = self.readahead_bytes;
        config.fsname = self.fsname.clone();
        config.idle_timeout = self.idle_timeout;
        config.flags = self.flags.fuse_names();
        config.owner = self.owner;
        config
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
                threads: self.prefetch_threads,
                bytes: self.readahead_bytes,
            },
            relative_mtimes: kernel_reads_relative_mtimes(),
        })
    }
}

/// Whether this kernel reads a compact inode's own mtime (Linux 6.15+).
fn kernel_reads_relative_mtimes() -> bool {
    crate::engine::kernel_version().1 >= (6, 15)
}
