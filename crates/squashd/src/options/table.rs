//! The table of mount options, [`OPTIONS`]: each option's name, kind of value, default, help
//! text, whether a user may give it to the daemon, and how it sets its typed field of
//! [`Options`]. The parser and `--help` are both made from it.
//!
//! Adding an option: a field in [`Options`] (typed: a number, a path, a [`MountFlags`] member,
//! not a string parsed later), an entry here whose `apply` sets it, and, if a mount path needs
//! it, a line in `paths.rs` (what the FUSE path and the kernel path are given) or in the mount
//! funnel (crate::funnel). The table's tests check that every entry parses and is in `--help`.

use super::flags::MountFlag;
use super::{Engine, Options};
use squashd_fuse::server::UringMode;
use squashd_fuse::ListingAttrs;
use std::path::PathBuf;
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
    pub(super) fn placeholder(self) -> String {
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
pub(super) enum Arg<'a> {
    Flag,
    Number(u64),
    Seconds(Duration),
    Text(&'a str),
}

impl<'a> Arg<'a> {
    pub(super) fn number(self) -> u64 {
        match self {
            Arg::Number(n) => n,
            _ => 0,
        }
    }

    /// The text of a [`Value::Text`] option ("" for other kinds).
    pub(super) fn text(self) -> &'a str {
        match self {
            Arg::Text(text) => text,
            _ => "",
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
    /// Depends on who mounts: a lone `squashd mount` gets `lone()`, described as
    /// `lone_text`; an image of the daemon (`squashd serve`, `squashd attach`) gets `daemon`.
    /// Applied through the parser as [`DefaultValue::Value`] is.
    ByContext {
        lone: fn() -> String,
        lone_text: &'static str,
        daemon: &'static str,
    },
    /// Decided elsewhere (e.g. found in the image's file); only described.
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
    pub(super) apply: fn(&mut Options, Arg<'_>) -> Result<(), String>,
}

fn id(a: Arg<'_>) -> Result<u32, String> {
    u32::try_from(a.number()).map_err(|_| format!("{} is out of range", a.number()))
}

/// Options renamed, by their old names, which are still accepted: (old name, name). Given by
/// its old name, an option counts as given by its name.
pub(crate) const OLD_NAMES: &[(&str, &str)] = &[
    // "prefetch" is fetching image bytes before they are asked for (a remote image's
    // `prefetch=`); these threads decompress blocks ahead of readers: read-ahead.
    ("prefetch_threads", "readahead_threads"),
];

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
            o.subdir = Some(PathBuf::from(path.trim_start_matches('/')));
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
            o.uid = Some(id(a)?);
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
            o.gid = Some(id(a)?);
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
            o.allow_other = true;
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
            o.allow_root = true;
            Ok(())
        },
    },
    OptionSpec {
        name: "metadata_cache",
        root_only: Some("cache budgets are the daemon's to set"),
        value: Value::Size,
        default: DefaultValue::Value("256MiB"),
        help: "budget of the decompressed metadata (inodes, directories) cache; a verified \
               image's hash blocks and bitmap count against it",
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
        name: "uring",
        root_only: None,
        value: Value::Text("auto|on|off"),
        // Off by default: as a daemon (its own scheduling group, as a service is) the ring was
        // slower than /dev/fuse for cold walks and reads, and 69 images were ready later
        // (bench/results/2026-11-27-s11.md).
        default: DefaultValue::Value("off"),
        help: "FUSE over io_uring (Linux 6.14+): auto uses it when the kernel offers it (the \
               kernel path's blob file system keeps /dev/fuse, where its reads are faster), on \
               refuses to mount without it, off keeps /dev/fuse; the admin enables it with \
               fuse.enable_uring=1 on the kernel command line or `echo 1 > \
               /sys/module/fuse/parameters/enable_uring`",
        apply: |o, a| {
            let text = a.text();
            o.uring =
                UringMode::parse(text).ok_or_else(|| format!("{text:?} is not auto, on or off"))?;
            Ok(())
        },
    },
    OptionSpec {
        name: "listing_attrs",
        root_only: None,
        value: Value::Text("auto|all"),
        default: DefaultValue::Value("auto"),
        help: "which entries a FUSE mount's listings give the kernel with their attributes: \
               auto gives directories always and files while walks stat them (a `find` makes \
               no inode per file, a `du` switches after a few lookups), all gives every entry",
        apply: |o, a| {
            let text = a.text();
            o.listing_attrs =
                ListingAttrs::parse(text).ok_or_else(|| format!("{text:?} is not auto or all"))?;
            Ok(())
        },
    },
    OptionSpec {
        name: "threads",
        root_only: Some("threads are the daemon's to set"),
        value: Value::Number,
        // Dozens of images share the cores under serve: one request thread each (as
        // squashfuse_ll has), rather than a lone mount's per-core pool; `threads=N` gives a
        // busy image more. Each thread is a clone of /dev/fuse, a stack and a request buffer
        // (fuser's 16 MiB when this was measured): a second one made 69 images slower to be ready, and cold walks gained little
        // from it (bench/results/notes-from-code-comments.md, "serve: request threads per
        // image"). A lone mount: more threads measured slower for many parallel `find`s
        // ("request threads" there), fewer than 2 leave one reader blocking the rest.
        default: DefaultValue::ByContext {
            lone: || squashd_core::cores().max(2).to_string(),
            lone_text: "one per core, at least 2",
            daemon: "1",
        },
        help: "threads serving FUSE requests (1 to 256)",
        apply: |o, a| {
            o.threads = a.number().clamp(1, 256) as usize;
            Ok(())
        },
    },
    OptionSpec {
        name: "readahead_threads",
        root_only: Some("threads are the daemon's to set"),
        value: Value::Number,
        default: DefaultValue::ByContext {
            lone: || squashd_core::cores().to_string(),
            lone_text: "one per core",
            daemon: "1",
        },
        help: "threads decompressing ahead of sequential readers (0 to 64; 0: no read-ahead)",
        apply: |o, a| {
            o.read_ahead_threads = a.number().min(64) as usize;
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
            o.read_ahead_bytes = a.number();
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
                o.idle_timeout = Some(d);
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
                o.fsname = name.to_string();
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
        apply: |o, _| {
            o.flags.set(MountFlag::NoDev);
            Ok(())
        },
    },
    OptionSpec {
        name: "dev",
        root_only: Some("device files would give access to the host's devices"),
        value: Value::Flag,
        default: DefaultValue::None,
        help: "device files can be opened (root only)",
        apply: |o, _| {
            o.flags.set(MountFlag::Dev);
            Ok(())
        },
    },
    OptionSpec {
        name: "nosuid",
        root_only: None,
        value: Value::Flag,
        default: DefaultValue::Described("on"),
        help: "set-user-id and set-group-id bits are ignored",
        apply: |o, _| {
            o.flags.set(MountFlag::NoSuid);
            Ok(())
        },
    },
    OptionSpec {
        name: "suid",
        root_only: Some("set-user-ID files would run with their owner's rights"),
        value: Value::Flag,
        default: DefaultValue::None,
        help: "set-user-id and set-group-id bits take effect (root only)",
        apply: |o, _| {
            o.flags.set(MountFlag::Suid);
            Ok(())
        },
    },
    OptionSpec {
        name: "exec",
        root_only: None,
        value: Value::Flag,
        default: DefaultValue::Described("on"),
        help: "programs can be run",
        apply: |o, _| {
            o.flags.set(MountFlag::Exec);
            Ok(())
        },
    },
    OptionSpec {
        name: "noexec",
        root_only: None,
        value: Value::Flag,
        default: DefaultValue::None,
        help: "programs cannot be run",
        apply: |o, _| {
            o.flags.set(MountFlag::NoExec);
            Ok(())
        },
    },
    OptionSpec {
        name: "atime",
        root_only: None,
        value: Value::Flag,
        default: DefaultValue::None,
        help: "accepted (the image has no access times to update)",
        apply: |o, _| {
            o.flags.set(MountFlag::Atime);
            Ok(())
        },
    },
    OptionSpec {
        name: "noatime",
        root_only: None,
        value: Value::Flag,
        default: DefaultValue::None,
        help: "accepted (the image has no access times to update)",
        apply: |o, _| {
            o.flags.set(MountFlag::NoAtime);
            Ok(())
        },
    },
];
