//! The images a daemon serves: attach, detach and report. The registry's lock guards only the
//! table of mounts (the control plane); requests to a mounted image never take it, and no two
//! images share a lock on their read paths.

use super::access::AccessLimits;
use super::probe::answers;
use crate::control::protocol::{Request, Response, Status};
use crate::control::report::{snapshot, FileId, ServedImage};
use crate::control::{Caller, Controller};
use crate::dead_mounts::{clear_dead_kernel_mounts, clear_dead_mount};
use crate::funnel::{mount_image, MountHost, Mounted, Placement};
use crate::options::{Context as OptionsContext, Options};
use anyhow::{bail, Context};
use squashd_core::{Caches, Image};
use squashd_fuse::server::UringMode;
use squashd_fuse::{MountOwner, NotOurMount};
use squashd_kernel::KernelPath;
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

struct Attached {
    served: ServedImage,
    mounted: Mounted,
    from_config: bool,
    /// The user it was attached for through the control socket (None: root, or the config).
    owner: Option<u32>,
    /// Writes a remote image's access trace (`trace=`) when it is detached.
    _trace: Option<crate::remote::TraceOnDrop>,
}

/// The registry's table: the images attached, and the mount points being attached or detached.
#[derive(Default)]
struct Table {
    attached: BTreeMap<PathBuf, Attached>,
    /// Mount points an attach is mounting on, or a detach unmounting, now, with the user each
    /// is for (None: root, or the config). They keep a second attach off the same mount point
    /// and count against `max_images_per_user` until the image is in `attached` or gone.
    reserved: BTreeMap<PathBuf, Option<u32>>,
}

impl Table {
    /// How many images `uid` holds attached or is attaching.
    fn held_by(&self, uid: u32) -> usize {
        let attached = self.attached.values().filter(|a| a.owner == Some(uid));
        let reserved = self.reserved.values().filter(|o| **o == Some(uid));
        attached.count() + reserved.count()
    }

    /// Takes out the images whose mounts are over (the idle timeout, or `umount` by someone
    /// else), to be finished outside the lock.
    fn take_over(&mut self) -> Vec<(PathBuf, Attached)> {
        let over: Vec<PathBuf> = self
            .attached
            .iter()
            .filter(|(_, a)| a.mounted.is_over())
            .map(|(m, _)| m.clone())
            .collect();
        over.into_iter()
            .filter_map(|m| self.attached.remove_entry(&m))
            .collect()
    }
}

/// A mount point reserved in the table (see [`Table::reserved`]); released when dropped,
/// unless [`Reservation::fulfil`] puts an image there.
struct Reservation<'a> {
    registry: &'a Registry,
    mountpoint: Option<PathBuf>,
}

impl Reservation<'_> {
    /// Releases the reservation and attaches `attached` in its place, in one step under the
    /// lock (`table`), so that no one sees the user's count drop or the mount point free.
    fn fulfil(mut self, table: &mut Table, attached: Attached) {
        if let Some(mountpoint) = self.mountpoint.take() {
            table.reserved.remove(&mountpoint);
            table.attached.insert(mountpoint, attached);
        }
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if let Some(mountpoint) = self.mountpoint.take() {
            self.registry.table().reserved.remove(&mountpoint);
        }
    }
}

/// The attached images.
pub struct Registry {
    shared: Arc<Caches>,
    limits: AccessLimits,
    mounts: Mutex<Table>,
    /// Where the kernel path's blob file system is mounted, once the first image needs it.
    blob_dir: PathBuf,
    kernel: Mutex<Option<Arc<KernelPath>>>,
    /// How remote images are fetched and cached, unless their options say otherwise.
    remote: crate::remote::RemoteSettings,
    /// FUSE over io_uring for images that give no `uring=`, and for the blob file system.
    uring: UringMode,
}

impl Registry {
    /// A registry whose images share `caches` unless given budgets of their own, whose users
    /// (other than root) are held to `limits`, and whose kernel-path images have their blobs
    /// served on `blob_dir`. What a dead daemon left on `blob_dir` is cleared first.
    pub fn new(shared: Arc<Caches>, limits: AccessLimits, blob_dir: PathBuf) -> Self {
        clear_dead_kernel_mounts(&blob_dir);
        Registry {
            shared,
            limits,
            mounts: Mutex::new(Table::default()),
            blob_dir,
            kernel: Mutex::new(None),
            remote: crate::remote::RemoteSettings::default(),
            uring: UringMode::default(),
        }
    }

    /// The daemon's `uring` (its config's): the transport of images whose options give none,
    /// and of the kernel path's blob file system.
    pub fn with_uring(mut self, uring: UringMode) -> Self {
        self.uring = uring;
        self
    }

    /// The daemon's settings for remote images (its config's `disk_cache`, `disk_cache_size`).
    pub fn with_remote(mut self, remote: crate::remote::RemoteSettings) -> Self {
        self.remote = remote;
        self
    }

    /// An image's remote settings: its options, and the daemon's where it gave none.
    fn remote_settings(&self, parsed: &Options) -> crate::remote::RemoteSettings {
        let mut settings = parsed.remote.clone();
        if !parsed.gave("disk_cache") {
            settings.disk_cache_dir = self.remote.disk_cache_dir.clone();
        }
        if !parsed.gave("disk_cache_size") {
            settings.disk_cache_bytes = self.remote.disk_cache_bytes;
        }
        settings
    }

    /// The daemon's one blob file system, started on first use. Every kernel-path image shares
    /// it, so it follows the daemon's `uring`, not the first image's: `asked` (the image's
    /// `uring=`, for `mountpoint`) only gets a log line when it differs.
    fn kernel_path(&self, asked: UringMode, mountpoint: &Path) -> anyhow::Result<Arc<KernelPath>> {
        if asked != self.uring {
            log_line!(
                "squashd serve: {}: uring={} does not apply to the kernel path: its blob file \
                 system is shared by every kernel-path image and follows the daemon's \
                 `uring = \"{}\"` (config)",
                crate::quote::path(mountpoint),
                asked.as_str(),
                self.uring.as_str()
            );
        }
        let mut kernel = self.kernel.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = kernel.as_ref() {
            return Ok(k.clone());
        }
        if let Err(why) = self.uring.check() {
            bail!(
                "{}: the kernel path's blob file system: {why}",
                self.blob_dir.display()
            );
        }
        // Two request threads: blob reads are large, and each decompresses many blocks.
        let started = KernelPath::start(&self.blob_dir, 2, self.uring).with_context(|| {
            format!(
                "{}: cannot mount the kernel path's blob file system",
                self.blob_dir.display()
            )
        })?;
        let started = Arc::new(started);
        *kernel = Some(started.clone());
        Ok(started)
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        // A panic elsewhere while holding the lock leaves the table itself consistent (every
        // change is one insert or remove, or one of each), so keep serving.
        self.mounts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets the images whose mounts are over (see [`Table::take_over`]), saying so.
    fn forget_ended(&self) {
        let over = self.table().take_over();
        for (mountpoint, attached) in over {
            log_line!(
                "squashd serve: {}: unmounted (idle timeout, or by someone else): no longer attached",
                mountpoint.display()
            );
            attached.mounted.finish(false, &mountpoint);
        }
    }

    /// Reserves `mountpoint` for an attach for `owner` (None: root or the config): refused if
    /// an image is attached or being attached there, or if `owner` holds as many images as
    /// `max_images_per_user` allows, counting the attaches under way.
    fn reserve(&self, mountpoint: &Path, owner: Option<u32>) -> anyhow::Result<Reservation<'_>> {
        let mut table = self.table();
        if table.attached.contains_key(mountpoint) || table.reserved.contains_key(mountpoint) {
            bail!(
                "{}: an image is already attached there",
                mountpoint.display()
            );
        }
        if let Some(uid) = owner {
            let held = table.held_by(uid);
            if held >= self.limits.max_images_per_user {
                bail!(
                    "permission denied: uid {uid} already has {held} images attached (max_images_per_user = {})",
                    self.limits.max_images_per_user
                );
            }
        }
        table.reserved.insert(mountpoint.to_path_buf(), owner);
        Ok(Reservation {
            registry: self,
            mountpoint: Some(mountpoint.to_path_buf()),
        })
    }

    /// Mounts `image` on `mountpoint` with `options` (as `squashd mount -o`) for `caller`, and
    /// returns once the mount answers. `from_config` marks images a config reload manages.
    pub(crate) fn attach(
        &self,
        caller: Caller,
        image: &Path,
        mountpoint: &Path,
        options: &[String],
        from_config: bool,
    ) -> anyhow::Result<String> {
        // Before the mount point is opened: a dead mount there would refuse that. Only for
        // root: a user's path is opened with their rights (mount_point.rs, which clears a dead
        // mount it finds), not walked as root first.
        if caller.is_privileged() {
            if let Ok(path) = crate::real_path::resolve(mountpoint) {
                clear_dead_mount(&path);
            }
        }
        self.forget_ended();
        // A first count, for a quick refusal; the one that holds is the reservation's below.
        let held = self.table().held_by(caller.uid);
        let mut parsed = Options::parse(options, image, OptionsContext::Daemon)?;
        if !parsed.gave("uring") {
            parsed.uring = self.uring;
        }
        let grant =
            self.limits
                .check_attach(caller, image, mountpoint, options, &mut parsed, held)?;
        let (image_path, mountpoint, options) = (grant.image_path, grant.mountpoint, grant.options);
        // Counted and reserved in one step before mounting: concurrent attaches cannot all
        // pass the count and then all mount.
        let reservation = self.reserve(&mountpoint, grant.owner)?;
        // A cache option gives the image a budget of its own (a floor and a cap at once)
        // instead of a share of the daemon's.
        let private_cache = parsed.gave_cache_budget();
        if !private_cache {
            parsed.open.caches = Some(self.shared.clone());
        }
        let file_id = grant.image.as_ref().and_then(FileId::of);
        let given_offset = parsed.gave("offset").then_some(parsed.open.offset);
        let source = match grant.image {
            Some(file) => {
                crate::remote::from_file(file, &image_path, given_offset, parsed.partition)?
            }
            None => crate::remote::open(
                &image_path,
                given_offset,
                parsed.partition,
                &self.remote_settings(&parsed),
            )?,
        };
        let caches = crate::verity::image_caches(&mut parsed.open);
        let (source, verified) =
            crate::verity::verify_opened(source, &image_path, &parsed.verity, &caches)?;
        drop(grant.verity_files);
        parsed.open.offset = source.offset;
        // A remote image is shown by its address without secrets.
        let image_path = PathBuf::from(&*source.name);
        if !parsed.gave("fsname") {
            parsed.fsname = source.name.to_string();
        }
        let remote = source.remote;
        let opened = Image::from_source(source.source, source.name, &parsed.open)?;
        // Through the descriptor the checks were made on (see access.rs).
        let target = PathBuf::from(format!("/proc/self/fd/{}", grant.mount_dir.as_raw_fd()));
        let place = Placement {
            target: &target,
            mountpoint: &mountpoint,
        };
        let mut host = DaemonHost {
            registry: self,
            privileged: grant.owner.is_none(),
            mountpoint: &mountpoint,
        };
        let (mounted, probe) = mount_image(opened.clone(), &parsed, place, &mut host)?;
        drop(grant.mount_dir);
        let settings = self.remote_settings(&parsed);
        if let (Some(remote), Some(list)) = (&remote, &settings.prefetch) {
            crate::remote::start_prefetch(&opened, remote, list);
        }
        let attached = Attached {
            _trace: crate::remote::TraceOnDrop::new(remote.as_ref(), settings.trace.as_deref()),
            served: ServedImage {
                image_path: image_path.clone(),
                options: options.clone(),
                image: opened,
                remote,
                verified,
                file_id,
                probe,
                since: Instant::now(),
                private_cache,
            },
            mounted,
            from_config,
            owner: grant.owner,
        };
        reservation.fulfil(&mut self.table(), attached);
        Ok(format!(
            "attached {} on {}",
            crate::quote::path(&image_path),
            crate::quote::path(&mountpoint)
        ))
    }

    /// Unmounts the image on `mountpoint` for `caller`; `lazy` detaches it even while busy. A
    /// user other than root detaches only what they attached. Only the mount the daemon made
    /// is unmounted: a mount point that leads elsewhere now is reported and nothing unmounted.
    pub(crate) fn detach(
        &self,
        caller: &Caller,
        mountpoint: &Path,
        lazy: bool,
    ) -> anyhow::Result<String> {
        self.forget_ended();
        let key =
            crate::real_path::resolve(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
        let (attached, reservation) = {
            let mut table = self.table();
            let entry = table
                .attached
                .get(&key)
                .with_context(|| format!("{}: no image is attached there", mountpoint.display()))?;
            if !caller.is_privileged() && entry.owner != Some(caller.uid) {
                bail!(
                    "permission denied: uid {} did not attach {}, so it may not detach it",
                    caller.uid,
                    key.display()
                );
            }
            let attached = table
                .attached
                .remove(&key)
                .context("the image went away meanwhile")?;
            // Reserved while it is being unmounted: no attach there meanwhile, and the owner's
            // count unchanged until it is gone.
            table.reserved.insert(key.clone(), attached.owner);
            let reservation = Reservation {
                registry: self,
                mountpoint: Some(key.clone()),
            };
            (attached, reservation)
        };
        if let Err(e) = attached.mounted.unmount(lazy) {
            reservation.fulfil(&mut self.table(), attached);
            if NotOurMount::is(&e) {
                // Says which mount point, and that nothing was unmounted.
                bail!("{e}");
            }
            let hint = if e.raw_os_error() == Some(libc::EBUSY) {
                " (it is busy: close what uses it, or detach --lazy)"
            } else {
                ""
            };
            bail!("{}: cannot unmount: {e}{hint}", mountpoint.display());
        }
        attached.mounted.finish(lazy, &key);
        drop(reservation);
        Ok(format!("detached {}", crate::quote::path(&key)))
    }

    /// Detaches every image (lazily: the daemon is going away), and the blob file system. Only
    /// the mounts the daemon made: one whose mount point leads elsewhere now is reported and
    /// left alone.
    pub fn detach_all(&self) {
        let all = std::mem::take(&mut self.table().attached);
        for (mountpoint, attached) in all {
            if let Err(e) = attached.mounted.unmount(true) {
                log_line!(
                    "squashd serve: {}: cannot unmount: {e}",
                    crate::quote::path(&mountpoint)
                );
            }
        }
        let kernel = self.kernel.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(kernel) = kernel {
            kernel.detach_at_exit();
        }
    }

    /// (mount point, image, options) of every image attached from the config, for a reload.
    pub fn attached_from_config(&self) -> Vec<(PathBuf, PathBuf, Vec<String>)> {
        self.table()
            .attached
            .iter()
            .filter(|(_, a)| a.from_config)
            .map(|(m, a)| {
                (
                    m.clone(),
                    a.served.image_path.clone(),
                    a.served.options.clone(),
                )
            })
            .collect()
    }

    /// Mount points of every attached image.
    pub fn mountpoints(&self) -> Vec<PathBuf> {
        self.table().attached.keys().cloned().collect()
    }

    /// The status report for `caller`: every image for root, only their own for a user (the
    /// daemon-wide figures stay). Taken from memory under the lock; the images' files are
    /// looked at after it is released, and for a bounded time (an image's path may lie on a
    /// file system that hangs, and that must not hold up every attach and detach, nor status
    /// itself).
    pub(crate) fn status(&self, caller: &Caller) -> Status {
        self.forget_ended();
        let shown = |a: &Attached| caller.is_privileged() || a.owner == Some(caller.uid);
        let snapshot = {
            let table = self.table();
            snapshot(
                &self.shared.stats(),
                table
                    .attached
                    .iter()
                    .filter(|(_, a)| shown(a))
                    .map(|(m, a)| (m.as_path(), &a.served)),
            )
        };
        snapshot.finish()
    }
}

/// What the daemon gives the mount funnel: the kernel path only for root's and the config's
/// images, its one blob file system, and its attach probe (with the user's rights for a
/// user's mount).
struct DaemonHost<'a> {
    registry: &'a Registry,
    privileged: bool,
    /// The mount point being attached (for log lines).
    mountpoint: &'a Path,
}

impl MountHost for DaemonHost<'_> {
    fn who(&self) -> &'static str {
        "squashd serve"
    }

    fn privileged(&self) -> bool {
        self.privileged
    }

    fn before_threads(&mut self) -> anyhow::Result<()> {
        Ok(())
    }

    fn blob_fs(&mut self, uring: UringMode) -> anyhow::Result<Arc<KernelPath>> {
        self.registry.kernel_path(uring, self.mountpoint)
    }

    fn answers(&self, mountpoint: &Path, owner: Option<MountOwner>) -> bool {
        answers(mountpoint, owner)
    }
}

impl Controller for Registry {
    fn dispatch(&self, request: Request, caller: Caller) -> Response {
        let result = match request {
            Request::Attach {
                image,
                mountpoint,
                options,
            } => self.attach(caller, &image, &mountpoint, &options, false),
            Request::Detach { mountpoint, lazy } => self.detach(&caller, &mountpoint, lazy),
            Request::Status => return Response::Status(Box::new(self.status(&caller))),
        };
        logged(result)
    }
}

/// The response to a request that was carried out or failed, also written to the log.
fn logged(result: anyhow::Result<String>) -> Response {
    match result {
        Ok(message) => {
            log_line!("squashd serve: {message}");
            Response::Ok { message }
        }
        Err(e) => {
            let message = format!("{e:#}");
            log_line!("squashd serve: {message}");
            Response::Error { message }
        }
    }
}

#[cfg(test)]
mod tests;
