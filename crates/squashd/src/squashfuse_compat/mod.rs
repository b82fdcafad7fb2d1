//! squashd as a drop-in for squashfuse: run as `squashfuse_ll` or `squashfuse` (a symlink to
//! squashd), it takes their command line, `[options] ARCHIVE MOUNTPOINT`, and mounts with
//! `squashd mount` (always on FUSE, as they do), so that what runs them (Apptainer's image
//! driver, AppImage launchers, scripts) works unchanged.
//!
//! Their exit statuses are kept, as squashfuse 0.6.2 gives them (checked in this order):
//!
//! | what went wrong | squashfuse_ll | squashfuse |
//! |---|---|---|
//! | the command line (`-h`, no ARCHIVE, an operand too many, a bad value) | 2 | 254 |
//! | the mount point does not exist | 2 | 1 (found after the archive) |
//! | the archive cannot be opened as an image | 255 | 255 |
//! | no mount point given | 2 | 2 (found after the archive) |
//! | an option unknown or refused | 1 | 3 |
//! | the mount itself | 1 | 4 |
//!
//! Both print their usage and `return -2` from main on a bad command line (`sqfs_usage`):
//! `squashfuse_ll` returns `-err`, 2; `squashfuse` returns it as it is, 254. The other statuses
//! of `squashfuse` are libfuse's `fuse_main`'s. `-V` is libfuse's: `squashfuse_ll` ignores it
//! (alone it is a usage error, with operands it mounts); `squashfuse` opens the archive,
//! checks the mount point if one is given, then prints the version and exits 0 without
//! mounting (alone it is a usage error, 254). (squashfuse_ll 0.1.x exited 254 where later
//! ones exit 2.)

mod args;
mod translate;

use crate::cli::{exit_code, report_error, UsageError};
use crate::notify_pipe::{self, Outcome};
use crate::options::Options;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use translate::{Meaning, SQUASHFUSE_OPTIONS};

/// Which program squashd stands in for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// `squashfuse_ll`: libfuse's low-level interface.
    LowLevel,
    /// `squashfuse`: libfuse's high-level interface (`fuse_main`), whose options it also takes.
    HighLevel,
}

/// The exit statuses of one flavor (see the module's table).
struct ExitCodes {
    usage: u8,
    no_mountpoint: u8,
    bad_mountpoint: u8,
    image: u8,
    option: u8,
    mount: u8,
}

impl Flavor {
    fn exit_codes(self) -> ExitCodes {
        match self {
            Flavor::LowLevel => ExitCodes {
                usage: 2,
                no_mountpoint: 2,
                bad_mountpoint: 2,
                image: 255,
                option: 1,
                mount: 1,
            },
            Flavor::HighLevel => ExitCodes {
                // sqfs_usage's -2, returned from main as it is.
                usage: 254,
                no_mountpoint: 2,
                bad_mountpoint: 1,
                image: 255,
                option: 3,
                mount: 4,
            },
        }
    }
}

/// When squashd was run as `squashfuse_ll` or `squashfuse`, does what they would and returns
/// the exit status; `None` when run under another name.
pub(crate) fn main() -> Option<ExitCode> {
    let mut argv = std::env::args_os();
    let program = PathBuf::from(argv.next()?);
    let name = program.file_name()?.to_str()?.to_string();
    let flavor = match name.as_str() {
        "squashfuse_ll" => Flavor::LowLevel,
        "squashfuse" => Flavor::HighLevel,
        _ => return None,
    };
    Some(run(&name, flavor, argv))
}

/// A failure to report: its message, the exit status, and whether it is a usage error (which
/// also shows the usage line).
struct Failure {
    why: String,
    code: u8,
    usage: bool,
}

fn run(name: &str, flavor: Flavor, args: impl Iterator<Item = OsString>) -> ExitCode {
    let codes = flavor.exit_codes();
    let usage = |why: String| Failure {
        why,
        code: codes.usage,
        usage: true,
    };
    let line = match args::parse(args) {
        Ok(line) => line,
        Err(why) => return report(name, usage(why), None),
    };
    if line.help {
        eprint!("{}", help(name, flavor));
        return ExitCode::from(codes.usage);
    }
    let translated = match translate::translate(&line.options, flavor) {
        Ok(translated) => translated,
        Err(why) => return report(name, usage(why), None),
    };
    let notify = translated.notify_pipe.clone();
    let prepared = prepare(&line, &translated, flavor, &codes);
    let (image, mountpoint, given, options) = match prepared {
        Ok(Prepared::Mount {
            image,
            mountpoint,
            given,
            options,
        }) => (image, mountpoint, given, *options),
        Ok(Prepared::Version) => {
            println!(
                "squashd {} (as {name}, taking squashfuse's command line)",
                env!("CARGO_PKG_VERSION")
            );
            return ExitCode::SUCCESS;
        }
        Err(failure) => return report(name, failure, notify.as_deref()),
    };
    if translated.debug || line.debug {
        // Read by the log's set-up; set while this process has one thread.
        if std::env::var_os("SQUASHD_LOG").is_none() {
            std::env::set_var("SQUASHD_LOG", "debug");
        }
    }
    let args = crate::mount::Args {
        image,
        mountpoint,
        options: given,
        foreground: line.foreground || line.debug || translated.debug,
        ready_fd: None,
    };
    // From here on `squashd mount` tells the notify pipe itself. The options parsed here go as
    // they are: parsing `given` again would split a value holding a comma.
    match crate::mount::run_parsed(args, options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            report_error(&e);
            if e.chain().any(|c| c.is::<UsageError>()) {
                exit_code(&e)
            } else {
                ExitCode::from(codes.mount)
            }
        }
    }
}

/// What the command line asks for, once squashfuse's checks passed.
enum Prepared {
    /// Mount `image` on `mountpoint` with `options` (parsed from `given`, shown by `status`).
    Mount {
        image: PathBuf,
        mountpoint: PathBuf,
        given: Vec<String>,
        options: Box<Options>,
    },
    /// `-V` as `squashfuse`: print the version, mount nothing.
    Version,
}

/// The checks squashfuse makes before it mounts, in its order; what to do then.
fn prepare(
    line: &args::CommandLine,
    translated: &translate::Translated,
    flavor: Flavor,
    codes: &ExitCodes,
) -> Result<Prepared, Failure> {
    let fail = |code: u8, why: String| Failure {
        why,
        code,
        usage: code == codes.usage,
    };
    let (image, mountpoint) = match line.operands.as_slice() {
        [image, mountpoint] => (PathBuf::from(image), Some(PathBuf::from(mountpoint))),
        [image] if flavor == Flavor::HighLevel => (PathBuf::from(image), None),
        [_] => return Err(fail(codes.usage, "no MOUNTPOINT given".into())),
        [] => return Err(fail(codes.usage, "no ARCHIVE given".into())),
        [_, _, extra, ..] => {
            return Err(fail(
                codes.usage,
                format!("one operand too many: {extra:?}"),
            ))
        }
    };
    let mut given = Vec::with_capacity(translated.squashd.len() + 2);
    // squashfuse is FUSE; the kernel path only when asked for by name.
    if !translated.squashd.iter().any(|o| o == "kernel") {
        given.push("fuse".to_string());
    }
    given.extend(translated.squashd.iter().cloned());
    if line.single_thread {
        given.push("threads=1".into());
    }
    // squashd's own options that squashfuse does not have, with values squashd cannot read.
    // One option per element, as the command line's parser unescaped it.
    let options = Options::parse_each(
        given.iter().map(String::as_str),
        &image,
        crate::options::Context::LoneMount,
    )
    .map_err(|e| fail(codes.usage, e.to_string()))?;
    let check_mountpoint = |mountpoint: &Path| {
        mountpoint.canonicalize().map(drop).map_err(|e| {
            let why = format!("bad mount point `{}': {e}", mountpoint.display());
            fail(codes.bad_mountpoint, why)
        })
    };
    if let (Flavor::LowLevel, Some(mountpoint)) = (flavor, &mountpoint) {
        check_mountpoint(mountpoint)?;
    }
    check_image(&image, &options).map_err(|e| fail(codes.image, format!("{e:#}")))?;
    if flavor == Flavor::HighLevel {
        // fuse_main: the mount point (if any) is checked, then -V answered, then a missing
        // mount point reported.
        if let Some(mountpoint) = &mountpoint {
            check_mountpoint(mountpoint)?;
        }
        if line.version {
            return Ok(Prepared::Version);
        }
    }
    let Some(mountpoint) = mountpoint else {
        return Err(fail(codes.no_mountpoint, "no mountpoint specified".into()));
    };
    let mut rejected = line
        .unknown
        .iter()
        .map(|flag| format!("unknown option `{flag}'"))
        .chain(translated.rejected.iter().cloned());
    if let Some(first) = rejected.next() {
        let why = rejected.fold(first, |all, next| all + "; " + &next);
        return Err(fail(codes.option, why));
    }
    Ok(Prepared::Mount {
        image,
        mountpoint,
        given,
        options: Box::new(options),
    })
}

/// Whether `image` opens as squashfuse would open it: an image at the offset given (or found),
/// with the `subdir=` asked for.
fn check_image(image: &Path, options: &Options) -> anyhow::Result<()> {
    let offset = options.gave("offset").then_some(options.open.offset);
    let source = crate::remote::open(image, offset, options.partition, &options.remote)?;
    let opened = squashd_core::Image::from_source(
        source.source,
        source.name,
        &squashd_core::OpenOptions::default().with_offset(source.offset),
    )?;
    if let Some(dir) = &options.subdir {
        use std::os::unix::ffi::OsStrExt;
        let inode = opened.resolve_path(dir.as_os_str().as_bytes())?;
        anyhow::ensure!(
            inode.is_dir(),
            "{}: subdir {} is not a directory",
            image.display(),
            dir.display()
        );
    }
    Ok(())
}

/// Prints the failure in one line, tells the notify pipe, and gives the exit status.
fn report(name: &str, failure: Failure, notify: Option<&Path>) -> ExitCode {
    if failure.usage {
        eprintln!(
            "squashd: {}; usage: {name} [options] ARCHIVE MOUNTPOINT ({name} -h lists the options)",
            failure.why
        );
    } else {
        eprintln!("squashd: {}", failure.why);
    }
    if let Some(pipe) = notify {
        notify_pipe::tell(pipe, Outcome::Failed);
    }
    ExitCode::from(failure.code)
}

/// `-h`: the options taken, made from [`SQUASHFUSE_OPTIONS`].
fn help(name: &str, flavor: Flavor) -> String {
    let mut text = format!(
        "squashd {} as {name}: mount a SquashFS archive with FUSE, read-only\n\n\
         Usage: {name} [options] ARCHIVE MOUNTPOINT\n\n\
         Options:\n\
        \x20   -h   --help            print help\n\
        \x20   -V   --version         {}\n\
        \x20   -d   -o debug          enable debug output (implies -f)\n\
        \x20   -f                     foreground operation\n\
        \x20   -s                     disable multi-threaded operation\n",
        env!("CARGO_PKG_VERSION"),
        match flavor {
            Flavor::LowLevel => "ignored, as squashfuse_ll ignores it",
            Flavor::HighLevel => "print version once ARCHIVE opens, and mount nothing",
        }
    );
    let offered =
        |spec: &&translate::SquashfuseOption| flavor == Flavor::HighLevel || !spec.high_level_only;
    for spec in SQUASHFUSE_OPTIONS.iter().filter(offered) {
        if spec.help.is_empty() {
            continue;
        }
        let head = match spec.value {
            Some(value) => format!("{}={value}", spec.name),
            None => spec.name.to_string(),
        };
        let _ = writeln!(text, "    -o {head:<19} {}", spec.help);
    }
    for (title, refused) in [("Accepted and ignored", false), ("Refused", true)] {
        let _ = writeln!(text, "\n{title}:");
        for spec in SQUASHFUSE_OPTIONS.iter().filter(offered) {
            let why = match (spec.meaning, refused) {
                (Meaning::Ignored(why), false) | (Meaning::Refused(why), true) => why,
                _ => continue,
            };
            let _ = writeln!(text, "    -o {:<19} {why}", spec.name);
        }
    }
    let _ = write!(
        text,
        "\nsquashd's own mount options (squashd mount --help) are taken too.\n\
         Exit status: 0 mounted (or unmounted, in the foreground); {} usage error; 255 ARCHIVE \
         is not an image; {} an option unknown or refused; {} the mount failed.\n",
        flavor.exit_codes().usage,
        flavor.exit_codes().option,
        flavor.exit_codes().mount
    );
    text
}
