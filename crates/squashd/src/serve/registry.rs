//! The images a daemon serves: attach, detach and report. The registry's lock guards only the
//! table of mounts (the control plane); requests to a mounted image never take it, and no two
//! images share a lock on their read paths.

use super::access::AccessLimits;
use super::mounted::Mounted;
use super::probe::answers;
use crate::control::protocol::{Request, Response, Status};
use crate::control::report::{status, FileId, Probe, ServedImage};
use crate::control::{Caller, Controller};
use crate::dead_mounts::{clear_dead_kernel_mounts, clear_dead_mount};
use crate::engine;
use crate::mount::kernel::{mount_flags, translation_options};
use crate::options::{Engine, Options};
use anyhow::{bail, Context};
use squashd_core::{Caches, Image};
use squashd_fuse::MountedImage;
use squashd_kernel::{KernelPath, Prepared};
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

/// The attached images.
pub struct Registry {
    shared: Arc<Caches>,
    limits: AccessLimits,
    mounts: Mutex<BTreeMap<PathBuf, Attached>>,
    /// Where the kernel path's blob file system is mounted, once the first image needs it.
    blob_dir: PathBuf,
    kernel: Mutex<Option<Arc<KernelPath>>>,
    /// How remote images are fetched and cached, unless their options say otherwise.
    remote: crate::remote::RemoteSettings,
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
            mounts: Mutex::new(BTreeMap::new()),
            blob_dir,
            kernel: Mutex::new(None),
            remote: crate::remote::RemoteSettings::default(),
        }
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

    /// The daemon's blob file system, mounted on first use.
    fn kernel_path(&self) -> anyhow::Result<Arc<KernelPath>> {
        let mut kernel = self.kernel.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = kernel.as_ref() {
            return Ok(k.clone());
        }
        // Two request threads: blob reads are large, and each decompresses many blocks.
        let started = KernelPath::start(&self.blob_dir, 2).with_context(|| {
            format!(
                "{}: cannot mount the kernel path's blob file system",
                self.blob_dir.display()
            )
        })?;
        let started = Arc::new(started);
        *kernel = Some(started.clone());
        Ok(started)
    }

    fn table(&self) -> std::sync::MutexGuard<'_, BTreeMap<PathBuf, Attached>> {
        // A panic elsewhere while holding the lock leaves the table itself consistent (every
        // change is one insert or remove), so keep serving.
        self.mounts.lock().unwrap_or_else(|e| e.into_inner())
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
        let held = self
            .table()
            .values()
            .filter(|a| a.owner.is_some() && a.owner == Some(caller.uid))
            .count();
        let mut parsed = Options::parse(options, image)?;
        let grant =
            self.limits
                .check_attach(caller, image, mountpoint, options, &mut parsed, held)?;
        let (image_path, mountpoint, options) = (grant.image_path, grant.mountpoint, grant.options);
        if self.table().contains_key(&mountpoint) {
            bail!(
                "{}: an image is already attached there",
                mountpoint.display()
            );
        }
        // A cache option gives the image a budget of its own (a floor and a cap at once)
        // instead of a share of the daemon's.
        let private_cache = parsed.gave_cache_budget();
        if !private_cache {
            parsed.open.caches = Some(self.shared.clone());
        }
        // Dozens of images share the cores: one request thread each (as squashfuse_ll has),
        // rather than the per-core pool a lone mount gets; `threads=N` gives a busy image more.
        // Each thread is a clone of /dev/fuse, a stack and fuser's 16 MiB read buffer: a second
        // one made 69 images slower to be ready, and cold walks gained little from it
        // (bench/results/notes-from-code-comments.md, "serve: request threads per image").
        if !parsed.gave("threads") {
            parsed.mount.threads = 1;
        }
        if !parsed.gave("prefetch_threads") {
            parsed.mount.prefetch_threads = 1;
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
        parsed.open.offset = source.offset;
        // A remote image is shown by its address without secrets.
        let image_path = PathBuf::from(&*source.name);
        if !parsed.gave("fsname") {
            parsed.mount.fsname = source.name.to_string();
        }
        let remote = source.remote;
        let opened = Image::from_source(source.source, source.name, &parsed.open)?;
        // Through the descriptor the checks were made on (see access.rs).
        let target = PathBuf::from(format!("/proc/self/fd/{}", grant.mount_dir.as_raw_fd()));
        let (engine, fell_back) = engine::choose(&parsed, grant.owner.is_none())?;
        if let Some(why) = fell_back {
            log_line!("squashd serve: {}: {why}", crate::quote::path(&mountpoint));
        }
        let (mounted, probe) = if engine == Engine::Kernel {
            let prepared = Prepared::new(opened.clone(), &translation_options(&opened, &parsed)?)?;
            let flags = mount_flags(&parsed.mount.flags);
            let mount = self
                .kernel_path()?
                .mount(prepared, &target, &mountpoint, flags)?;
            let mount = Arc::new(mount);
            (Mounted::Kernel(mount.clone()), Probe::Kernel(mount))
        } else {
            let mounted =
                MountedImage::mount_through(opened.clone(), &target, &mountpoint, &parsed.mount)?;
            let started = Mounted::start_fuse(mounted)?;
            if !answers(&mountpoint, parsed.mount.owner) {
                started.0.abandon(&mountpoint);
                bail!("{}: the mount does not answer", mountpoint.display());
            }
            started
        };
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
                file_id,
                probe,
                since: Instant::now(),
                private_cache,
            },
            mounted,
            from_config,
            owner: grant.owner,
        };
        let mut table = self.table();
        if table.contains_key(&mountpoint) {
            drop(table);
            attached.mounted.abandon(&mountpoint);
            bail!(
                "{}: an image was attached there meanwhile",
                mountpoint.display()
            );
        }
        table.insert(mountpoint.clone(), attached);
        Ok(format!(
            "attached {} on {}",
            crate::quote::path(&image_path),
            crate::quote::path(&mountpoint)
        ))
    }

    /// Unmounts the image on `mountpoint` for `caller`; `lazy` detaches it even while busy. A
    /// user other than root detaches only what they attached.
    pub(crate) fn detach(
        &self,
        caller: &Caller,
        mountpoint: &Path,
        lazy: bool,
    ) -> anyhow::Result<String> {
        let key =
            crate::real_path::resolve(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
        let attached = {
            let mut table = self.table();
            let entry = table
                .get(&key)
                .with_context(|| format!("{}: no image is attached there", mountpoint.display()))?;
            if !caller.is_privileged() && entry.owner != Some(caller.uid) {
                bail!(
                    "permission denied: uid {} did not attach {}, so it may not detach it",
                    caller.uid,
                    key.display()
                );
            }
            table
                .remove(&key)
                .context("the image went away meanwhile")?
        };
        if let Err(e) = attached.mounted.unmount(lazy) {
            let hint = if e.raw_os_error() == Some(libc::EBUSY) {
                " (it is busy: close what uses it, or detach --lazy)"
            } else {
                ""
            };
            self.table().insert(key.clone(), attached);
            bail!("{}: cannot unmount: {e}{hint}", mountpoint.display());
        }
        attached.mounted.finish(lazy, &key);
        Ok(format!("detached {}", crate::quote::path(&key)))
    }

    /// Detaches every image (lazily: the daemon is going away), and the blob file system.
    pub fn detach_all(&self) {
        let all = std::mem::take(&mut *self.table());
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
        self.table().keys().cloned().collect()
    }

    /// The status report for `caller`: every image for root, only their own for a user (the
    /// daemon-wide figures stay).
    pub(crate) fn status(&self, caller: &Caller) -> Status {
        let table = self.table();
        let shown = |a: &Attached| caller.is_privileged() || a.owner == Some(caller.uid);
        status(
            &self.shared.stats(),
            table
                .iter()
                .filter(|(_, a)| shown(a))
                .map(|(m, a)| (m.as_path(), &a.served)),
        )
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
