//! Mounting the kernel's EROFS on a metadata image and its blob, and the blob file system's own
//! FUSE mount they live on.

use crate::blobfs::{BlobFiles, BlobFs};
use nix::mount::{MntFlags, MsFlags};
use squashd_fuse::server::{FuseMount, Running, Session, TransportProbe, UringMode};
use std::io;
use std::path::{Path, PathBuf};

/// The blob file system, mounted: its files are added and removed through [`BlobMount::files`].
pub struct BlobMount {
    files: BlobFiles,
    dir: PathBuf,
    /// The request threads; never joined: they serve until the kernel lets go of every file,
    /// which for a daemon going away is its exit.
    running: Running,
}

impl std::fmt::Debug for BlobMount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobMount")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl BlobMount {
    /// Mounts an empty blob file system on `dir` (an existing directory, on any file system)
    /// served by `threads` request threads, over /dev/fuse (see [`BlobMount::mount_with_uring`]).
    pub fn mount(dir: &Path, threads: usize) -> io::Result<BlobMount> {
        Self::mount_with_uring(dir, threads, UringMode::Auto)
    }

    /// [`BlobMount::mount`], with FUSE over io_uring as `uring` says, except that `auto` keeps
    /// /dev/fuse here.
    ///
    /// `auto` is meant to take the faster transport, and for this file system that is
    /// /dev/fuse: over the ring E2's random 4 KiB reads on the kernel path ran at 0.81-0.90x
    /// of /dev/fuse's (bench/results/2026-12-07-s14.md, -s15.md), and none of the layouts
    /// tried closed that. The ring's gain, walks, does not reach it: the metadata image goes
    /// into the page cache in 1 MiB stores ([`crate::meta_file`]), so the kernel path's walks
    /// took the same time over both. `on` still puts it on the ring.
    pub fn mount_with_uring(dir: &Path, threads: usize, uring: UringMode) -> io::Result<BlobMount> {
        let uring = match uring {
            UringMode::Auto => UringMode::Off,
            chosen => chosen,
        };
        let files = BlobFiles::new();
        let mount = FuseMount {
            fsname: "squashd-blobs".into(),
            subtype: "squashd-blobs".into(),
            options: ["ro", "default_permissions", "nodev", "nosuid", "noexec"]
                .map(String::from)
                .to_vec(),
            // The kernel reads a blob in the context of whoever reads the EROFS file; the files
            // are root's, mode 0400, so opening them stays root's alone.
            allow_other: true,
            owner: None,
        };
        let device = mount.mount(dir)?;
        let fs = BlobFs::new(files.clone(), threads.max(1));
        let notifier_slot = fs.notifier_slot();
        let session = Session::new(fs, device).with_uring(uring);
        let _ = notifier_slot.set(session.notifier());
        let running = session.start(threads.max(1), "squashd-blobs")?;
        Ok(BlobMount {
            files,
            dir: dir.to_path_buf(),
            running,
        })
    }

    /// Which transport carries the blob file system's requests.
    pub fn transport(&self) -> TransportProbe {
        self.running.transport_probe()
    }

    /// The files served.
    pub fn files(&self) -> &BlobFiles {
        &self.files
    }

    /// The path of the file `name` on the mount.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Where it is mounted.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for BlobMount {
    fn drop(&mut self) {
        // Lazily: EROFS mounts still holding files open keep the connection until they go.
        let _ = nix::mount::umount2(&self.dir, MntFlags::MNT_DETACH);
    }
}

/// Mounts EROFS on `target` from the metadata image `meta` with `blob` as its extra device.
/// Both are regular files (on the blob file system): mount(2) on the file itself, with no loop
/// device (Linux 6.12+). `directio` makes EROFS read the blob with direct I/O, so its data is
/// cached once, in EROFS's page cache; a kernel without that option mounts without it.
pub fn mount_erofs(meta: &Path, blob: &Path, target: &Path, flags: MsFlags) -> io::Result<()> {
    let blob = blob.to_str().filter(|p| !p.contains(',')).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "blob path not usable in mount options",
        )
    })?;
    let flags = flags | MsFlags::MS_RDONLY;
    let with_directio = format!("device={blob},directio");
    match nix::mount::mount(
        Some(meta),
        target,
        Some("erofs"),
        flags,
        Some(with_directio.as_str()),
    ) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EINVAL) => {
            let plain = format!("device={blob}");
            nix::mount::mount(
                Some(meta),
                target,
                Some("erofs"),
                flags,
                Some(plain.as_str()),
            )
            .map_err(io::Error::from)
        }
        Err(e) => Err(e.into()),
    }
}
