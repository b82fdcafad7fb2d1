//! One way to mount: an opened image and its typed options to a mounted image that answers,
//! for `squashd mount` (foreground and background) and the daemon's attach (its config, a
//! SIGHUP reload, `squashd attach`) alike.
//!
//! [`mount_image`] chooses the path ([`crate::engine::choose`], its one caller), translates
//! the image and mounts the kernel's EROFS on it or mounts it through FUSE, falls back, waits
//! until a FUSE mount answers, and returns the mount with the [`Probe`] `status` reads. What
//! differs between a lone mount and the daemon is behind [`MountHost`]: whether the kernel
//! path is allowed, where the blob file system comes from, going to the background before any
//! thread starts, how a fresh mount is probed.
//!
//! The fallback rule: when squashd chose the kernel path itself (neither `kernel` nor `fuse`
//! given) and the kernel path fails (the image cannot be translated, its blob file system
//! cannot be mounted, or the kernel refuses the EROFS mount), the image is mounted through
//! FUSE instead, and one line says why. With `kernel` given, the mount fails with that reason.

mod mounted;

pub(crate) use mounted::Mounted;

use crate::control::report::Probe;
use crate::options::{Engine, Options};
use anyhow::{bail, Context as _};
use squashd_core::Image;
use squashd_fuse::server::UringMode;
use squashd_fuse::{MountError, MountOwner, MountedImage};
use squashd_kernel::{KernelPath, Prepared};
use std::path::Path;
use std::sync::Arc;

/// What differs between the callers of [`mount_image`].
pub(crate) trait MountHost {
    /// How its log lines start: `squashd` or `squashd serve`.
    fn who(&self) -> &'static str;
    /// Whether the kernel path may serve this mount: root, mounting for no other user.
    fn privileged(&self) -> bool;
    /// Called once the mount is made and before this process starts a thread to serve it (a
    /// lone mount goes to the background here: fork copies only the calling thread). May be
    /// called again after a fallback: a second call does nothing.
    fn before_threads(&mut self) -> anyhow::Result<()>;
    /// The blob file system the kernel path serves file data from (started on first use, over
    /// FUSE over io_uring as `uring` says; a daemon's is shared, and its first mount decides).
    fn blob_fs(&mut self, uring: UringMode) -> anyhow::Result<Arc<KernelPath>>;
    /// The kernel path failed after [`MountHost::blob_fs`]: a blob file system of this mount's
    /// own has nothing to serve.
    fn kernel_path_abandoned(&mut self) {}
    /// Whether the fresh FUSE mount on `mountpoint`, made for `owner` (None: this process),
    /// answers within the host's timeout.
    fn answers(&self, mountpoint: &Path, owner: Option<MountOwner>) -> bool;
}

/// Where an image is mounted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placement<'a> {
    /// What mount(2) is given: the mount point itself, or `/proc/self/fd/N` of a directory the
    /// daemon checked through a descriptor (the mount then lands on that very directory).
    pub(crate) target: &'a Path,
    /// The mount point's canonical path: unmounting, reports, probes.
    pub(crate) mountpoint: &'a Path,
}

/// Mounts `image` as `options` say at `place`, and returns once it answers: the mount and the
/// probe `status` reads. The path is chosen here and nowhere else; see the module doc for the
/// fallback rule.
pub(crate) fn mount_image(
    image: Image,
    options: &Options,
    place: Placement<'_>,
    host: &mut dyn MountHost,
) -> anyhow::Result<(Mounted, Probe)> {
    // uring=on without the kernel's FUSE over io_uring: one line saying how to enable it.
    if let Err(why) = options.uring.check() {
        bail!("{}: {why}", crate::quote::path(place.mountpoint));
    }
    let (engine, not_kernel) = crate::engine::choose(options, host.privileged())?;
    if let Some(why) = not_kernel {
        log_line!(
            "{}: {}: {why}",
            host.who(),
            crate::quote::path(place.mountpoint)
        );
    }
    if engine == Engine::Kernel {
        match mount_kernel(&image, options, place, host) {
            Ok(mounted) => return Ok(mounted),
            Err(e) if options.engine == Engine::Auto => log_line!(
                "{}: {}: FUSE, not the kernel path: {e:#}",
                host.who(),
                crate::quote::path(place.mountpoint)
            ),
            Err(e) => return Err(e),
        }
    }
    mount_fuse(image, options, place, host)
}

/// The kernel path: translated, then EROFS mounted on the metadata image and the blob.
fn mount_kernel(
    image: &Image,
    options: &Options,
    place: Placement<'_>,
    host: &mut dyn MountHost,
) -> anyhow::Result<(Mounted, Probe)> {
    // Before any thread: translating starts none.
    let prepared = Prepared::new(image.clone(), &options.kernel_options(image)?)?;
    host.before_threads()?;
    let mounted = host.blob_fs(options.uring).and_then(|kernel| {
        Ok(kernel.mount(
            prepared,
            place.target,
            place.mountpoint,
            options.flags.ms_flags(),
        )?)
    });
    match mounted {
        Ok(mount) => {
            let mount = Arc::new(mount);
            Ok((Mounted::Kernel(mount.clone()), Probe::Kernel(mount)))
        }
        Err(e) => {
            host.kernel_path_abandoned();
            Err(e)
        }
    }
}

/// The FUSE path: mounted, served on the session's threads, and probed.
fn mount_fuse(
    image: Image,
    options: &Options,
    place: Placement<'_>,
    host: &mut dyn MountHost,
) -> anyhow::Result<(Mounted, Probe)> {
    let mounted = MountedImage::mount_through(
        image,
        place.target,
        place.mountpoint,
        &options.fuse_config(),
    )
    .map_err(explain_mount_error)?;
    host.before_threads()?;
    let (mounted, probe) = Mounted::start_fuse(mounted)
        .with_context(|| format!("{}: cannot serve the mount", place.mountpoint.display()))?;
    if !host.answers(place.mountpoint, options.owner) {
        mounted.abandon(place.mountpoint);
        bail!("{}: the mount does not answer", place.mountpoint.display());
    }
    Ok((mounted, probe))
}

/// A mount refused for want of /dev/fuse names /dev/fuse: the session opens it before it mounts
/// (or asks fusermount3), and its "Permission denied" otherwise reads as if the mount point were at
/// fault. Distributions ship /dev/fuse as mode 0666; some machines have it 0600.
fn explain_mount_error(e: MountError) -> anyhow::Error {
    use nix::unistd::AccessFlags;
    if let MountError::Mount(mountpoint, io) = &e {
        let refused = matches!(io.raw_os_error(), Some(libc::EACCES | libc::EPERM));
        // access(2) checks the real uid: the user who ran squashd.
        if refused {
            if let Err(errno) =
                nix::unistd::access("/dev/fuse", AccessFlags::R_OK | AccessFlags::W_OK)
            {
                return anyhow::anyhow!(
                    "cannot mount on {}: /dev/fuse: {} (uid {}): a FUSE mount needs /dev/fuse \
                     readable and writable by the user who mounts; distributions ship it as \
                     mode 0666 (as root: chmod 0666 /dev/fuse), or add the user to the group \
                     that owns it",
                    mountpoint.display(),
                    errno.desc(),
                    nix::unistd::getuid()
                );
            }
        }
    }
    e.into()
}
