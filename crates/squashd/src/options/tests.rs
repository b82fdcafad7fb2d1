//! The parser's and the table's tests.

use super::*;

fn parse(list: &[&str]) -> Result<Options, UsageError> {
    let list: Vec<String> = list.iter().map(|s| s.to_string()).collect();
    Options::parse(&list, Path::new("x.sqfs"), Context::LoneMount)
}

#[test]
fn options() {
    let o = parse(&[
        "rw,nofail,_netdev,uid=1000,gid=100,x-systemd.automount",
        "data_cache=64MiB,offset=4096,subdir=/usr/lib,timeout=2.5,allow_other",
    ])
    .unwrap();
    assert_eq!(o.uid, Some(1000));
    assert_eq!(o.gid, Some(100));
    assert_eq!(o.open.budgets.data_bytes, 64 << 20);
    assert_eq!(o.open.offset, 4096);
    assert_eq!(o.subdir.as_deref(), Some(Path::new("usr/lib")));
    assert_eq!(o.idle_timeout, Some(Duration::from_millis(2500)));
    assert!(o.allow_other);
    assert_eq!(o.fsname, "x.sqfs");
    assert!(o.gave("data_cache") && o.gave("uid") && !o.gave("threads"));
    assert!(o.gave_cache_budget());
}

#[test]
fn defaults_come_from_the_table() {
    let o = parse(&[]).unwrap();
    assert_eq!(o.open.budgets.metadata_bytes, 256 << 20);
    assert_eq!(o.open.budgets.data_bytes, 256 << 20);
    assert_eq!(o.open.budgets.compressed_bytes, 0);
    assert_eq!(o.read_ahead_bytes, 2 << 20);
    assert_eq!(o.open.offset, 0);
    assert!(!o.gave_cache_budget() && !o.gave("offset"));
    assert_eq!(o.flags, MountFlags::default());
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
    // The verity options' values are checked by their own tests (verity.rs).
    for spec in OPTIONS {
        let given = match spec.value {
            Value::Flag => spec.name.to_string(),
            Value::Size => format!("{}=1MiB", spec.name),
            Value::Number => format!("{}=3", spec.name),
            Value::Seconds => format!("{}=1.5", spec.name),
            // A choice (`auto|on|off`) takes one of its words; other text is a path or name.
            Value::Text(choice) if choice.contains('|') => {
                format!(
                    "{}={}",
                    spec.name,
                    choice.split('|').next().unwrap_or_default()
                )
            }
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
    for spec in all_options() {
        let head = format!("  {}{} ", spec.name, spec.value.placeholder());
        assert!(help.contains(&head), "{head:?} missing from\n{help}");
    }
    for ignored in IGNORED {
        assert!(help.contains(ignored), "{ignored}");
    }
}

#[test]
fn thread_defaults_depend_on_who_mounts_and_are_in_help() {
    let lone = parse(&[]).unwrap();
    let cores = squashd_core::cores();
    assert_eq!(lone.threads, cores.max(2));
    assert_eq!(lone.read_ahead_threads, cores);
    let daemon = Options::parse(&[], Path::new("x"), Context::Daemon).unwrap();
    assert_eq!((daemon.threads, daemon.read_ahead_threads), (1, 1));
    assert!(!daemon.gave("threads") && !daemon.gave("readahead_threads"));
    let given = Options::parse(&["threads=3".into()], Path::new("x"), Context::Daemon).unwrap();
    assert_eq!(given.threads, 3);
    let help = help();
    assert!(
        help.contains("[default: one per core, at least 2; 1 under serve]"),
        "{help}"
    );
    // The example config of the package says the same.
    let example = include_str!("../../../../packaging/serve.example.toml");
    assert!(
        example.contains("threads=N (default 1 under serve)"),
        "{example}"
    );
}

#[test]
fn flags_are_one_typed_set() {
    let o = parse(&["suid,noexec", "nosuid,noatime"]).unwrap();
    assert_eq!(
        o.flags,
        MountFlags {
            nosuid: true,
            nodev: true,
            noexec: true,
            noatime: true
        }
    );
    assert_eq!(o.fuse_config().flags, ["noexec", "noatime"]);
}

#[test]
fn each_path_gets_the_options_it_needs() {
    let o =
        parse(&["uid=7,gid=8,subdir=/a,readahead=1MiB,readahead_threads=3,allow_root"]).unwrap();
    let fuse = o.fuse_config();
    assert_eq!((fuse.uid, fuse.gid), (Some(7), Some(8)));
    assert_eq!(fuse.subdir.as_deref(), Some(Path::new("a")));
    assert_eq!(
        (fuse.read_ahead_bytes, fuse.read_ahead_threads),
        (1 << 20, 3)
    );
    assert!(fuse.allow_root && !fuse.allow_other);
    assert_eq!(fuse.fsname, "x.sqfs");
}

#[test]
fn an_old_name_sets_the_option_it_was_renamed_to() {
    let o = parse(&["prefetch_threads=3"]).unwrap();
    assert_eq!(o.read_ahead_threads, 3);
    assert!(o.gave("readahead_threads"));
    // Root-only under its old name too: the table's entry is the one applied.
    assert_eq!(
        o.gave_root_only().map(|(name, _)| name),
        Some("readahead_threads")
    );
    assert!(super::help().contains("prefetch_threads= (now readahead_threads=)"));
}
