//! The mount options (`squashd mount -o`, `squashd attach -o`, a daemon config's `options`):
//! one table, [`OPTIONS`], from which both the parser and the `--help` text are made, so that
//! neither can list an option the other does not know (the shape of ripgrep's `flags/defs.rs`,
//! reduced to what a list of `key=value` pairs needs).

use crate::cli::UsageError;
use crate::size::parse_size;
use squashd_core::OpenOptions;
use squashd_fuse::MountConfig;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What an option's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Value {
    /// No value: `allow_other`.
    Flag,
    /// A byte size: `256MiB`, `4096`.
    Size,
    /// A whole number.
    Number,
    /// A positive number of seconds, fractions allowed.
    Seconds,
    /// A path or a name, shown in `--help` as the placeholder given.
    Text(&'static str),
}

impl Value {
    /// How `--help` shows the value after `name=`.
    fn placeholder(self) -> String {
        match self {
            Value::Flag => String::new(),
            Value::Size => "=SIZE".into(),
            Value::Number => "=N".into(),
            Value::Seconds => "=SECONDS".into(),
            Value::Text(what) => format!("={what}"),
        }
    }
}

/// A value as parsed for its option's [`Value`] kind.
#[derive(Debug, Clone, Copy)]
enum Arg<'a> {
    Flag,
    Number(u64),
    Seconds(Duration),
    Text(&'a str),
}

impl Arg<'_> {
    fn number(self) -> u64 {
        match self {
            Arg::Number(n) => n,
            _ => 0,
        }
    }
}

/// An option's default.
#[derive(Debug, Clone, Copy)]
pub(crate) enum DefaultValue {
    /// Nothing is set unless the option is given.
    None,
    /// Applied through the parser before the options given, as if given first: this table is
    /// the one place that says what a mount gets.
    Value(&'static str),
    /// Decided elsewhere (e.g. from the number of cores); only described.
    Described(&'static str),
}

/// One mount option.
pub(crate) struct OptionSpec {
    pub(crate) name: &'static str,
    pub(crate) value: Value,
    pub(crate) default: DefaultValue,
    pub(crate) help: &'static str,
    /// Why a user other than root may not give this option to the daemon (`squashd attach`
    /// through `allow_uids`), or None when they may: options that reach beyond the user's own
    /// mount, into the daemon's resources or other users' rights.
    pub(crate) root_only: Option<&'static str>,
    /// Sets the option in [`Options`]; an error says why the value is wrong.
    apply: fn(&mut Options, Arg<'_>) -> Result<(), String>,
}

fn id(a: Arg<'_>) -> Result<u32, String> {
    u32::try_from(a.number()).map_err(|_| format!("{} is out of range", a.number()))
}

/// Every option a mount takes. Their order is `--help`'s.
pub(crate) const OPTIONS: &[OptionSpec] = &[
    OptionSpec {
        name: "kernel",
        root_only: Some("a kernel-path mount is open to every user of the host"),
        value: Value::Flag,
        default: DefaultValue::None,
        help: "serve through the kernel's EROFS: squashd translates the image's metadata once, \
               then walks, lookups and stats never leave the kernel; squashd decompresses file \
               data (root, Linux 6.12+; the mount is open to all users, as allow_other)",
        apply: |o, _| o.set_engine(Engine::Kernel),
    },
    OptionSpec {
        name: "fuse",
        root_only: None,
        value: Value::Flag,
        default: DefaultValue::None,
        help: "serve every request through FUSE",
        apply: |o, _| o.set_engine(Engine::Fuse),
    },
    OptionSpec {
        name: "offset",
        root_only: None,
        value: Value::Size,
        default: DefaultValue::Described("found in an AppImage or SIF file, else 0"),
        help: "where the image starts in the file (an AppImage or Apptainer SIF holds one \
               inside)",
        apply: |o, a| {
            o.open.offset = a.number();
            Ok(())
        },
    },
    OptionSpec {
        name: "partition",
        root_only: None,
        value: Value::Number,
        default: DefaultValue::Described("the primary system partition"),
        help: "the partition of an Apptainer SIF file to serve, by descriptor id (`squashd \
               info FILE` lists them)",
        apply: |o, a| {
            o.partition = Some(id(a)?);
            Ok(())
        },
    },
    OptionSpec {
        name: "subdir",
        root_only: None,
        value: Value::Text("PATH"),
        default: DefaultValue::None,
        help: "serve this directory of the image as the root",
        apply: |o, a| {
            let Arg::Text(path) = a else { return Ok(()) };
            o.mount.subdir = Some(PathBuf::from(path.trim_start_matches('/')));
            Ok(())
        },
    },
    OptionSpec {
        name: "uid",
        root_only: None,
        value: Value::Number,
        default: DefaultValue::None,
        help: "show every file as owned by this user id",
        apply: |o, a| {
            o.mount.uid = Some(id(a)?);
            Ok(())
        },
    },
    OptionSpec {
        name: "gid",
        root_only: None,
        value: Value::Number,
        default: DefaultValue::None,
        help: "show every file as owned by this group id",
        apply: |o, a| {
            o.mount.gid = Some(id(a)?);
            Ok(())
        },
    },
    OptionSpec {
        name: "allow_other",
        root_only: None,
        value: Value::Flag,
        default: DefaultValue::None,
        help: "let users other than the one who mounted read it (for a non-root user: \
               user_allow_other in /etc/fuse.conf)",
        apply: |o, _| {
            o.mount.allow_other = true;
            Ok(())
        },
    },
    OptionSpec {
        name: "allow_root",
        root_only: None,
        value: Value::Flag,
        default: DefaultValue::None,
        help: "let root read it too, besides the user who mounted (for a non-root user: \
               user_allow_other in /etc/fuse.conf)",
        apply: |o, _| {
            o.mount.allow_root = true;
            Ok(())
        },
    },
    OptionSpec {
        name: "metadata_cache",
        root_only: Some("cache budgets are the daemon's to set"),
        value: Value::Size,
        default: DefaultValue::Value("256MiB"),
        help: "budget of the decompressed metadata (inodes, directories) cache",
        apply: |o, a| {
            o.open.budgets.metadata_bytes = a.number();
            Ok(())
        },
    },
    OptionSpec {
        name: "data_cache",
        root_only: Some("cache budgets are the daemon's to set"),
        value: Value::Size,
        default: DefaultValue::Value("256MiB"),
        help: "budget of the decompressed data and fragment cache",
        apply: |o, a| {
            o.open.budgets.data_bytes = a.number();
            Ok(())
        },
    },
    OptionSpec {
        name: "compressed_cache",
        root_only: Some("cache budgets are the daemon's to set"),
        value: Value::Size,
        default: DefaultValue::Value("0"),
        help: "budget of the cache of compressed blocks (0: none)",
        apply: |o, a| {
            o.open.budgets.compressed_bytes = a.number();
            Ok(())
        },
    },
    OptionSpec {
        name: "threads",
        root_only: Some("threads are the daemon's to set"),
        value: Value::Number,
        default: DefaultValue::Described("one per core, at least 2"),
        help: "threads serving FUSE requests (1 to 256)",
        apply: |o, a| {
            o.mount.threads = a.number().clamp(1, 256) as usize;
            Ok(())
        },
    },
    OptionSpec {
        name: "prefetch_threads",
        root_only: Some("threads are the daemon's to set"),
        value: Value::Number,
        default: DefaultValue::Described("one per core"),
        help: "threads decompressing ahead of sequential readers (0 to 64; 0: no read-ahead)",
        apply: |o, a| {
            o.mount.prefetch_threads = a.number().min(64) as usize;
            Ok(())
        },
    },
    OptionSpec {
        name: "readahead",
        root_only: None,
        value: Value::Size,
        default: DefaultValue::Value("2MiB"),
        help: "how far ahead of a sequential reader to decompress",
        apply: |o, a| {
            o.mount.readahead_bytes = a.number();
            Ok(())
        },
    },
    OptionSpec {
        name: "timeout",
        root_only: None,
        value: Value::Seconds,
        default: DefaultValue::None,
        help: "unmount after that long without a request (a busy mount stays)",
        apply: |o, a| {
            if let Arg::Seconds(d) = a {
                o.mount.idle_timeout = Some(d);
            }
            Ok(())
        },
    },
    OptionSpec {
        name: "disk_cache",
        root_only: Some("the disk cache is the daemon's to set"),
        value: Value::Text("DIR"),
        default: DefaultValue::None,
        help: "a remote image: keep fetched data in this directory, across restarts, shared by \
               the process's remote images (without it, in memory only)",
        apply: |o, a| {
            if let Arg::Text(dir) = a {
                o.remote.disk_cache_dir = Some(PathBuf::from(dir));
            }
            Ok(())
        },
    },
    OptionSpec {
        name: "disk_cache_size",
        root_only: Some("the disk cache is the daemon's to set"),
        value: Value::Size,
        default: DefaultValue::Value("4GiB"),
        help: "a remote image: budget of the disk cache (least recently used data goes first)",
        apply: |o, a| {
            o.remote.disk_cache_bytes = a.number();
            Ok(())
        },
    },
    OptionSpec {
        name: "fetch_unit",
        root_only: None,
        value: Value::Size,
        default: DefaultValue::Value("1MiB"),
        help: "a remote image: bytes fetched per request (aligned; 4KiB to 64MiB)",
        apply: |o, a| {
            if !(4096..=64 << 20).contains(&a.number()) {
                return Err("must be between 4KiB and 64MiB".into());
            }
            o.remote.fetch_unit = a.number();
            Ok(())
        },
    },
    OptionSpec {
        name: "open_tail",
        root_only: None,
        value: Value::Size,
        default: DefaultValue::Value("8MiB"),
        help: "a remote image without a disk cache: bytes of its end fetched when it is opened, \
               beside its start (its metadata is there: a round trip less; 0 turns it off, \
               64MiB at most)",
        apply: |o, a| {
            if a.number() > 64 << 20 {
                return Err("must be 64MiB or less".into());
            }
            o.remote.open_tail = a.number();
            Ok(())
        },
    },
    OptionSpec {
        name: "connections",
        root_only: Some("connections are the daemon's to set"),
        value: Value::Number,
        default: DefaultValue::Value("8"),
        help: "a remote image: connections to its server at most (1 to 64)",
        apply: |o, a| {
            o.remote.connections = a.number().clamp(1, 64) as usize;
            Ok(())
        },
    },
    OptionSpec {
        name: "prefetch",
        root_only: Some("the daemon would read the list with its own rights"),
        value: Value::Text("FILE"),
        default: DefaultValue::None,
        help: "a remote image: once mounted, fetch in the background what this list names \
               (lines /PATH of the image, or @START+LEN byte ranges as trace= writes them)",
        apply: |o, a| {
            if let Arg::Text(path) = a {
                o.remote.prefetch = Some(PathBuf::from(path));
            }
            Ok(())
        },
    },
    OptionSpec {
        name: "trace",
        root_only: Some("the daemon would write the file with its own rights"),
        value: Value::Text("FILE"),
        default: DefaultValue::None,
        help: "a remote image: when the mount ends, write the byte ranges readers asked for, \
               in order, to this file (a list for prefetch=)",
        apply: |o, a| {
            if let Arg::Text(path) = a {
                o.remote.trace = Some(PathBuf::from(path));
            }
            Ok(())
        },
    },
    OptionSpec {
        name: "fsname",
        root_only: None,
        value: Value::Text("NAME"),
        default: DefaultValue::Described("the image's path"),
        help: "the source /proc/mounts shows",
        apply: |o, a| {
            if let Arg::Text(name) = a {
                o.mount.fsname = name.to_string();
            }
            Ok(())
        },
    },
    OptionSpec {
        name: "control",
        root_only: Some("a control socket belongs to a lone `squashd mount`"),
        value: Value::Text("SOCKET"),
        default: DefaultValue::None,
        help: "a socket (mode 0600) where `squashd status --socket SOCKET` shows this mount's \
               counters; removed with the mount (a lone mount only: the daemon has its own)",
        apply: |o, a| {
            if let Arg::Text(path) = a {
                o.control = Some(PathBuf::from(path));
            }
            Ok(())
        },
    },
    OptionSpec {
        name: "notify_pipe",
        root_only: Some("a notify pipe belongs to a lone `squashd mount`"),
        value: Value::Text("FIFO"),
        default: DefaultValue::None,
        help: "a named pipe (mkfifo) that receives `s` once the mount answers or `f` if it \
               failed, as with squashfuse (a lone mount only)",
        apply: |o, a| {
            if let Arg::Text(path) = a {
                o.notify_pipe = Some(PathBuf::from(path));
            }
            Ok(())
        },
    },
    OptionSpec {
        name: "nodev",
        root_only: None,
        value: Value::Flag,
        default: DefaultValue::Described("on"),
        help: "device files cannot be opened",
        apply: |o, _| o.flag("nodev"),
    },
    OptionSpec {
        name: "dev",
        root_only: Some("device files would give access to the host's devices"),
        value: Value::Flag,
        default: DefaultValue::None,
        help: "device files can be opened (root only)",
        apply: |o, _| o.flag("dev"),
    },
    OptionSpec {
        name: "nosuid",
        root_only: None,
        value: Value::Flag,
        default: DefaultValue::Described("on"),
        help: "set-user-id and set-group-id bits are ignored",
        apply: |o, _| o.flag("nosuid"),
    },
    OptionSpec {
        name: "suid",
        root_only: Some("set-user-ID files would run with their owner's rights"),
        value: Value::Flag,
        default: DefaultValue::None,
        help: "set-user-id and set-group-id bits take effect (root only)",
        apply: |o, _| o.flag("suid"),
    },
    OptionSpec {
        name: "exec",
        root_only: None,
        value: Value::Flag,
        default: DefaultValue::Described("on"),
        help: "programs can be run",
        apply: |o, _| o.flag("exec"),
    },
    OptionSpec {
        name: "noexec",
        root_only: None,
        value: Value::Flag,
        default: DefaultValue::None,
        help: "programs cannot be run",
        apply: |o, _| o.flag("noexec"),
    },
    OptionSpec {
        name: "atime",
        root_only: None,
        value: Value::Flag,
        default: DefaultValue::None,
        help: "accepted (the image has no access times to update)",
        apply: |o, _| o.flag("atime"),
    },
    OptionSpec {
        name: "noatime",
        root_only: None,
        value: Value::Flag,
        default: DefaultValue::None,
        help: "accepted (the image has no access times to update)",
        apply: |o, _| o.flag("noatime"),
    },
];

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

/// What the -o options say.
#[derive(Debug)]
pub(crate) struct Options {
    /// `kernel`, `fuse`, or neither.
    pub(crate) engine: Engine,
    pub(crate) open: OpenOptions,
    pub(crate) mount: MountConfig,
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
    /// `image`. Errors are [`UsageError`]s naming the option.
    pub(crate) fn parse(list: &[String], image: &Path) -> Result<Options, UsageError> {
        Options::parse_each(list.iter().flat_map(|o| o.split(',')), image)
    }

    /// Parses options already split, one option per element, for a mount of `image`: a comma
    /// in an element is part of its value (the squashfuse drop-in's `-o subdir=a\,b`, which
    /// its own parser unescaped, must not become two options here).
    pub(crate) fn parse_each<'a>(
        elements: impl IntoIterator<Item = &'a str>,
        image: &Path,
    ) -> Result<Options, UsageError> {
        // Field by field rather than struct literals: the libraries' option structs may gain
        // fields (or become non-exhaustive) without this code changing.
        let mut options = Options {
            engine: Engine::Auto,
            open: OpenOptions::default(),
            mount: MountConfig::default(),
            control: None,
            remote: crate::remote::RemoteSettings::default(),
            notify_pipe: None,
            partition: None,
            given: BTreeSet::new(),
        };
        options.mount.fsname = image.display().to_string();
        for spec in OPTIONS {
            if let DefaultValue::Value(text) = spec.default {
                options
                    .set(spec, Some(text))
                    .map_err(|e| UsageError(format!("default of {}: {e}", spec.name)))?;
            }
        }
        for option in elements.into_iter().filter(|o| !o.is_empty()) {
            let (key, value) = match option.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (option, None),
            };
            match OPTIONS.iter().find(|s| s.name == key) {
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
        OPTIONS
            .iter()
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

    fn set_engine(&mut self, engine: Engine) -> Result<(), String> {
        if self.engine != Engine::Auto && self.engine != engine {
            return Err("kernel and fuse are each other's opposite: give one".into());
        }
        self.engine = engine;
        Ok(())
    }

    fn flag(&mut self, name: &str) -> Result<(), String> {
        self.mount.flags.push(name.to_string());
        Ok(())
    }
}

/// Whether `option` is one mount(8) passes that squashd accepts and ignores ([`IGNORED`]).
pub(crate) fn is_ignored(option: &str) -> bool {
    IGNORED.contains(&option) || IGNORED_PREFIXES.iter().any(|p| option.starts_with(p))
}

/// The options section of `squashd mount --help`, made from [`OPTIONS`] and [`IGNORED`].
pub(crate) fn help() -> String {
    let mut text = String::from("Mount options (-o, comma-separated; may be repeated):\n");
    for spec in OPTIONS {
        let head = format!("{}{}", spec.name, spec.value.placeholder());
        let _ = write!(text, "  {head:<24} {}", spec.help);
        match spec.default {
            DefaultValue::None => {}
            DefaultValue::Value(v) | DefaultValue::Described(v) => {
                let _ = write!(text, " [default: {v}]");
            }
        }
        text.push('\n');
    }
    let _ = write!(
        text,
        "\nAccepted and ignored, as mount(8) and fstab pass them: {}, {}. The mount is always \
         read-only.\n",
        IGNORED.join(", "),
        IGNORED_PREFIXES
            .iter()
            .map(|p| format!("{p}*"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(list: &[&str]) -> Result<Options, UsageError> {
        let list: Vec<String> = list.iter().map(|s| s.to_string()).collect();
        Options::parse(&list, Path::new("x.sqfs"))
    }

    #[test]
    fn options() {
        let o = parse(&[
            "rw,nofail,_netdev,uid=1000,gid=100,x-systemd.automount",
            "data_cache=64MiB,offset=4096,subdir=/usr/lib,timeout=2.5,allow_other",
        ])
        .unwrap();
        assert_eq!(o.mount.uid, Some(1000));
        assert_eq!(o.mount.gid, Some(100));
        assert_eq!(o.open.budgets.data_bytes, 64 << 20);
        assert_eq!(o.open.offset, 4096);
        assert_eq!(o.mount.subdir.as_deref(), Some(Path::new("usr/lib")));
        assert_eq!(o.mount.idle_timeout, Some(Duration::from_millis(2500)));
        assert!(o.mount.allow_other);
        assert_eq!(o.mount.fsname, "x.sqfs");
        assert!(o.gave("data_cache") && o.gave("uid") && !o.gave("threads"));
        assert!(o.gave_cache_budget());
    }

    #[test]
    fn defaults_come_from_the_table() {
        let o = parse(&[]).unwrap();
        assert_eq!(o.open.budgets.metadata_bytes, 256 << 20);
        assert_eq!(o.open.budgets.data_bytes, 256 << 20);
        assert_eq!(o.open.budgets.compressed_bytes, 0);
        assert_eq!(o.mount.readahead_bytes, 2 << 20);
        assert_eq!(o.open.offset, 0);
        assert!(!o.gave_cache_budget() && !o.gave("offset"));
        assert!(o.mount.flags.is_empty());
    }

    #[test]
    fn a_sif_partition_is_chosen_by_id_and_not_with_an_offset() {
        let o = parse(&["partition=3"]).unwrap();
        assert_eq!(o.partition, Some(3));
        assert!(o.gave("partition") && !o.gave("offset"));
        assert_eq!(parse(&[]).unwrap().partition, None);
        let e = parse(&["partition=3,offset=4096"]).unwrap_err().to_string();
        assert!(e.contains("offset and partition"), "{e}");
    }

    #[test]
    fn wrong_options_are_usage_errors_naming_the_option() {
        for (list, names) in [
            ("bogus", "\"bogus\""),
            ("uid=x", "uid"),
            ("uid=4294967296", "uid"),
            ("uid", "uid"),
            ("timeout=0", "timeout"),
            ("timeout=nan", "timeout"),
            ("data_cache=lots", "data_cache"),
            ("allow_other=1", "allow_other"),
            ("control=", "control"),
            ("partition=x", "partition"),
            ("partition=-1", "partition"),
            ("partition=4294967296", "partition"),
        ] {
            let e = parse(&[list]).unwrap_err().to_string();
            assert!(e.contains(names), "{list}: {e}");
            assert!(!e.contains('\n'), "{list}: {e}");
        }
    }

    #[test]
    fn every_option_parses_with_a_value_of_its_kind() {
        for spec in OPTIONS {
            let given = match spec.value {
                Value::Flag => spec.name.to_string(),
                Value::Size => format!("{}=1MiB", spec.name),
                Value::Number => format!("{}=3", spec.name),
                Value::Seconds => format!("{}=1.5", spec.name),
                Value::Text(_) => format!("{}=some/where", spec.name),
            };
            let o = parse(&[&given]).unwrap_or_else(|e| panic!("{given}: {e}"));
            assert!(o.gave(spec.name));
        }
        for ignored in IGNORED {
            parse(&[ignored]).unwrap();
        }
    }

    #[test]
    fn help_lists_every_option() {
        let help = help();
        for spec in OPTIONS {
            let head = format!("  {}{} ", spec.name, spec.value.placeholder());
            assert!(help.contains(&head), "{head:?} missing from\n{help}");
        }
        for ignored in IGNORED {
            assert!(help.contains(ignored), "{ignored}");
        }
    }
}
