//! squashd: serve SquashFS images fast. This binary is thin glue: argument parsing and
//! printing; the work is done by squashd-core (reading images) and squashd-fuse (mounting).

/// `eprintln!` for the daemons (`serve`, a lone mount): a log line that cannot be written (stderr
/// a closed pipe, a journal gone) is dropped instead of panicking, which would take every
/// mount of the process down with it. The message is kept to one line (newlines and escape
/// sequences in it escaped: [`quote::one_line`]), so that a name put into it cannot forge a
/// line of its own, and written whole in one call, so that threads' lines do not interleave.
macro_rules! log_line {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let message = format!($($arg)*);
        let line = format!("{}\n", crate::quote::one_line(&message));
        let _ = std::io::stderr().write_all(line.as_bytes());
    }};
}

mod assets;
mod cli;
mod control;
mod daemonize;
mod dead_mounts;
mod engine;
mod funnel;
mod logging;
mod mount;
mod notify_pipe;
mod options;
mod quote;
mod readiness;
mod real_path;
mod remote;
mod serve;
mod size;
mod squashfuse_compat;
mod verity;
mod verity_signature;

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

/// Serve SquashFS images to many parallel readers: inspect and extract them offline, mount them
/// with FUSE, or serve many from one daemon.
#[derive(Parser)]
#[command(name = "squashd", version, propagate_version = true)]
#[command(
    after_help = "Exit status: 0 on success; 1 when an operation failed (bad image, missing path, I/O error, an extraction that left out what the destination refused); 2 on a usage error (unknown subcommand or flag, missing operand, unknown mount option or bad value, `..` in a path to extract, a --ready-fd that is not the caller's)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the superblock: compressor and its options, counts, sizes and flags.
    Info(cli::info::Args),
    /// Check a whole image against its dm-verity hash tree, on all cores; exit 1 at a bad block.
    Verify(cli::verify::Args),
    /// List a directory of an image (like `unsquashfs -ls` / `-lls`).
    Ls(cli::ls::Args),
    /// Show the inode of one path (type, mode, owner, size, times, links, xattrs).
    Stat(cli::stat::Args),
    /// Write the contents of files in an image to standard output.
    Cat(cli::cat::Args),
    /// List the extended attributes of a path, with their values.
    Xattr(cli::xattr::Args),
    /// Extract an image (or some of its paths) into a directory, in parallel.
    Extract(cli::extract::Args),
    /// Mount an image with FUSE (read-only; in the background unless -f).
    Mount(mount::Args),
    /// Serve many images from one daemon, attached and detached at run time.
    Serve(serve::Args),
    /// Attach an image to a running `squashd serve` (mount it there).
    Attach(serve::AttachArgs),
    /// Detach an image from a running `squashd serve`.
    Detach(serve::DetachArgs),
    /// Show what each image of a running `squashd serve` (or a `squashd mount -o control=SOCKET`) costs and how it is doing.
    Status(serve::StatusArgs),
    /// Walk an image from many threads in-process and report time and cache counters.
    #[command(hide = true)]
    Walk(cli::walk::Args),
    /// Write the man pages and shell completions into a directory (for packaging).
    #[command(hide = true)]
    GenerateAssets(assets::Args),
}

/// Keeps large allocations out of the heap. Large zeroed buffers of which a request touches a
/// few pages (fuser's 16 MiB request buffers once; the blob file system's read buffers now)
/// must stay in fresh, untouched mappings: once glibc has freed one large block its dynamic
/// mmap threshold rises, later buffers come from the heap and calloc touches all of them (69
/// served images cost 1.4 GB of RSS instead of 11 MB that way). A fixed threshold keeps them
/// out of the heap.
fn fix_mmap_threshold() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes allocator tuning; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
    }
}

/// A usage error clap found, on one line as every other error: what is wrong, then the usage.
fn one_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let (what, rest) = text.split_once("\nUsage:").unwrap_or((&text, ""));
    let what = what.trim_start().trim_start_matches("error:");
    let mut line = what.split_whitespace().collect::<Vec<_>>().join(" ");
    if let Some(usage) = rest.lines().next().map(str::trim).filter(|u| !u.is_empty()) {
        line.push_str("; usage: ");
        line.push_str(usage);
    }
    line
}

fn main() -> ExitCode {
    fix_mmap_threshold();
    if let Some(code) = squashfuse_compat::main() {
        return code;
    }
    if let Some(code) = mount::helper_main() {
        return code;
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        // `squashd` alone: the whole help, on stderr.
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("squashd: {}", one_line(&e));
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Info(a) => cli::info::run(a),
        Command::Verify(a) => cli::verify::run(a),
        Command::Ls(a) => cli::ls::run(a),
        Command::Stat(a) => cli::stat::run(a),
        Command::Cat(a) => cli::cat::run(a),
        Command::Xattr(a) => cli::xattr::run(a),
        Command::Extract(a) => cli::extract::run(a),
        Command::Walk(a) => cli::walk::run(a),
        Command::Mount(a) => mount::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Attach(a) => serve::attach(a),
        Command::Detach(a) => serve::detach(a),
        Command::Status(a) => serve::status(a),
        Command::GenerateAssets(a) => assets::run(a, Cli::command()),
    };
    cli::progress::finish();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            cli::report_error(&e);
            cli::exit_code(&e)
        }
    }
}
