//! Images mounted through the kernel's EROFS, as mount and serve use them: [`Prepared`] (an
//! image translated, ready to mount), [`KernelMount`] (one image mounted), and [`KernelPath`]
//! (this process's blob file system, which every such mount reads its files from).

use crate::blob::{Blob, ReadAhead};
use crate::blobfs::BlobFsContent;
use crate::erofs_mount::{mount_erofs, BlobMount};
use crate::meta_file::MetaFile;
use crate::translate::{translate, OwnerOverride, TranslateError};
use nix::mount::{MntFlags, MsFlags};
use squashd_core::{Image, Inode};
use squashd_fuse::server::{TransportInfo, TransportProbe, UringMode};
use squashd_fuse::MountPoint;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why an image could not be mounted through the kernel.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// The image could not be translated (corrupt, or holding what EROFS cannot).
    #[error(transparent)]
    Translate(#[from] TranslateError),
    /// The image could not be read.
    #[error(transparent)]
    Image(#[from] squashd_core::Error),
    /// The kernel refused the mount.
    #[error("cannot mount EROFS on {}: {source}", mountpoint.display())]
    Mount {
        /// Where.
        mountpoint: PathBuf,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
}

/// How to translate one image for the kernel, and read its blob.
#[derive(Debug, Clone)]
pub struct KernelMountOptions {
    /// Serve this directory of the image as the root.
    pub subdir: Option<Inode>,
    /// Owner overrides.
    pub owner: OwnerOverride,
    /// Read-ahead of sequential readers of a file.
    pub read_ahead: ReadAhead,
    /// Let compact inodes carry their own mtime as an offset from the image's build time,
    /// which Linux 6.15 and later read (older kernels would show the build time): smaller
    /// metadata, fewer extended inodes.
    pub relative_mtimes: bool,
}

impl Default for KernelMountOptions {
    fn default() -> Self {
        KernelMountOptions {
            subdir: None,
            owner: OwnerOverride::default(),
            read_ahead: ReadAhead {
                threads: squashd_core::cores(),
                bytes: 2 << 20,
            },
            relative_mtimes: false,
        }
    }
}

/// The blob file system of this process and the kernel-path mounts on it.
#[derive(Debug)]
pub struct KernelPath {
    blobs: BlobMount,
    next: AtomicU64,
}

/// What a translation cost, for `status` and the benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TranslationStats {
    /// Inodes in the EROFS metadata image.
    pub nodes: usize,
    /// Size of the metadata image in bytes.
    pub metadata_bytes: u64,
    /// Size of the blob in bytes.
    pub blob_bytes: u64,
    /// Time the translation took.
    pub elapsed: Duration,
}

/// What a kernel-path mount's reads of file data did, for `status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlobReadStats {
    /// Reads of the blob that reached squashd.
    pub blob_reads: u64,
    /// Of them, those EROFS made to fill a block (the rest are readers' page-cache misses).
    pub fill_reads: u64,
    /// Blocks EROFS was asked to read whole: the rest of those a random read took part of, and
    /// those decompressed beside it by the sweep.
    pub fills: u64,
    /// Bytes those fills asked for (pages EROFS already had are not read again).
    pub filled_bytes: u64,
    /// Fills that could not be asked for (the mount moved, or cannot be used: see the log).
    pub fill_failures: u64,
    /// Blocks decompressed beside random readers by the sweep's workers.
    pub sweep_decompressions: u64,
    /// Of them, blocks a reader came to before EROFS was given them (no wait for a
    /// decompression, a round trip).
    pub swept_reached: u64,
}

/// One image mounted through the kernel.
#[derive(Debug)]
pub struct KernelMount {
    blobs: crate::BlobFiles,
    meta_name: String,
    blob_name: String,
    /// The blob's path on the blob file system, to look at its page cache.
    blob_path: PathBuf,
    /// The EROFS mount made, to unmount it and nothing else.
    mount: MountPoint,
    metadata: Arc<MetaFile>,
    blob: Arc<Blob>,
    stats: TranslationStats,
    /// Which transport carries the blob file system's requests (shared by every mount).
    transport: TransportProbe,
}

impl KernelPath {
    /// Mounts this process's blob file system on `blob_dir` (created if missing), served by
    /// `threads` request threads, over FUSE over io_uring as `uring` says.
    pub fn start(blob_dir: &Path, threads: usize, uring: UringMode) -> io::Result<KernelPath> {
        std::fs::create_dir_all(blob_dir)?;
        Ok(KernelPath {
            blobs: BlobMount::mount_with_uring(blob_dir, threads, uring)?,
            next: AtomicU64::new(1),
        })
    }

    /// Where the blob file system is mounted.
    pub fn blob_dir(&self) -> &Path {
        self.blobs.dir()
    }

    /// Detaches the blob file system from the namespace without waiting for anything: for a
    /// daemon going away, whose process exit then ends the FUSE connection. Kernel-path mounts
    /// still in use read EIO from then on.
    pub fn detach_at_exit(self: Arc<Self>) {
        let _ = nix::mount::umount2(self.blobs.dir(), MntFlags::MNT_DETACH);
        // Dropping would wait for the session's threads, which serve until the kernel lets go
        // of every file: the process exit ends them instead.
        std::mem::forget(self);
    }

    /// Mounts a [`Prepared`] image through EROFS on `target` (a directory, or a
    /// `/proc/self/fd/N` of one), known as `mountpoint`, with `flags` besides MS_RDONLY.
    pub fn mount(
        &self,
        prepared: Prepared,
        target: &Path,
        mountpoint: &Path,
        flags: MsFlags,
    ) -> Result<KernelMount, KernelError> {
        let Prepared {
            metadata,
            blob,
            stats,
        } = prepared;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let base: String = Path::new(blob.image().name())
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .take(64)
            .collect();
        let meta_name = format!("{id}-{base}.meta");
        let blob_name = format!("{id}-{base}.blob");
        let files = self.blobs.files();
        files.add(&meta_name, BlobFsContent::Metadata(metadata.clone()));
        files.add(&blob_name, BlobFsContent::Blob(blob.clone()));
        let mounted = mount_erofs(
            &self.blobs.path(&meta_name),
            &self.blobs.path(&blob_name),
            target,
            flags,
        )
        // At once, before anyone could unmount it: every later unmount is of this mount. This
        // fails only if the mount went again in between (statx has given mount ids since
        // Linux 5.8, long before EROFS mounted files), so nothing is left to unmount then.
        .and_then(|()| MountPoint::record(target, mountpoint));
        let mount = match mounted {
            Ok(mount) => mount,
            Err(source) => {
                files.remove(&meta_name);
                files.remove(&blob_name);
                return Err(KernelError::Mount {
                    mountpoint: mountpoint.to_path_buf(),
                    source,
                });
            }
        };
        // Random reads of the mount fill whole blocks into EROFS's page cache from now on.
        blob.block_fill()
            .attach(mountpoint, &self.blobs.path(&meta_name));
        Ok(KernelMount {
            blobs: files.clone(),
            transport: self.blobs.transport(),
            blob_path: self.blobs.path(&blob_name),
            meta_name,
            blob_name,
            mount,
            metadata,
            blob,
            stats,
        })
    }
}

/// An image translated and ready to mount: the work that needs no thread and no mount, so a
/// lone mount can do it before it forks into the background.
#[derive(Debug)]
pub struct Prepared {
    metadata: Arc<MetaFile>,
    blob: Arc<Blob>,
    stats: TranslationStats,
}

impl Prepared {
    /// Translates `image` (see [`translate`]).
    pub fn new(image: Image, options: &KernelMountOptions) -> Result<Prepared, KernelError> {
        let started = Instant::now();
        let translation = translate(&image, options)?;
        let stats = TranslationStats {
            nodes: translation.nodes,
            metadata_bytes: translation.metadata.len() as u64,
            blob_bytes: translation.layout.len_bytes(),
            elapsed: started.elapsed(),
        };
        Ok(Prepared {
            metadata: Arc::new(MetaFile::new(translation.metadata)),
            blob: Arc::new(Blob::new(image, translation.layout, options.read_ahead)),
            stats,
        })
    }

    /// What the translation cost.
    pub fn stats(&self) -> TranslationStats {
        self.stats
    }
}

impl KernelMount {
    /// Where it is mounted.
    pub fn mountpoint(&self) -> &Path {
        self.mount.path()
    }

    /// The image it serves.
    pub fn image(&self) -> &Image {
        self.blob.image()
    }

    /// What the translation cost.
    pub fn stats(&self) -> TranslationStats {
        self.stats
    }

    /// Which transport carries the blob file system's requests (shared by every mount).
    pub fn transport(&self) -> TransportInfo {
        self.transport.info()
    }

    /// Reads of the blob that failed (answered EIO to the kernel).
    pub fn failed_reads(&self) -> u64 {
        self.blob.failed_reads()
    }

    /// What the last failed blob read's error said.
    pub fn last_error(&self) -> Option<String> {
        self.blob.last_error()
    }

    /// Reads that missed the kernel's page cache and reached squashd: of the blob (file data)
    /// and of the metadata image.
    pub fn reads(&self) -> u64 {
        self.blob.reads() + self.metadata.reads()
    }

    /// What the sweeps beside random readers of the mount's files did.
    pub fn sweep_stats(&self) -> squashd_core::read_ahead::SweepStats {
        self.blob.sweep_stats()
    }

    /// What the reads of file data did: how many reached squashd, and the whole blocks filled
    /// into EROFS's page cache after random reads.
    pub fn read_stats(&self) -> BlobReadStats {
        let fill = self.blob.block_fill().stats();
        let swept = self.blob.swept_stats();
        BlobReadStats {
            blob_reads: self.blob.reads(),
            fill_reads: self.blob.fill_reads(),
            fills: fill.fills,
            filled_bytes: fill.filled_bytes,
            fill_failures: fill.failures,
            sweep_decompressions: swept.decompressed,
            swept_reached: swept.reached,
        }
    }

    /// Bytes of the blob in the kernel's page cache now: none, by design (EROFS reads it with
    /// direct I/O and every open of it is FOPEN_DIRECT_IO, so file data is cached once, in
    /// EROFS's page cache); shown in `status` so that it is seen to stay so. Asks the blob file
    /// system (an open, cachestat(2), a release), so a caller that must not wait on a FUSE
    /// request bounds the wait itself.
    pub fn blob_cached_bytes(&self) -> io::Result<u64> {
        let file = std::fs::File::open(&self.blob_path)?;
        crate::page_cache::cached_bytes(&file)
    }

    /// The blob's path on the blob file system.
    pub fn blob_path(&self) -> &Path {
        &self.blob_path
    }

    /// Whether the kernel still holds the mount's files open (the EROFS mount exists, or is
    /// detached but still in use).
    pub fn in_use(&self) -> bool {
        self.blobs.open_count(&self.meta_name) > 0 || self.blobs.open_count(&self.blob_name) > 0
    }

    /// Unmounts the EROFS mount (`lazy`: even while busy) and stops serving its files once
    /// the kernel lets go of them. Only the mount made: if the mount point leads elsewhere
    /// now, nothing is unmounted and the error is a [`squashd_fuse::NotOurMount`].
    pub fn unmount(&self, lazy: bool) -> io::Result<()> {
        self.mount.unmount(lazy)?;
        self.release();
        Ok(())
    }

    /// Blocks until the kernel has let go of the mount's files (it was unmounted, by us or by
    /// umount(8)), then stops serving them.
    pub fn wait_unmounted(&self) {
        self.blobs
            .wait_released(&[&self.meta_name, &self.blob_name]);
        self.release();
    }

    /// Removes the files; handles the kernel still holds keep reading them until closed.
    fn release(&self) {
        self.blobs.remove(&self.meta_name);
        self.blobs.remove(&self.blob_name);
    }
}
