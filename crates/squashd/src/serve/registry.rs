//! The images a daemon serves: attach, detach and report. The registry's lock guards only the
//! table of mounts (the control plane); requests to a mounted image never take it, and no two
//! images share a lock on their read paths.

use crate::control::protocol::{Request, Response, Status};
use crate::control::report::{status, ServedImage};
use crate::control::Controller;
use crate::mount::parse_options;
use anyhow::{bail, Context};
use squashd_core::{Caches, Image};
use squashd_fuse::{MountedImage, Serving, Unmounter};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// Options that give an image a cache budget of its own (a floor and a cap at once) instead of
/// a share of the daemon's.
const PRIVATE_BUDGET_OPTIONS: [&str; 3] = ["metadata_cache", "data_cache", "compressed_cache"];

/// How long an attach waits for a fresh mount to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

struct Attached {
    served: ServedImage,
    unmounter: Unmounter,
    serving: Serving,
    from_config: bool,
}

/// The attached images.
pub struct Registry {
    shared: Arc<Caches>,
    mounts: Mutex<BTreeMap<PathBuf, Attached>>,
}

fn absolute(path: &Path, what: &str) -> anyhow::Result<PathBuf> {
    path.canonicalize()
        .with_context(|| format!("{}: {what} not found", path.display()))
}

impl Registry {
    /// A registry whose images share `caches` unless given budgets of their own.
    pub fn new(shared: Arc<Caches>) -> Self {
        Registry {
            shared,
            mounts: Mutex::new(BTreeMap::new()),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, BTreeMap<PathBuf, Attached>> {
        // A panic elsewhere while holding the lock leaves the table itself consistent (every
        // change is one insert or remove), so keep serving.
        self.mounts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Mounts `image` on `mountpoint` with `options` (as `squashd mount -o`), and returns once
    /// the mount answers. `from_config` marks images a config reload manages.
    pub fn attach(
        &self,
        image: &Path,
        mountpoint: &Path,
        options: &[String],
        from_config: bool,
    ) -> anyhow::Result<String> {
        let image_path = absolute(image, "image")?;
        let mountpoint = absolute(mountpoint, "mount point")?;
        clear_dead_mount(&mountpoint);
        if !mountpoint.is_dir() {
            bail!("{}: mount point is not a directory", mountpoint.display());
        }
        if self.table().contains_key(&mountpoint) {
            bail!(
                "{}: an image is already attached there",
                mountpoint.display()
            );
        }
        let mut parsed = parse_options(options, &image_path)?;
        let private_cache = options
            .iter()
            .flat_map(|o| o.split(','))
            .any(|o| PRIVATE_BUDGET_OPTIONS.contains(&o.split('=').next().unwrap_or("")));
        if !private_cache {
            parsed.open.caches = Some(self.shared.clone());
        }
        let given = |key: &str| {
            options
                .iter()
                .flat_map(|o| o.split(','))
                .any(|o| o.starts_with(key))
        };
        // Dozens of images share the cores: one request thread each (as squashfuse_ll has),
        // rather than the per-core pool a lone mount gets; `threads=N` gives a busy image more.
        // Each thread is a clone of /dev/fuse, a stack and fuser's 16 MiB read buffer: with
        // two each, 69 images were ready and listed in 56 ms instead of 48 (medians of 6), and
        // cold walks gain little from a second thread (16 parallel `find`s of usr took about
        // as long with one).
        if !given("threads=") {
            parsed.mount.threads = 1;
        }
        if !given("prefetch_threads=") {
            parsed.mount.prefetch_threads = 1;
        }
        let opened = Image::open(&image_path, &parsed.open)?;
        let mounted = MountedImage::mount(opened.clone(), &mountpoint, &parsed.mount)?;
        let unmounter = mounted.unmounter();
        let probe = mounted.probe();
        // fuser's session threads serve the mount; no thread of ours waits on each image.
        let serving = mounted.start()?;
        if !answers(&mountpoint) {
            let _ = unmounter.unmount(true);
            let _ = serving.wait_in_background(mountpoint.display().to_string());
            bail!("{}: the mount does not answer", mountpoint.display());
        }
        let attached = Attached {
            served: ServedImage {
                image_path: image_path.clone(),
                options: options.to_vec(),
                image: opened,
                probe,
                since: Instant::now(),
                private_cache,
            },
            unmounter,
            serving,
            from_config,
        };
        let mut table = self.table();
        if table.contains_key(&mountpoint) {
            drop(table);
            let _ = attached.unmounter.unmount(true);
            let _ = attached
                .serving
                .wait_in_background(mountpoint.display().to_string());
            bail!(
                "{}: an image was attached there meanwhile",
                mountpoint.display()
            );
        }
        table.insert(mountpoint.clone(), attached);
        Ok(format!(
            "attached {} on {}",
            image_path.display(),
            mountpoint.display()
        ))
    }

    /// Unmounts the image on `mountpoint`; `lazy` detaches it even while busy.
    pub fn detach(&self, mountpoint: &Path, lazy: bool) -> anyhow::Result<String> {
        let key = mountpoint
            .canonicalize()
            .unwrap_or_else(|_| mountpoint.to_path_buf());
        let attached = self
            .table()
            .remove(&key)
            .with_context(|| format!("{}: no image is attached there", mountpoint.display()))?;
        if let Err(e) = attached.unmounter.unmount(lazy) {
            let hint = if e.raw_os_error() == Some(libc::EBUSY) {
                " (it is busy: close what uses it, or detach --lazy)"
            } else {
                ""
            };
            self.table().insert(key.clone(), attached);
            bail!("{}: cannot unmount: {e}{hint}", mountpoint.display());
        }
        if lazy {
            // The session ends once the mount's last user has gone.
            let _ = attached
                .serving
                .wait_in_background(key.display().to_string());
        } else if let Err(e) = attached.serving.wait() {
            eprintln!("squashd serve: {}: {e}", key.display());
        }
        Ok(format!("detached {}", key.display()))
    }

    /// Detaches every image (lazily: the daemon is going away).
    pub fn detach_all(&self) {
        let all = std::mem::take(&mut *self.table());
        for (mountpoint, attached) in all {
            if let Err(e) = attached.unmounter.unmount(true) {
                eprintln!(
                    "squashd serve: {}: cannot unmount: {e}",
                    mountpoint.display()
                );
            }
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

    /// The status report.
    pub fn status(&self) -> Status {
        let table = self.table();
        status(
            &self.shared.stats(),
            table.iter().map(|(m, a)| (m.as_path(), &a.served)),
        )
    }
}

/// Whether `mountpoint` answers within the timeout: a stat shows the FUSE root (node 1), which
/// only the new mount's worker threads can have served, and the root lists.
///
/// Listing the root here, while the other images are still being attached, also leaves the
/// listing in the kernel's cache (every directory is cached as FOPEN_CACHE_DIR): the first
/// `ls` of each root after READY=1, which is what a booting host does next, then costs no round
/// trip. On the 69 E3 images: ready-and-listed in 58 ms instead of 68 (medians of 6).
fn answers(mountpoint: &Path) -> bool {
    for _ in 0..2 {
        let (reply, report) = mpsc::channel();
        let sent = PROBER.with_borrow_mut(|prober| {
            if prober.is_none() {
                *prober = Prober::spawn().ok();
            }
            let sent = prober
                .as_ref()
                .is_some_and(|p| p.jobs.send((mountpoint.to_path_buf(), reply)).is_ok());
            if !sent {
                // Its thread is gone (or could not start): the next try starts another.
                *prober = None;
            }
            sent
        });
        if !sent {
            continue;
        }
        let report = report.recv_timeout(ANSWER_TIMEOUT + Duration::from_secs(1));
        if report.is_err() {
            // Stuck in a stat of a mount that will be torn down: leave it there, and give
            // the next attach a new helper.
            PROBER.with_borrow_mut(|prober| *prober = None);
        }
        return report == Ok(true);
    }
    false
}

/// A helper thread that probes new mounts for the thread that attaches them, so that a mount
/// that never answers cannot hang the attaching thread. Each attaching thread keeps its helper
/// for its next attach: 69 images at boot start a few helpers rather than 69 threads (each a
/// stack, a signal stack, and an unmap that interrupts the other CPUs when it ends). A helper
/// ends when its attaching thread does.
struct Prober {
    jobs: mpsc::Sender<(PathBuf, mpsc::Sender<bool>)>,
}

thread_local! {
    static PROBER: std::cell::RefCell<Option<Prober>> = const { std::cell::RefCell::new(None) };
}

impl Prober {
    fn spawn() -> std::io::Result<Prober> {
        let (jobs, queue) = mpsc::channel::<(PathBuf, mpsc::Sender<bool>)>();
        std::thread::Builder::new()
            .name("attach-probe".into())
            .spawn(move || {
                for (path, reply) in queue {
                    let _ = reply.send(probe(&path));
                }
            })?;
        Ok(Prober { jobs })
    }
}

/// Stats and lists the root of the mount on `path` (see [`answers`]). The first stat normally
/// blocks until the mount's workers answer, so the loop rarely sleeps.
fn probe(path: &Path) -> bool {
    let deadline = Instant::now() + ANSWER_TIMEOUT;
    while Instant::now() < deadline {
        // mount(2) has returned, so the path leads into the new mount: node 1 there is our
        // root. (Reading /proc/self/mountinfo instead costs a walk of every mount, for each of
        // dozens of images attached at once.)
        if std::fs::metadata(path).is_ok_and(|m| m.ino() == 1) {
            return std::fs::read_dir(path).is_ok_and(|mut entries| entries.all(|e| e.is_ok()));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

/// A squashd mount whose daemon died (killed, crashed) answers everything with ENOTCONN and
/// would block its mount point forever: a restarted daemon (systemd's Restart=on-failure)
/// could attach nothing there. Such a mount serves no one, so it is detached.
fn clear_dead_mount(mountpoint: &Path) {
    // statfs, not stat: the kernel answers a stat of the root from attributes it keeps forever
    // (an image never changes), even once the daemon is gone; statfs always asks the daemon.
    let dead = nix::sys::statfs::statfs(mountpoint).err() == Some(nix::errno::Errno::ENOTCONN);
    if dead && is_fuse_mount(mountpoint) {
        match squashd_fuse::unmount(mountpoint, true) {
            Ok(()) => eprintln!(
                "squashd serve: {}: detached a dead squashd mount left there",
                mountpoint.display()
            ),
            Err(e) => eprintln!(
                "squashd serve: {}: cannot detach the dead mount left there: {e}",
                mountpoint.display()
            ),
        }
    }
}

/// Whether /proc/self/mountinfo shows a squashd mount at `path`.
fn is_fuse_mount(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = path.to_string_lossy();
    info.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        f.len() > 4 && f[4] == want && l.contains("fuse.squashd")
    })
}

impl Controller for Registry {
    fn dispatch(&self, request: Request) -> Response {
        let result = match request {
            Request::Attach {
                image,
                mountpoint,
                options,
            } => self.attach(&image, &mountpoint, &options, false),
            Request::Detach { mountpoint, lazy } => self.detach(&mountpoint, lazy),
            Request::Status => return Response::Status(self.status()),
        };
        logged(result)
    }
}

/// The response to a request that was carried out or failed, also written to the log.
fn logged(result: anyhow::Result<String>) -> Response {
    match result {
        Ok(message) => {
            eprintln!("squashd serve: {message}");
            Response::Ok { message }
        }
        Err(e) => {
            let message = format!("{e:#}");
            eprintln!("squashd serve: {message}");
            Response::Error { message }
        }
    }
}
