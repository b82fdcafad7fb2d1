//! The mount options (`squashd mount -o`, `squashd attach -o`, a daemon config's `options`):
//! one table, [`OPTIONS`], from which both the parser and the `--help` text are made, so that
//! neither can list an option the other does not know (the shape of ripgrep's `flags/defs.rs`,
//! reduced to what a list of `key=value` pairs needs).
//!
//! They are parsed once, into [`Options`]: typed fields (the generic mount flags as a
//! [`MountFlags`] set), with the defaults that depend on who mounts ([`Context`]) applied by the
//! parser from the table. Each mount path is then given what it needs from them (`paths.rs`);
//! the mount funnel (crate::funnel) takes them to a mounted image. To add an option, see
//! `table.rs`.

mod flags;
mod paths;
mod table;
#[cfg(test)]
mod tests;
mod verity;

pub(crate) use flags::MountFlags;
pub(crate) use table::{DefaultValue, OptionSpec, Value, OLD_NAMES, OPTIONS};
pub(crate) use verity::VERITY_OPTIONS;

/// Every mount option: [`OPTIONS`], then the verity group ([`VERITY_OPTIONS`]).
pub(crate) fn all_options() -> impl Iterator<Item = &'static OptionSpec> {
    OPTIONS.iter().chain(VERITY_OPTIONS)
}

use crate::cli::UsageError;
use crate::size::parse_size;
use squashd_core::verity::VerityOptions;
use squashd_core::OpenOptions;
use squashd_fuse::MountOwner;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;
use table::Arg;

/// Who mounts: some defaults differ (see [`DefaultValue::ByContext`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Context {
    /// `squashd mount` (and the squashfuse drop-in, and the mount(8) helper): one image,
    /// which may use the whole machine.
    LoneMount,
    /// An image of `squashd serve` (its config, a reload, `squashd attach`): one of dozens
    /// sharing the cores.
    Daemon,
}

/// Options mount(8) and fstab pass that mean nothing to an immutable FUSE file system: accepted
/// and ignored. Also every `x-*`, `comment=*` and `subtype=*` ([`IGNORED_PREFIXES`]).
pub(crate) const IGNORED: &[&str] = &[
    "rw",
    "ro",
    "defaults",
    "nofail",
    "_netdev",
    "user",
    "users",
    "nouser",
    "owner",
    "group",
    "auto",
    "noauto",
    "async",
    "sync",
    "dirsync",
    "relatime",
    "norelatime",
    "strictatime",
    "lazytime",
    "nolazytime",
    "diratime",
    "nodiratime",
    "default_permissions",
    "loop",
];

/// Prefixes of options ignored as [`IGNORED`] is.
pub(crate) const IGNORED_PREFIXES: &[&str] = &["x-", "comment=", "subtype="];

/// Which path serves a mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Engine {
    /// Chosen by squashd (see [`crate::engine`]).
    #[default]
    Auto,
    /// The kernel's EROFS on a translated metadata image (`kernel`).
    Kernel,
    /// FUSE (`fuse`).
    Fuse,
}

/// What the -o options say, typed.
#[derive(Debug)]
pub(crate) struct Options {
    /// `kernel`, `fuse`, or neither.
    pub(crate) engine: Engine,
    /// How the image is opened: offset, cache budgets.
    pub(crate) open: OpenOptions,
    /// How the image is checked against its dm-verity tree as it is opened (`verity=`,
    /// `roothash=`...: [`VERITY_OPTIONS`]).
    pub(crate) verity: VerityOptions,
    /// Serve this directory of the image as the root (`subdir=`), relative to the image's root.
    pub(crate) subdir: Option<PathBuf>,
    /// Show every file as owned by this user id (`uid=`).
    pub(crate) uid: Option<u32>,
    /// Show every file as owned by this group id (`gid=`).
    pub(crate) gid: Option<u32>,
    /// Let every user in (`allow_other`).
    pub(crate) allow_other: bool,
    /// Let root in too, besides the mount's owner (`allow_root`).
    pub(crate) allow_root: bool,
    /// The user a daemon mounts for (set by its access checks, never by an option): the mount
    /// is theirs as fusermount3 would make it. None: the process's own mount.
    pub(crate) owner: Option<MountOwner>,
    /// The generic mount flags (`nosuid`, `nodev`, `noexec`...).
    pub(crate) flags: MountFlags,
    /// FUSE over io_uring (`uring=`), for a FUSE mount and the kernel path's blob file system.
    pub(crate) uring: squashd_fuse::server::UringMode,
    /// Which entries a FUSE mount's listings give with their attributes (`listing_attrs=`).
    pub(crate) listing_attrs: squashd_fuse::ListingAttrs,
    /// Threads serving FUSE requests (`threads=`).
    pub(crate) threads: usize,
    /// Threads decompressing ahead of sequential readers (`readahead_threads=`; 0: none).
    pub(crate) read_ahead_threads: usize,
    /// How far ahead of a sequential reader to decompress, in bytes (`readahead=`).
    pub(crate) read_ahead_bytes: u64,
    /// The source /proc/mounts shows (`fsname=`; the image's path by default).
    pub(crate) fsname: String,
    /// Unmount after this long without a request (`timeout=`).
    pub(crate) idle_timeout: Option<Duration>,
    /// Where a lone mount answers `squashd status` (`control=`); the daemon has its own.
    pub(crate) control: Option<PathBuf>,
    /// How a remote image is fetched and cached.
    pub(crate) remote: crate::remote::RemoteSettings,
    /// The named pipe told whether a lone mount came up (`notify_pipe=`).
    pub(crate) notify_pipe: Option<PathBuf>,
    /// The SIF partition to serve (`partition=`), by descriptor id.
    pub(crate) partition: Option<u32>,
    /// Names of the options given (not those applied as defaults).
    given: BTreeSet<&'static str>,
}

impl Options {
    /// Parses comma-separated option lists (each element may hold several) for a mount of
    /// `image` by `context`. Errors are [`UsageError`]s naming the option.
    pub(crate) fn parse(
        list: &[String],
        image: &Path,
        context: Context,
    ) -> Result<Options, UsageError> {
        Options::parse_each(list.iter().flat_map(|o| o.split(',')), image, context)
    }

    /// Parses options already split, one option per element, for a mount of `image`: a comma
    /// in an element is part of its value (the squashfuse drop-in's `-o subdir=a\,b`, which
    /// its own parser unescaped, must not become two options here).
    pub(crate) fn parse_each<'a>(
        elements: impl IntoIterator<Item = &'a str>,
        image: &Path,
        context: Context,
    ) -> Result<Options, UsageError> {
        // Every value that has a default is set from the table below; these are placeholders.
        let mut options = Options {
            engine: Engine::Auto,
            open: OpenOptions::default(),
            verity: VerityOptions::default(),
            subdir: None,
            uid: None,
            gid: None,
            allow_other: false,
            allow_root: false,
            owner: None,
            flags: MountFlags::default(),
            uring: squashd_fuse::server::UringMode::Off,
            listing_attrs: squashd_fuse::ListingAttrs::Auto,
            threads: 1,
            read_ahead_threads: 0,
            read_ahead_bytes: 0,
            fsname: image.display().to_string(),
            idle_timeout: None,
            control: None,
            remote: crate::remote::RemoteSettings::default(),
            notify_pipe: None,
            partition: None,
            given: BTreeSet::new(),
        };
        for spec in all_options() {
            let default = match (spec.default, context) {
                (DefaultValue::Value(text), _) => text.to_string(),
                (DefaultValue::ByContext { lone, .. }, Context::LoneMount) => lone(),
                (DefaultValue::ByContext { daemon, .. }, Context::Daemon) => daemon.to_string(),
                (DefaultValue::None | DefaultValue::Described(_), _) => continue,
            };
            options
                .set(spec, Some(&default))
                .map_err(|e| UsageError(format!("default of {}: {e}", spec.name)))?;
        }
        for option in elements.into_iter().filter(|o| !o.is_empty()) {
            let (key, value) = match option.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (option, None),
            };
            // An option's old name is taken for its name (see [`OLD_NAMES`]).
            let key = OLD_NAMES
                .iter()
                .find(|(old, _)| *old == key)
                .map_or(key, |(_, name)| *name);
            match all_options().find(|s| s.name == key) {
                Some(spec) => {
                    options.set(spec, value)?;
                    options.given.insert(spec.name);
                }
                None if is_ignored(option) => {}
                None => {
                    return Err(UsageError(format!(
                        "unknown mount option {option:?} (squashd mount --help lists them)"
                    )))
                }
            }
        }
        if options.gave("offset") && options.gave("partition") {
            return Err(UsageError(
                "mount options offset and partition both say where the image starts: give one"
                    .into(),
            ));
        }
        Ok(options)
    }

    /// Whether the option `name` was given (rather than left at its default).
    pub(crate) fn gave(&self, name: &str) -> bool {
        self.given.contains(name)
    }

    /// The first option given that only root may give, and why (see [`OptionSpec::root_only`]).
    pub(crate) fn gave_root_only(&self) -> Option<(&'static str, &'static str)> {
        all_options()
            .filter(|spec| self.gave(spec.name))
            .find_map(|spec| spec.root_only.map(|why| (spec.name, why)))
    }

    /// Whether any cache budget (`metadata_cache=`, `data_cache=`, `compressed_cache=`) was
    /// given: the daemon then gives the image caches of its own instead of a share of its one.
    pub(crate) fn gave_cache_budget(&self) -> bool {
        ["metadata_cache", "data_cache", "compressed_cache"]
            .iter()
            .any(|name| self.gave(name))
    }

    fn set(&mut self, spec: &OptionSpec, value: Option<&str>) -> Result<(), UsageError> {
        let name = spec.name;
        let wrong = |why: String| UsageError(format!("mount option {name}: {why}"));
        let arg = match (spec.value, value) {
            (Value::Flag, None) => Arg::Flag,
            (Value::Flag, Some(_)) => return Err(wrong("takes no value".into())),
            (_, None | Some("")) => {
                return Err(wrong(format!(
                    "needs a value ({name}{})",
                    spec.value.placeholder()
                )))
            }
            (Value::Size, Some(v)) => Arg::Number(parse_size(v).map_err(wrong)?),
            (Value::Number, Some(v)) => Arg::Number(
                v.parse()
                    .map_err(|_| wrong(format!("{v:?} is not a whole number")))?,
            ),
            (Value::Seconds, Some(v)) => Arg::Seconds(
                v.parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s > 0.0 && *s < 1e9)
                    .map(Duration::from_secs_f64)
                    .ok_or_else(|| wrong(format!("{v:?} is not a positive number of seconds")))?,
            ),
            (Value::Text(_), Some(v)) => Arg::Text(v),
        };
        (spec.apply)(self, arg).map_err(wrong)
    }

    pub(super) fn set_engine(&mut self, engine: Engine) -> Result<(), String> {
        if self.engine != Engine::Auto && self.engine != engine {
            return Err("kernel and fuse are each other's opposite: give one".into());
        }
        self.engine = engine;
        Ok(())
    }
}

/// Whether `option` is one mount(8) passes that squashd accepts and ignores ([`IGNORED`]).
pub(crate) fn is_ignored(option: &str) -> bool {
    IGNORED.contains(&option) || IGNORED_PREFIXES.iter().any(|p| option.starts_with(p))
}

/// The options section of `squashd mount --help`, made from [`all_options`] and [`IGNORED`].
pub(crate) fn help() -> String {
    let mut text = String::from("Mount options (-o, comma-separated; may be repeated):\n");
    for spec in all_options() {
        let head = format!("{}{}", spec.name, spec.value.placeholder());
        let _ = write!(text, "  {head:<24} {}", spec.help);
        match spec.default {
            DefaultValue::None => {}
            DefaultValue::Value(v) | DefaultValue::Described(v) => {
                let _ = write!(text, " [default: {v}]");
            }
            DefaultValue::ByContext {
                lone_text, daemon, ..
            } => {
                let _ = write!(text, " [default: {lone_text}; {daemon} under serve]");
            }
        }
        text.push('\n');
    }
    let _ = write!(
        text,
        "\nOld names, still accepted: {}.\n",
        OLD_NAMES
            .iter()
            .map(|(old, name)| format!("{old}= (now {name}=)"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(
        text,
        "Accepted and ignored, as mount(8) and fstab pass them: {}, {}. The mount is always \
         read-only.",
        IGNORED.join(", "),
        IGNORED_PREFIXES
            .iter()
            .map(|p| format!("{p}*"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    text
}
