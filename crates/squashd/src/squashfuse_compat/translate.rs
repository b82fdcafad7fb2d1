//! squashfuse's `-o` options, and what each becomes in `squashd mount -o`: one table,
//! [`SQUASHFUSE_OPTIONS`], from which the translation, `-h` and the README's lists are made.
//! The options are squashfuse's own (`offset=`, `timeout=`, `uid=`...), libfuse's that its
//! command line takes (helper, low-level and mount options), and, for `squashfuse` alone,
//! libfuse's high-level ones.

use super::Flavor;
use crate::options::{all_options, is_ignored};
use std::path::PathBuf;

/// What a squashfuse option becomes.
#[derive(Clone, Copy)]
pub(super) enum Meaning {
    /// The squashd option of the same name, same value, same meaning.
    Same,
    /// Translated by the function (which may refuse the value: a usage error).
    Translate(fn(&str, Flavor, &mut Translated) -> Result<(), String>),
    /// Accepted and ignored, for the reason given (squashfuse's effect is already squashd's, or
    /// means nothing for a read-only image).
    Ignored(&'static str),
    /// Refused, for the reason given: squashd cannot do it.
    Refused(&'static str),
}

/// One option of squashfuse's command line.
pub(super) struct SquashfuseOption {
    pub(super) name: &'static str,
    /// The placeholder of its value in `-h` (`name=N`), or None for a flag.
    pub(super) value: Option<&'static str>,
    /// Only `squashfuse` (libfuse's high-level library) has it.
    pub(super) high_level_only: bool,
    pub(super) meaning: Meaning,
    /// What it does, for `-h` (the options squashd ignores or refuses show why instead).
    pub(super) help: &'static str,
}

/// What the options given become.
#[derive(Debug, Default)]
pub(super) struct Translated {
    /// For `squashd mount -o`.
    pub(super) squashd: Vec<String>,
    /// `debug`: debug output, in the foreground.
    pub(super) debug: bool,
    /// Where to say `s` or `f` (squashd's `notify_pipe=`, known here to report failures found
    /// before the mount starts).
    pub(super) notify_pipe: Option<PathBuf>,
    /// Options squashd refuses or does not know, each with why: reported where squashfuse
    /// reports them (after the image was opened).
    pub(super) rejected: Vec<String>,
}

const CACHED: &str =
    "the image is immutable: the kernel keeps its entries, attributes and pages cached for good";
const NO_ATIME: &str = "the image has no access times to update";
const READ_ONLY: &str = "nothing is ever written to a squashd mount";
const SELINUX: &str = "squashd does not pass SELinux contexts to the kernel";
const MODES: &str = "squashd shows the image's modes as they are";
const REMEMBERED: &str = "squashd's inode numbers never change, remembered or not";

/// An option squashd acts on, with its `-h` line.
const fn acted(
    name: &'static str,
    value: Option<&'static str>,
    meaning: Meaning,
    help: &'static str,
) -> SquashfuseOption {
    SquashfuseOption {
        name,
        value,
        high_level_only: false,
        meaning,
        help,
    }
}

/// An option squashd ignores or refuses (its reason is its `-h` line).
const fn spec(
    name: &'static str,
    value: Option<&'static str>,
    meaning: Meaning,
) -> SquashfuseOption {
    acted(name, value, meaning, "")
}

/// [`spec`] for an option of libfuse's high-level library only.
const fn high_level(
    name: &'static str,
    value: Option<&'static str>,
    meaning: Meaning,
) -> SquashfuseOption {
    SquashfuseOption {
        high_level_only: true,
        ..spec(name, value, meaning)
    }
}

/// Every option squashfuse's command line takes. Any other option is given to squashd as it
/// is, if squashd's own table knows it, and otherwise is unknown.
pub(super) const SQUASHFUSE_OPTIONS: &[SquashfuseOption] = &[
    // squashfuse's own.
    acted("offset", Some("N"), Meaning::Translate(offset), "offset N bytes into ARCHIVE to mount [default: where an AppImage or SIF file holds its image, else 0]"),
    acted("subdir", Some("PATH"), Meaning::Same, "mount subdirectory PATH of ARCHIVE"),
    acted("notify_pipe", Some("PATH"), Meaning::Translate(notify_pipe), "named pipe that will receive 's' (success) or 'f' (failure) when the mountpoint is ready"),
    acted("timeout", Some("N"), Meaning::Translate(timeout), "idle N seconds for automatic unmount (0: never)"),
    acted("uid", Some("N"), Meaning::Translate(uid), "set file owner to uid N"),
    acted("gid", Some("N"), Meaning::Translate(gid), "set file group to gid N"),
    // libfuse's command-line helper. (`-h` shows debug with -d.)
    acted("debug", None, Meaning::Translate(debug), ""),
    acted("fsname", Some("NAME"), Meaning::Translate(fsname), "the source /proc/mounts shows [default: ARCHIVE]"),
    spec("subtype", Some("VALUE"), Meaning::Ignored("a squashd mount's type is always fuse.squashd")),
    spec("clone_fd", None, Meaning::Ignored("squashd always gives each thread a /dev/fuse descriptor of its own")),
    spec("max_idle_threads", Some("VALUE"), Meaning::Ignored("squashd's request threads are a fixed pool")),
    acted("max_threads", Some("N"), Meaning::Translate(max_threads), "the number of threads serving requests"),
    // libfuse's low-level library and its mount options.
    acted("allow_other", None, Meaning::Same, "allow access by other users"),
    acted("allow_root", None, Meaning::Same, "allow access by the superuser"),
    spec("default_permissions", None, Meaning::Ignored("the kernel always checks permissions from the mode bits")),
    spec("ro", None, Meaning::Ignored("the mount is always read-only")),
    spec("rw", None, Meaning::Ignored("the mount is always read-only (squashfuse's is writable in name only)")),
    acted("suid", None, Meaning::Same, "set-user-ID bits take effect"),
    acted("nosuid", None, Meaning::Same, "set-user-ID bits are ignored (the default)"),
    acted("dev", None, Meaning::Same, "device files can be opened"),
    acted("nodev", None, Meaning::Same, "device files cannot be opened (the default)"),
    acted("exec", None, Meaning::Same, "programs can be run (the default)"),
    acted("noexec", None, Meaning::Same, "programs cannot be run"),
    acted("atime", None, Meaning::Same, "accepted (nothing to update)"),
    acted("noatime", None, Meaning::Same, "accepted (nothing to update)"),
    spec("nodiratime", None, Meaning::Ignored(NO_ATIME)),
    spec("nostrictatime", None, Meaning::Ignored(NO_ATIME)),
    spec("async", None, Meaning::Ignored(READ_ONLY)),
    spec("sync", None, Meaning::Ignored(READ_ONLY)),
    spec("dirsync", None, Meaning::Ignored(READ_ONLY)),
    spec("symfollow", None, Meaning::Ignored("symbolic links are followed (the default)")),
    spec("user", Some("VALUE"), Meaning::Ignored("only written to /etc/mtab")),
    spec("max_read", Some("VALUE"), Meaning::Ignored("squashd lets the kernel choose the size of its reads")),
    spec("auto_unmount", None, Meaning::Refused("squashd unmounts on SIGTERM, SIGINT and SIGHUP; a squashd killed with SIGKILL leaves a dead mount that `fusermount3 -u` clears")),
    spec("nosymfollow", None, Meaning::Refused("squashd cannot mount with nosymfollow")),
    spec("blkdev", None, Meaning::Refused("squashd mounts image files, not block devices (fuseblk)")),
    spec("blksize", Some("VALUE"), Meaning::Refused("only for blkdev mounts, which squashd does not make")),
    spec("context", Some("VALUE"), Meaning::Refused(SELINUX)),
    spec("fscontext", Some("VALUE"), Meaning::Refused(SELINUX)),
    spec("defcontext", Some("VALUE"), Meaning::Refused(SELINUX)),
    spec("rootcontext", Some("VALUE"), Meaning::Refused(SELINUX)),
    // libfuse's high-level library (`squashfuse`).
    high_level("kernel_cache", None, Meaning::Ignored(CACHED)),
    high_level("auto_cache", None, Meaning::Ignored(CACHED)),
    high_level("noauto_cache", None, Meaning::Ignored(CACHED)),
    high_level("no_rofd_flush", None, Meaning::Ignored(READ_ONLY)),
    high_level("entry_timeout", Some("VALUE"), Meaning::Ignored(CACHED)),
    high_level("attr_timeout", Some("VALUE"), Meaning::Ignored(CACHED)),
    high_level("ac_attr_timeout", Some("VALUE"), Meaning::Ignored(CACHED)),
    high_level("negative_timeout", Some("VALUE"), Meaning::Ignored(CACHED)),
    high_level("noforget", None, Meaning::Ignored(REMEMBERED)),
    high_level("remember", Some("VALUE"), Meaning::Ignored(REMEMBERED)),
    high_level("umask", Some("VALUE"), Meaning::Refused(MODES)),
    high_level("fmask", Some("VALUE"), Meaning::Refused(MODES)),
    high_level("dmask", Some("VALUE"), Meaning::Refused(MODES)),
    high_level("modules", Some("VALUE"), Meaning::Refused("libfuse's modules are not supported (subdir= does what its subdir module does)")),
];

/// Translates the options given, for `flavor`. An error is a usage error (a value squashfuse
/// would not parse either).
pub(super) fn translate(options: &[String], flavor: Flavor) -> Result<Translated, String> {
    let mut out = Translated::default();
    for option in options {
        let (name, value) = match option.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (option.as_str(), None),
        };
        let spec = SQUASHFUSE_OPTIONS.iter().find(|s| {
            s.name == name
                && s.value.is_some() == value.is_some()
                && (flavor == Flavor::HighLevel || !s.high_level_only)
        });
        let Some(spec) = spec else {
            // squashd's own options (data_cache=, ...) and what squashd mount ignores.
            if all_options().any(|s| s.name == name) || is_ignored(option) {
                out.squashd.push(option.clone());
            } else {
                out.rejected.push(format!("unknown option `{option}'"));
            }
            continue;
        };
        match spec.meaning {
            Meaning::Same => out.squashd.push(option.clone()),
            Meaning::Translate(f) => f(value.unwrap_or(""), flavor, &mut out)
                .map_err(|why| format!("invalid parameter in option `{option}': {why}"))?,
            Meaning::Ignored(_) => {}
            Meaning::Refused(why) => out.rejected.push(format!("option `{option}': {why}")),
        }
    }
    Ok(out)
}

/// A whole number as `%u`/`%zu` reads it (digits only, here).
fn whole(value: &str) -> Result<u64, String> {
    value
        .parse()
        .map_err(|_| format!("{value:?} is not a whole number"))
}

fn offset(value: &str, _: Flavor, out: &mut Translated) -> Result<(), String> {
    out.squashd.push(format!("offset={}", whole(value)?));
    Ok(())
}

fn notify_pipe(value: &str, _: Flavor, out: &mut Translated) -> Result<(), String> {
    if value.is_empty() {
        return Err("a named pipe's path is needed".into());
    }
    out.notify_pipe = Some(PathBuf::from(value));
    out.squashd.push(format!("notify_pipe={value}"));
    Ok(())
}

/// `timeout=N`: unmount after N idle seconds; 0 (squashfuse's default) is no timeout.
fn timeout(value: &str, _: Flavor, out: &mut Translated) -> Result<(), String> {
    let seconds = whole(value)?;
    if seconds > 0 {
        out.squashd.push(format!("timeout={seconds}"));
    }
    Ok(())
}

fn uid(value: &str, flavor: Flavor, out: &mut Translated) -> Result<(), String> {
    owner("uid", value, flavor, out)
}

fn gid(value: &str, flavor: Flavor, out: &mut Translated) -> Result<(), String> {
    owner("gid", value, flavor, out)
}

/// `uid=N`, `gid=N`, read as `%d`. squashfuse_ll overrides owners only for N > 0 (`uid=0` is
/// its "not set"); squashfuse (libfuse's high-level library) sets whatever is given, a
/// negative number wrapping as a C cast does.
fn owner(key: &str, value: &str, flavor: Flavor, out: &mut Translated) -> Result<(), String> {
    let id: i32 = value
        .parse()
        .map_err(|_| format!("{value:?} is not a number"))?;
    match flavor {
        Flavor::LowLevel if id <= 0 => {}
        _ => out.squashd.push(format!("{key}={}", id as u32)),
    }
    Ok(())
}

/// `fsname=NAME`, refused with a comma in it (`-o fsname=a\,b`): squashd passes the name on
/// in fusermount3's option list, where the comma would end it and start another option.
fn fsname(value: &str, _: Flavor, out: &mut Translated) -> Result<(), String> {
    if value.contains(',') {
        out.rejected.push(format!(
            "option `fsname={value}': squashd cannot pass a comma in the file system's name"
        ));
    } else {
        out.squashd.push(format!("fsname={value}"));
    }
    Ok(())
}

fn debug(_: &str, _: Flavor, out: &mut Translated) -> Result<(), String> {
    out.debug = true;
    Ok(())
}

/// `max_threads=N`: squashd's `threads=N`.
fn max_threads(value: &str, _: Flavor, out: &mut Translated) -> Result<(), String> {
    out.squashd
        .push(format!("threads={}", whole(value)?.max(1)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn translated(list: &str, flavor: Flavor) -> Translated {
        let options: Vec<String> = list.split(',').map(String::from).collect();
        translate(&options, flavor).unwrap_or_else(|e| panic!("{list}: {e}"))
    }

    #[test]
    fn squashfuse_options_become_squashd_options() {
        let t = translated(
            "offset=4096,timeout=30,uid=1000,gid=100,subdir=usr,allow_other,max_threads=4,\
             notify_pipe=/run/p,fsname=app,clone_fd,max_idle_threads=2,rw,nodev,debug",
            Flavor::LowLevel,
        );
        assert_eq!(
            t.squashd,
            [
                "offset=4096",
                "timeout=30",
                "uid=1000",
                "gid=100",
                "subdir=usr",
                "allow_other",
                "threads=4",
                "notify_pipe=/run/p",
                "fsname=app",
                "nodev"
            ]
        );
        assert!(t.debug);
        assert_eq!(
            t.notify_pipe.as_deref(),
            Some(std::path::Path::new("/run/p"))
        );
        assert!(t.rejected.is_empty(), "{:?}", t.rejected);
    }

    #[test]
    fn zero_means_unset_where_squashfuse_ll_says_so() {
        let t = translated("timeout=0,uid=0,gid=-1", Flavor::LowLevel);
        assert!(t.squashd.is_empty(), "{:?}", t.squashd);
        let t = translated("uid=0,gid=-1", Flavor::HighLevel);
        assert_eq!(t.squashd, ["uid=0", "gid=4294967295"]);
    }

    #[test]
    fn squashd_options_pass_and_others_are_rejected() {
        let t = translated(
            "data_cache=64MiB,x-systemd.automount,bogus,blkdev",
            Flavor::LowLevel,
        );
        assert_eq!(t.squashd, ["data_cache=64MiB", "x-systemd.automount"]);
        assert_eq!(t.rejected.len(), 2, "{:?}", t.rejected);
        assert!(t.rejected[0].contains("unknown option `bogus'"));
        assert!(t.rejected[1].contains("blkdev") && t.rejected[1].contains("block devices"));
    }

    #[test]
    fn a_comma_in_a_value_stays_there_or_is_refused() {
        let options = [
            "subdir=a,allow_other".to_string(),
            "fsname=x,dev".to_string(),
        ];
        let t = translate(&options, Flavor::LowLevel).unwrap();
        assert_eq!(t.squashd, ["subdir=a,allow_other"]);
        assert_eq!(t.rejected.len(), 1, "{:?}", t.rejected);
        assert!(t.rejected[0].contains("fsname=x,dev"), "{:?}", t.rejected);
    }

    #[test]
    fn high_level_options_only_for_squashfuse() {
        let t = translated("kernel_cache,entry_timeout=5,umask=022", Flavor::HighLevel);
        assert!(t.squashd.is_empty());
        assert_eq!(t.rejected.len(), 1, "{:?}", t.rejected);
        assert!(t.rejected[0].contains("umask"));
        let t = translated("kernel_cache", Flavor::LowLevel);
        assert!(t.rejected[0].contains("unknown option `kernel_cache'"));
    }

    #[test]
    fn bad_values_are_usage_errors() {
        for list in [
            "offset=ten",
            "timeout=-1",
            "uid=x",
            "max_threads=many",
            "notify_pipe=",
        ] {
            let options = [list.to_string()];
            let e = translate(&options, Flavor::LowLevel).unwrap_err();
            assert!(e.contains(list), "{list}: {e}");
        }
    }

    #[test]
    fn every_option_is_named_in_the_readme() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
                .unwrap();
        let section = readme
            .split("## Using squashd in place of squashfuse")
            .nth(1)
            .expect("the README's squashfuse section");
        for spec in SQUASHFUSE_OPTIONS {
            assert!(
                section.contains(&format!("`{}", spec.name)),
                "{} is not in the README",
                spec.name
            );
        }
    }
}
