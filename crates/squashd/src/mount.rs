//! `squashd mount`: mount an image with FUSE, in the background by default.
//!
//! The pieces it shares with `squashd serve` have modules of their own: the `-o` options
//! ([`crate::options`]), readiness ([`crate::readiness`]), the log ([`crate::logging`]); going to
//! the background is [`crate::daemonize`]. Here: the command, its signals, and the two things
//! only a lone mount has: the mount(8) helper convention ([`helper`]) and its control socket
//! ([`control`]).

mod control;
mod helper;
mod host;

pub use helper::helper_main;

use crate::control::report::{Probe, ServedImage};
use crate::daemonize::WaitingParent;
use crate::funnel::{mount_image, Placement};
use crate::notify_pipe::Outcome;
use crate::options::{Context as OptionsContext, Options};
use crate::readiness::ReadyFd;
use anyhow::{bail, Context};
use squashd_core::Image;
use std::path::{Path, PathBuf};

/// Arguments of `squashd mount`.
#[derive(clap::Args, Debug)]
#[command(after_help = after_help())]
pub struct Args {
    /// The SquashFS image file, or an AppImage or Apptainer SIF file holding one.
    pub image: PathBuf,
    /// The directory to mount it on.
    pub mountpoint: PathBuf,
    /// Mount options, comma-separated (may be repeated); listed below.
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
    /// Stay in the foreground (default: detach once the mount answers).
    #[arg(short = 'f', long)]
    pub foreground: bool,
    /// Once the mount answers, write a byte to this file descriptor (open for writing, not 0, 1
    /// or 2) and close it.
    #[arg(long, value_name = "FD")]
    pub ready_fd: Option<i32>,
}

/// The text after the arguments in `squashd mount --help`: every option from the table.
fn after_help() -> String {
    format!(
        "{}\nAs a mount helper: ln -s \"$(command -v squashd)\" /sbin/mount.fuse.squashd, then \
         `mount -t fuse.squashd IMAGE DIR -o OPTIONS` or an /etc/fstab line \
         `/srv/usr.sqfs /mnt/usr fuse.squashd ro,allow_other,nofail 0 0`.\n\n\
         Environment: SQUASHD_LOG sets what is logged to stderr (`debug`, or per target as \
         in `warn,squashd_fuse=debug`; default `warn`). With NOTIFY_SOCKET set (systemd \
         Type=notify), READY=1 is sent once the mount answers.",
        crate::options::help()
    )
}

/// Runs `squashd mount`.
pub fn run(args: Args) -> anyhow::Result<()> {
    // First, before this process opens anything: the number can then only name a descriptor
    // the caller passed.
    let ready_fd = args.ready_fd.map(ReadyFd::take).transpose()?;
    let options = Options::parse(&args.options, &args.image, OptionsContext::LoneMount)?;
    mount_and_tell(args, options, ready_fd)
}

/// [`run`] with the options parsed by the caller (the squashfuse drop-in, whose option values
/// may hold a comma); `args.options` is then only what `status` shows.
pub(crate) fn run_parsed(args: Args, options: Options) -> anyhow::Result<()> {
    let ready_fd = args.ready_fd.map(ReadyFd::take).transpose()?;
    mount_and_tell(args, options, ready_fd)
}

/// Mounts, and tells the notify pipe of a failure.
fn mount_and_tell(args: Args, options: Options, ready_fd: Option<ReadyFd>) -> anyhow::Result<()> {
    let notify_pipe = options.notify_pipe.clone();
    let result = mount(args, options, ready_fd);
    if let (Err(_), Some(pipe)) = (&result, notify_pipe) {
        crate::notify_pipe::tell(&pipe, Outcome::Failed);
    }
    result
}

/// The image's path as the mount names and opens it: canonical (the mount outlives the
/// working directory), except for a descriptor the caller passed (`/proc/self/fd/N`, as
/// Apptainer passes an image it opened), which names the very file the caller opened even
/// when its path is gone or out of this user's reach.
fn image_path(image: &Path) -> anyhow::Result<PathBuf> {
    // A remote image keeps its address.
    if image.starts_with("/proc/self/fd")
        || image.starts_with("/dev/fd")
        || crate::remote::is_remote(image)
    {
        return Ok(image.to_path_buf());
    }
    image
        .canonicalize()
        .with_context(|| format!("{}: cannot open", image.display()))
}

/// [`run`] once the options are known: the image opened, mounted through the funnel, served
/// until it is unmounted.
fn mount(args: Args, mut options: Options, ready_fd: Option<ReadyFd>) -> anyhow::Result<()> {
    let image_path = image_path(&args.image)?;
    if !args.mountpoint.is_dir() {
        bail!(
            "{}: mount point is not a directory",
            args.mountpoint.display()
        );
    }
    // The mount outlives the working directory.
    let mountpoint = args
        .mountpoint
        .canonicalize()
        .with_context(|| format!("{}: mount point not found", args.mountpoint.display()))?;
    crate::logging::init_logging();
    let given_offset = options.gave("offset").then_some(options.open.offset);
    let opened = crate::remote::open(
        &image_path,
        given_offset,
        options.partition,
        &options.remote,
    )?;
    let caches = crate::verity::image_caches(&mut options.open);
    let (opened, verified) =
        crate::verity::verify_opened(opened, &image_path, &options.verity, &caches)?;
    options.open.offset = opened.offset;
    let image_path = PathBuf::from(&*opened.name);
    if !options.gave("fsname") {
        options.fsname = opened.name.to_string();
    }
    let remote = opened.remote;
    let image = Image::from_source(opened.source, opened.name, &options.open)?;
    // Keeps a kernel-path mount's blob file system until the mount has ended.
    let mut host = host::LoneHost::new(args.foreground);
    let place = Placement {
        target: &mountpoint,
        mountpoint: &mountpoint,
    };
    // Caught from before the mount is made, so that a SIGTERM sent as soon as the mount answers
    // (before the watcher's thread starts) unmounts rather than kills: the watcher acts on it
    // once it runs. No thread yet: the mount may still go to the background (fork).
    let signals = unmount_signals()?;
    let (mounted, probe) = mount_image(image.clone(), &options, place, &mut host)?;
    let lone = LoneMount {
        image_path,
        image,
        remote,
        verified,
        options,
        given: args.options.clone(),
        ready_fd,
    };
    let mut serving = lone.start_serving(probe, &mountpoint)?;
    let unmount = mounted.unmount_handle();
    watch_signals(signals, move |lazy| unmount.unmount(lazy))?;
    announce_ready(
        serving.ready_fd.take(),
        host.take_parent(),
        serving.notify_pipe.clone(),
    );
    mounted.wait().context("serving the mount")?;
    drop(serving);
    drop(host);
    Ok(())
}

/// What a lone mount serves, whichever path serves it.
pub(crate) struct LoneMount {
    /// The image's path, or its address without secrets.
    pub(crate) image_path: PathBuf,
    pub(crate) image: Image,
    /// Its source, when remote.
    pub(crate) remote: Option<squashd_remote::RemoteSource>,
    /// How it is checked against its dm-verity tree, when it is.
    pub(crate) verified: Option<crate::verity::Verified>,
    pub(crate) options: Options,
    /// The options as given, for `status`.
    pub(crate) given: Vec<String>,
    pub(crate) ready_fd: Option<ReadyFd>,
}

/// What a lone mount holds while it serves, once mounted on either path.
pub(crate) struct Serving {
    _trace: Option<crate::remote::TraceOnDrop>,
    _control: Option<control::SocketFile>,
    /// Told once the mount answers.
    pub(crate) ready_fd: Option<ReadyFd>,
    /// Told once the mount answers, or that it failed (`notify_pipe=`).
    pub(crate) notify_pipe: Option<PathBuf>,
}

impl LoneMount {
    /// Starts what the options ask for once the image is mounted on `mountpoint`: a remote
    /// image's prefetch list and trace, and the control socket reporting `probe`'s figures.
    pub(crate) fn start_serving(self, probe: Probe, mountpoint: &Path) -> anyhow::Result<Serving> {
        let LoneMount {
            image_path,
            image,
            remote,
            verified,
            options,
            given,
            ready_fd,
        } = self;
        let trace =
            crate::remote::TraceOnDrop::new(remote.as_ref(), options.remote.trace.as_deref());
        if let (Some(remote), Some(list)) = (&remote, &options.remote.prefetch) {
            crate::remote::start_prefetch(&image, remote, list);
        }
        let served = ServedImage {
            image_path,
            options: given,
            image,
            remote,
            verified,
            file_id: None,
            probe,
            since: std::time::Instant::now(),
            private_cache: true,
        };
        let control = options
            .control
            .as_ref()
            .map(|socket| control::LoneMountControl::listen(socket, served, mountpoint))
            .transpose()?;
        Ok(Serving {
            _trace: trace,
            _control: control,
            ready_fd,
            notify_pipe: options.notify_pipe,
        })
    }
}

/// Tells whoever waits that the mount answers: systemd (NOTIFY_SOCKET), a script
/// (--ready-fd, notify_pipe=), the parent of a background mount (which then exits 0).
pub(crate) fn announce_ready(
    ready_fd: Option<ReadyFd>,
    parent: Option<WaitingParent>,
    notify_pipe: Option<PathBuf>,
) {
    if let Err(e) = crate::readiness::notify_systemd() {
        tracing::warn!("cannot notify systemd: {e}");
    }
    if let Some(fd) = ready_fd {
        fd.announce();
    }
    if let Some(pipe) = notify_pipe {
        crate::notify_pipe::tell_in_background(pipe, Outcome::Ready);
    }
    if let Some(parent) = parent {
        parent.ready();
    }
}

/// Catches SIGTERM, SIGINT and SIGHUP from now on, for [`watch_signals`] (no thread started).
pub(crate) fn unmount_signals() -> anyhow::Result<signal_hook::iterator::Signals> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    Ok(signal_hook::iterator::Signals::new([
        SIGTERM, SIGINT, SIGHUP,
    ])?)
}

/// SIGTERM, SIGINT and SIGHUP (caught since [`unmount_signals`]) unmount (lazily when busy)
/// with `unmount(lazy)`; the mount's server then ends and the process exits. A second signal,
/// or nothing left to unmount, exits at once.
pub(crate) fn watch_signals(
    mut signals: signal_hook::iterator::Signals,
    unmount: impl Fn(bool) -> std::io::Result<()> + Send + 'static,
) -> anyhow::Result<()> {
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for (count, _) in signals.forever().enumerate() {
                // A busy mount is detached (as `umount -l`): the user asked us to go. When
                // there is nothing left to unmount (already detached, but still held open by
                // some process) or on a second signal, exit: closing /dev/fuse ends the
                // connection, and the holders get ENOTCONN.
                let unmounted = unmount(false).is_ok() || unmount(true).is_ok();
                if !unmounted || count > 0 {
                    std::process::exit(0);
                }
            }
        })?;
    Ok(())
}
