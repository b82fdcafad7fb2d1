//! `squashd serve`: one daemon serving many images, attached and detached at run time through
//! a control socket, all sharing one cache budget.

mod access;
mod as_user;
mod client;
mod config;
mod mount_point;
mod probe;
mod prometheus;
mod registry;

pub use client::{attach, detach, status, AttachArgs, DetachArgs, StatusArgs};

use anyhow::Context;
use config::Config;
use registry::Registry;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use squashd_core::Caches;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Arguments of `squashd serve`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Runs in the foreground (as a systemd Type=notify service: READY=1 once every configured image \
answers). SIGHUP re-reads the config and attaches or detaches the difference; SIGTERM and SIGINT \
detach everything and exit. Control it with `squashd attach`, `squashd detach` and `squashd \
status`. The config format: packaging/serve.example.toml (from the Debian package: \
/usr/share/doc/squashd/examples/); the systemd unit and how to install it: \
packaging/squashd.service and packaging/README.md.")]
pub struct Args {
    /// The config file (TOML). Without one, the daemon starts with no images.
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
    /// The control socket (overrides the config's `socket`).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
}

fn load(args: &Args) -> anyhow::Result<Config> {
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if let Some(socket) = &args.socket {
        config.socket = socket.clone();
    }
    for bad in &config.bad_entries {
        log_line!("squashd serve: skipping {bad}");
    }
    Ok(config)
}

/// Attaches every image of `entries` in parallel; returns how many failed.
///
/// A few workers take the images in turn rather than a thread per image: at boot, 69 thread
/// creations and exits (stacks mapped and unmapped under the process's memory-map lock, TLB
/// shootdowns) cost more than they overlap (measured with `bench/tools/ab_serve_start.py`:
/// bench/results/notes-from-code-comments.md, "serve: attach workers"). An image that never
/// answers holds
/// its worker for the answer timeout, so there are enough workers for a few of those.
fn attach_all(registry: &Registry, entries: &[config::ImageEntry]) -> usize {
    let workers = (4 * squashd_core::cores()).max(8).min(entries.len());
    let next = AtomicUsize::new(0);
    let results: Vec<Mutex<Option<anyhow::Result<String>>>> =
        entries.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let (Some(e), Some(slot)) = (entries.get(i), results.get(i)) else {
                    break;
                };
                let result = registry.attach(
                    crate::control::Caller::daemon(),
                    &e.path,
                    &e.mountpoint,
                    &e.option_list(),
                    true,
                );
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
            });
        }
    });
    let mut failed = 0;
    for (e, result) in entries.iter().zip(results) {
        match result.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(Ok(message)) => log_line!("squashd serve: {message}"),
            Some(Err(err)) => {
                failed += 1;
                log_line!(
                    "squashd serve: cannot attach {}: {err:#}",
                    crate::quote::path(&e.mountpoint)
                );
            }
            // A worker panicked before it could report this image.
            None => failed += 1,
        }
    }
    failed
}

/// Brings the attached set in line with a re-read config: detaches what it no longer lists
/// (or lists differently) and attaches what is new. Images attached through the control socket
/// are left alone: the config does not know them.
fn reload(registry: &Registry, args: &Args) {
    let config = match load(args) {
        Ok(c) => c,
        Err(e) => {
            log_line!("squashd serve: reload failed, keeping the current images: {e:#}");
            return;
        }
    };
    let wanted: BTreeMap<PathBuf, &config::ImageEntry> = config
        .images
        .iter()
        .map(|e| {
            (
                crate::real_path::resolve(&e.mountpoint).unwrap_or_else(|_| e.mountpoint.clone()),
                e,
            )
        })
        .collect();
    for (mountpoint, image, options) in registry.attached_from_config() {
        let same = wanted.get(&mountpoint).is_some_and(|e| {
            crate::real_path::resolve(&e.path).is_ok_and(|p| p == image)
                && e.option_list() == options
        });
        if !same {
            match registry.detach(&crate::control::Caller::daemon(), &mountpoint, true) {
                Ok(m) => log_line!("squashd serve: {m}"),
                Err(e) => log_line!("squashd serve: {e:#}"),
            }
        }
    }
    let attached = registry.mountpoints();
    let new: Vec<config::ImageEntry> = wanted
        .iter()
        .filter(|(m, _)| !attached.contains(m))
        .map(|(_, e)| (*e).clone())
        .collect();
    attach_all(registry, &new);
}

/// Descriptors an attached image may hold: its file, a hash tree's, its mount point's,
/// /dev/fuse (and a ring's), the kernel path's blob.
const DESCRIPTORS_PER_IMAGE: usize = 6;

/// Grows the descriptor table, once and before the daemon starts its threads, to hold what
/// `images` attached images will open. The kernel grows the table by doubling, and while more
/// than one thread shares it each growth waits for an RCU grace period, with every thread that
/// opens a file meanwhile (`expand_fdtable`): at boot, attach workers stalled up to 40 ms in
/// one doubling (off-CPU in `expand_files`), when a verity tree per image took E3's 69 images
/// past 256 descriptors (bench/results/2026-11-27-verity-s7.md). A single-threaded process
/// grows it without that wait. The table never shrinks. Past the descriptor limit (which
/// refuses the number) half as many are asked for, down to the 64 a table starts with.
fn reserve_descriptors(images: usize) {
    let wanted = images
        .saturating_mul(DESCRIPTORS_PER_IMAGE)
        .saturating_add(64);
    let mut highest = i32::try_from(wanted).unwrap_or(i32::MAX);
    // The duplicate is closed at once: only the table's size stays.
    while highest > 64 && rustix::io::fcntl_dupfd_cloexec(std::io::stderr(), highest).is_err() {
        highest /= 2;
    }
}

/// Runs `squashd serve`.
pub fn run(args: Args) -> anyhow::Result<()> {
    // Before anything can fail: a read error names its image and byte in the log (stderr, which
    // journald keeps), at the levels SQUASHD_LOG gives.
    crate::logging::init_logging();
    let config = load(&args)?;
    reserve_descriptors(config.images.len());
    let caches = Arc::new(Caches::new(&config.budgets));
    let registry = Arc::new(
        Registry::new(caches, config.access.clone(), config.blob_dir())
            .with_remote(config.remote.clone())
            .with_uring(config.uring),
    );
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])
        .context("cannot install signal handlers")?;
    crate::control::listen(&config.socket, config.allow_uids.clone(), registry.clone())?;
    let failed = attach_all(&registry, &config.images);
    let total = config.images.len() + config.bad_entries.len();
    log_line!(
        "squashd serve: {} of {total} images attached; control socket {}",
        total - failed - config.bad_entries.len(),
        config.socket.display()
    );
    if let Err(e) = crate::readiness::notify_systemd() {
        log_line!("squashd serve: cannot notify systemd: {e}");
    }
    for signal in signals.forever() {
        match signal {
            SIGHUP => reload(&registry, &args),
            _ => break,
        }
    }
    registry.detach_all();
    let _ = std::fs::remove_file(&config.socket);
    Ok(())
}
