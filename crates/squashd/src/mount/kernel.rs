//! `squashd mount` on the kernel path: the image's metadata translated into an EROFS metadata
//! image, its file data served by this process's blob file system, and the kernel's EROFS
//! mounted on the two (see squashd-kernel). The process lives as long as the mount: it ends
//! when the kernel lets go of the mount's files (umount, SIGTERM).

use super::LoneMount;
use crate::control::report::Probe;
use crate::daemonize::daemonize;
use crate::options::{Engine, Options};
use anyhow::Context;
use nix::mount::MsFlags;
use squashd_core::Image;
use squashd_fuse::MountedImage;
use squashd_kernel::{KernelMountOptions, KernelPath, OwnerOverride, Prepared};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where lone kernel-path mounts keep their blob file systems, one directory per process.
const BLOB_DIRS: &str = "/run/squashd";

/// Where this process keeps its blob file system.
fn blob_dir() -> PathBuf {
    Path::new(BLOB_DIRS).join(format!("mount-{}", std::process::id()))
}

/// Clears what lone kernel-path mounts killed before they could clean up left behind: the
/// EROFS mounts on their blob file systems (which fail every read that misses the page cache)
/// and the dead blob file systems themselves. A blob file system whose process is gone answers
/// ENOTCONN (its pid may linger as a zombie, so the pid is no test).
fn clear_dead_lone_mounts() {
    let Ok(entries) = std::fs::read_dir(BLOB_DIRS) else {
        return;
    };
    for entry in entries.flatten() {
        let is_blob_dir = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with("mount-"));
        let dead =
            nix::sys::statfs::statfs(&entry.path()).err() == Some(nix::errno::Errno::ENOTCONN);
        if is_blob_dir && dead {
            crate::dead_mounts::clear_dead_kernel_mounts(&entry.path());
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// The mount flags the `-o` flags ask for: read-only, nosuid and nodev unless `suid` / `dev`.
pub(crate) fn mount_flags(flags: &[String]) -> MsFlags {
    let mut out = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    for flag in flags {
        match flag.as_str() {
            "suid" => out.remove(MsFlags::MS_NOSUID),
            "nosuid" => out.insert(MsFlags::MS_NOSUID),
            "dev" => out.remove(MsFlags::MS_NODEV),
            "nodev" => out.insert(MsFlags::MS_NODEV),
            "exec" => out.remove(MsFlags::MS_NOEXEC),
            "noexec" => out.insert(MsFlags::MS_NOEXEC),
            "atime" => out.remove(MsFlags::MS_NOATIME),
            "noatime" => out.insert(MsFlags::MS_NOATIME),
            _ => {}
        }
    }
    out
}

/// Whether this kernel reads a compact inode's own mtime (Linux 6.15+).
pub(crate) fn kernel_reads_relative_mtimes() -> bool {
    crate::engine::kernel_version().1 >= (6, 15)
}

/// What to translate, from the options: the `subdir=` root, owner overrides, mtime encoding.
pub(crate) fn translation_options(
    image: &Image,
    options: &Options,
) -> anyhow::Result<KernelMountOptions> {
    let subdir = match &options.mount.subdir {
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
            uid: options.mount.uid,
            gid: options.mount.gid,
        },
        read_ahead: squashd_kernel::ReadAhead {
            threads: options.mount.prefetch_threads,
            bytes: options.mount.readahead_bytes,
        },
        relative_mtimes: kernel_reads_relative_mtimes(),
    })
}

/// Runs `squashd mount` on the kernel path. When squashd chose the path (neither `kernel` nor
/// `fuse` given) and the image cannot be translated or the kernel refuses the EROFS mount (a
/// kernel built without file-backed EROFS, say), the mount is made through FUSE instead, and
/// one line says why.
pub(super) fn run(lone: LoneMount, mountpoint: &Path, foreground: bool) -> anyhow::Result<()> {
    let chosen_by_squashd = lone.options.engine == Engine::Auto;
    // All the work that starts no thread comes before the fork.
    let prepared = translation_options(&lone.image, &lone.options)
        .and_then(|o| Ok(Prepared::new(lone.image.clone(), &o)?));
    let prepared = match prepared {
        Ok(p) => p,
        Err(e) if chosen_by_squashd => {
            note_fallback(mountpoint, &format!("{e:#}"));
            let mounted = MountedImage::mount(lone.image.clone(), mountpoint, &lone.options.mount)?;
            let parent = if foreground { None } else { Some(daemonize()?) };
            return super::fuse::serve(lone, mounted, parent);
        }
        Err(e) => return Err(e),
    };
    let mountpoint = mountpoint
        .canonicalize()
        .with_context(|| format!("{}: mount point not found", mountpoint.display()))?;
    clear_dead_lone_mounts();
    let parent = if foreground { None } else { Some(daemonize()?) };
    let dir = blob_dir();
    let kernel = KernelPath::start(&dir, squashd_core::cores())
        .with_context(|| format!("{}: cannot mount the blob file system", dir.display()))?;
    let mounted = kernel.mount(
        prepared,
        &mountpoint,
        &mountpoint,
        mount_flags(&lone.options.mount.flags),
    );
    let mounted = match mounted {
        Ok(m) => Arc::new(m),
        Err(e) => {
            drop(kernel);
            let _ = std::fs::remove_dir(&dir);
            if !chosen_by_squashd {
                return Err(e.into());
            }
            // Past the fork: the caller still waits for the mount to answer, now FUSE's.
            note_fallback(&mountpoint, &e.to_string());
            let mounted =
                MountedImage::mount(lone.image.clone(), &mountpoint, &lone.options.mount)?;
            return super::fuse::serve(lone, mounted, parent);
        }
    };
    let mut serving = lone.start_serving(Probe::Kernel(mounted.clone()), &mountpoint)?;
    // The kernel then lets go of the mount's files and `wait_unmounted` returns.
    let signal_mount = mounted.clone();
    super::watch_signals(move |lazy| signal_mount.unmount(lazy))?;
    super::announce_ready(serving.ready_fd.take(), parent, serving.notify_pipe.clone());
    mounted.wait_unmounted();
    drop(kernel);
    let _ = std::fs::remove_dir(&dir);
    Ok(())
}

/// The one line a fallback to FUSE prints.
fn note_fallback(mountpoint: &Path, why: &str) {
    log_line!(
        "squashd: {}: FUSE, not the kernel path: {why}",
        mountpoint.display()
    );
}
