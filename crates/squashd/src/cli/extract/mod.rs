//! `squashd extract`: an image, or some of its paths, into a directory, using every core.
//!
//! Two steps: [`plan`] walks the selected tree (in parallel) into lists of jobs whose paths are
//! the destination joined with checked names; then they are created in an order that keeps
//! extraction safe ([`write`] says why). One thread makes the directories ([`dirs`]), then the
//! special files and symlinks, while the others write the regular files ([`files`]: in the
//! order of their data in the image, which is prefetched ahead of them), each once its directory
//! exists. Hard links follow, then the directories' own attributes, deepest first, once
//! nothing more will be made inside them.
//!
//! `SQUASHD_TIMING=1` in the environment prints the time at the end of each step on stderr.

mod dirs;
mod files;
mod plan;
mod write;

use super::display::path_bytes;
use super::tree::init_thread_pool;
use indicatif::{ProgressBar, ProgressStyle};
use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// Arguments of `squashd extract`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Keeps modes, mtimes, symlinks, hard links and extended attributes; as root also owners and \
device nodes. What the destination refuses (device nodes as non-root, xattrs it does not \
take, e.g. trusted.* or security.* as non-root) is skipped with a warning, the rest is \
extracted, and the exit status is 1. Given PATHs, extracts those \
(under the same relative paths in DIR, with the directories leading to them). Nothing is \
ever written outside DIR, whatever the image holds. A progress bar is shown when stderr is \
a terminal.")]
pub struct Args {
    #[command(flatten)]
    image: super::ImageArgs,
    /// Paths in the image to extract (files or whole directories); everything when omitted.
    paths: Vec<OsString>,
    /// Directory to extract into; it must not exist unless -f is given.
    #[arg(
        short = 'd',
        long = "dest",
        default_value = "squashfs-root",
        value_name = "DIR"
    )]
    dest: PathBuf,
    /// Extract into an existing directory, replacing files that are in the way.
    #[arg(short = 'f', long)]
    force: bool,
    /// Do not show a progress bar even on a terminal.
    #[arg(short = 'q', long)]
    quiet: bool,
}

/// Runs `squashd extract`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let paths: Vec<&[u8]> = args.paths.iter().map(|p| path_bytes(p)).collect();
    // Paths are checked before the image is opened: a `..` is a usage error whatever the
    // image holds.
    let selection = plan::Selection::new(&paths)?;
    let image = args.image.open()?;
    init_thread_pool();
    for path in &paths {
        // Missing paths are an error here (unsquashfs ignores them silently).
        image.resolve_path(path)?;
    }
    let t0 = std::time::Instant::now();
    let timing = std::env::var_os("SQUASHD_TIMING").is_some();
    let phase = |what: &str| {
        if timing {
            eprintln!("{what}: {:?}", t0.elapsed());
        }
    };
    let mut plan = plan::plan(&image, &selection, &args.dest)?;
    let spans = files::order_by_data(&image, &mut plan.files);
    let progress = (!args.quiet && std::io::stderr().is_terminal()).then(|| {
        let bar = ProgressBar::new(plan.total_bytes);
        if let Ok(style) = ProgressStyle::with_template(
            "{wide_bar} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
        ) {
            bar.set_style(style);
        }
        crate::cli::progress::add(bar)
    });
    write::clear_umask();
    let mut writer = write::Writer {
        image: &image,
        force: args.force,
        as_root: write::is_root(),
        progress,
        xattr_failures: AtomicU64::new(0),
        devices_skipped: AtomicU64::new(0),
        own_ids: None,
    };
    phase("plan");
    if let Some(dest) = plan.dirs.first() {
        writer.make_dir(dest, true)?;
        writer.own_ids = write::plain_ownership(&dest.path);
    }
    let made = dirs::DirsMade::new(plan.dirs.len());
    std::thread::scope(|scope| {
        // Directories, then the other entries that need nothing but them, beside the files.
        let others = std::thread::Builder::new()
            .name("mkdir".into())
            .spawn_scoped(scope, || {
                dirs::make_all(&writer, &plan.dirs, &made)?;
                phase("dirs");
                if made.stopped() {
                    return Ok(());
                }
                for job in &plan.specials {
                    writer.make_special(job)?;
                }
                for job in &plan.symlinks {
                    writer.make_symlink(job)?;
                }
                phase("specials and symlinks");
                anyhow::Ok(())
            })?;
        let files = files::write_files(&writer, &plan.files, &spans, &made);
        if files.is_err() {
            made.stop();
        }
        let others = others
            .join()
            .map_err(|_| anyhow::anyhow!("the directory thread panicked"))?;
        // Its error first: a writer's may only say that it stopped.
        others.and(files)
    })?;
    phase("files");
    // Last, other names: a hard link may name any file, symlink or special.
    for (new, existing) in &plan.hard_links {
        writer.make_hard_link(new, existing)?;
    }
    phase("links");
    dirs::finish_all(&writer, &plan.dirs)?;
    phase("finish");
    if let Some(bar) = &writer.progress {
        bar.finish_and_clear();
    }
    let name = image.name();
    let refused = writer.xattr_failures.load(Ordering::Relaxed);
    if refused > 0 {
        eprintln!("squashd: {name}: warning: {refused} extended attributes could not be set (not permitted or not supported by the destination)");
    }
    let skipped = writer.devices_skipped.load(Ordering::Relaxed);
    if skipped > 0 {
        eprintln!(
            "squashd: {name}: warning: {skipped} device nodes skipped (only root may create them)"
        );
    }
    // Everything else is extracted, but the tree is not the image's: exit 1, as a script that
    // relies on the copy must learn (unsquashfs -d exits 2, its "non-fatal errors", here).
    if refused > 0 || skipped > 0 {
        return Err(super::AlreadyReported.into());
    }
    Ok(())
}
