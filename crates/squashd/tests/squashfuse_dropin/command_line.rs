//! The command line of squashd as `squashfuse_ll` and `squashfuse` against the real ones:
//! the exit statuses a caller tells failures apart by, `-h` and `-V`, and escapes in `-o` lists.

use super::*;

/// The failures a caller tells apart by exit status.
#[test]
fn failures_exit_as_squashfuse_ll_does() {
    let Some(fx) = fixture(100) else { return };
    let junk = fx.built.scratch("junk");
    fs::write(&junk, vec![0x5a; 65536]).unwrap();
    let mnt = fx.built.scratch("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let missing = fx.built.scratch("missing-dir");
    let image = &fx.image;
    // (Not a regular file as the mount point: libfuse mounts on it, as a file.)
    let cases: [(&str, Vec<OsString>, i32); 9] = [
        ("bad image", args(&[&junk, &mnt]), 255),
        ("missing image", args(&[&missing, &mnt]), 255),
        ("missing mount point", args(&[image, &missing]), 2),
        (
            "unknown option",
            args(&[&"-o", &"no_such_option", image, &mnt]),
            1,
        ),
        ("unknown flag", args(&[&"-x", image, &mnt]), 1),
        (
            "bad offset value",
            args(&[&"-o", &"offset=ten", image, &mnt]),
            2,
        ),
        ("one operand too many", args(&[image, &mnt, &"extra"]), 2),
        ("no mount point", args(&[image]), 2),
        ("nothing", args(&[]), 2),
    ];
    for (what, list, expected) in cases {
        let _guard = Mounted {
            mnt: mnt.clone(),
            child: None,
        };
        let real = run(&fx.real, &list);
        let ours = run(&fx.ours, &list);
        assert_eq!(
            normalized(real.0),
            expected,
            "{what}: squashfuse_ll {list:?}: {}",
            real.1
        );
        assert_eq!(ours.0, expected, "{what}: squashd {list:?}: {}", ours.1);
        assert!(!is_mounted(&mnt), "{what}: mounted");
        assert_eq!(
            ours.1.lines().count(),
            1,
            "{what}: one line of error: {}",
            ours.1
        );
    }
}

/// As `squashfuse` (libfuse's high-level interface): its exit statuses, and `uid=0` taken as
/// an owner (where squashfuse_ll ignores it).
#[test]
fn as_squashfuse_high_level() {
    let Some(fx) = fixture(100) else { return };
    let Some(real) = real_program("SQUASHFUSE", "squashfuse") else {
        testkit::skip("squashfuse is not installed (apt install squashfuse)");
        return;
    };
    let ours = symlink_as(&fx.built, "squashfuse");
    let owners = |mnt: &Path| -> Vec<(Vec<u8>, u32, u32)> {
        testkit::walk_disk(mnt)
            .into_iter()
            .map(|r| (r.path, r.uid, r.gid))
            .collect()
    };
    let (real_mnt, our_mnt) = (fx.built.scratch("real"), fx.built.scratch("ours"));
    let _real = mount(&real, "uid=0,gid=0", &fx.image, &real_mnt);
    let _ours = mount(&ours, "uid=0,gid=0", &fx.image, &our_mnt);
    let expected = owners(&real_mnt);
    assert!(expected.iter().all(|&(_, uid, gid)| (uid, gid) == (0, 0)));
    assert_eq!(expected, owners(&our_mnt), "owners with uid=0,gid=0");

    let junk = fx.built.scratch("junk");
    fs::write(&junk, vec![0x5a; 65536]).unwrap();
    let mnt = fx.built.scratch("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let missing = fx.built.scratch("missing-dir");
    let image = &fx.image;
    for (what, list, expected) in [
        ("bad image", args(&[&junk, &mnt]), 255),
        ("missing mount point", args(&[image, &missing]), 1),
        ("no mount point", args(&[image]), 2),
        (
            "unknown option",
            args(&[&"-o", &"no_such_option", image, &mnt]),
            3,
        ),
        // sqfs_usage's -2, returned from main as it is.
        ("nothing", args(&[]), 254),
        ("one operand too many", args(&[image, &mnt, &"extra"]), 254),
        (
            "bad offset value",
            args(&[&"-o", &"offset=ten", image, &mnt]),
            254,
        ),
        ("-h", args(&[&"-h", image, &mnt]), 254),
        ("--help", args(&[&"--help"]), 254),
        ("-V alone", args(&[&"-V"]), 254),
        ("-V with a bad image", args(&[&"-V", &junk, &mnt]), 255),
        (
            "-V with a missing mount point",
            args(&[&"-V", image, &missing]),
            1,
        ),
    ] {
        let _guard = Mounted {
            mnt: mnt.clone(),
            child: None,
        };
        let (real_code, real_err) = run(&real, &list);
        let (our_code, our_err) = run(&ours, &list);
        assert_eq!(real_code, expected, "{what}: squashfuse: {real_err}");
        assert_eq!(
            our_code, expected,
            "{what}: squashd as squashfuse: {our_err}"
        );
    }
}

/// `-V`, `-h` and no arguments: as squashfuse_ll, usage errors (2) but for `-V` with operands,
/// which it ignores and mounts; as squashfuse, usage errors (254) but for `-V` with an archive
/// that opens, which prints the version and mounts nothing (0).
#[test]
fn help_and_version_exit_as_squashfuse_does() {
    let Some(fx) = fixture(100) else { return };
    let mnt = fx.built.scratch("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let image = &fx.image;
    for (what, list) in [
        ("-h", args(&[&"-h"])),
        ("--help", args(&[&"--help", image, &mnt])),
        ("-V alone", args(&[&"-V"])),
        ("--version alone", args(&[&"--version"])),
        ("nothing", args(&[])),
    ] {
        let real = run(&fx.real, &list);
        let ours = run(&fx.ours, &list);
        assert_eq!(normalized(real.0), 2, "{what}: squashfuse_ll: {}", real.1);
        assert_eq!(ours.0, 2, "{what}: squashd as squashfuse_ll: {}", ours.1);
        assert!(!is_mounted(&mnt), "{what}: mounted");
    }
    let real_mnt = fx.built.scratch("real");
    let our_mnt = fx.built.scratch("ours");
    fs::create_dir_all(&real_mnt).unwrap();
    fs::create_dir_all(&our_mnt).unwrap();
    for (program, mnt) in [(&fx.real, &real_mnt), (&fx.ours, &our_mnt)] {
        let list = args(&[&"-V", image, mnt]);
        let _guard = Mounted {
            mnt: mnt.clone(),
            child: None,
        };
        let (code, stderr) = run(program, &list);
        assert_eq!(code, 0, "{} {list:?}: {stderr}", program.display());
        assert!(is_mounted(mnt), "{} -V mounts", program.display());
    }

    let Some(real) = real_program("SQUASHFUSE", "squashfuse") else {
        testkit::skip("squashfuse is not installed (apt install squashfuse)");
        return;
    };
    let ours = symlink_as(&fx.built, "squashfuse");
    for program in [&real, &ours] {
        let list = args(&[&"-V", image, &mnt]);
        let out = Command::new(program)
            .args(&list)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{} {list:?}", program.display());
        assert!(
            !stdout.is_empty(),
            "{} -V prints a version",
            program.display()
        );
        assert!(!is_mounted(&mnt), "{} -V mounts nothing", program.display());
    }
    let (code, _) = run(&ours, &args(&[&"-V"]));
    assert_eq!(code, 254, "squashd as squashfuse -V alone");
}

/// In an `-o` list, `\,` (or `\054`) is a comma in the option's value, as libfuse reads it, and
/// that value is never split again: `subdir=a\,allow_other` mounts the directory
/// `a,allow_other`, not `a` with allow_other.
#[test]
fn an_escaped_comma_stays_in_its_value() {
    let Some(fx) = fixture(100) else { return };
    let src = fx.built.scratch("comma-src");
    fs::create_dir_all(src.join("a")).unwrap();
    fs::create_dir_all(src.join("a,allow_other")).unwrap();
    fs::write(src.join("a").join("in-a"), "a\n").unwrap();
    fs::write(src.join("a,allow_other").join("in-comma"), "comma\n").unwrap();
    let image = fx.built.scratch("comma.sqfs");
    testkit::mksquashfs(&src, &image, &[]);
    // squashfuse 0.1.x has no subdir=: the tree is then compared with the source's.
    let real_has_subdir = real_takes(&fx, "subdir=.");
    for (n, option) in [r"subdir=a\,allow_other", r"subdir=a\054allow_other"]
        .into_iter()
        .enumerate()
    {
        let our_mnt = fx.built.scratch(&format!("comma-ours-{n}"));
        let _ours = mount(&fx.ours, option, &image, &our_mnt);
        assert_eq!(
            fs::read_to_string(our_mnt.join("in-comma")).ok().as_deref(),
            Some("comma\n"),
            "{option}: the directory a,allow_other is mounted"
        );
        assert!(
            !our_mnt.join("in-a").exists(),
            "{option}: not the directory a"
        );
        let line = fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .find(|l| l.split(' ').nth(4) == Some(&*our_mnt.to_string_lossy()))
            .map(str::to_string)
            .unwrap();
        assert!(!line.contains("allow_other"), "{option}: {line}");
        if real_has_subdir {
            let real_mnt = fx.built.scratch(&format!("comma-real-{n}"));
            let _real = mount(&fx.real, option, &image, &real_mnt);
            testkit::assert_records_eq(
                &testkit::walk_disk(&real_mnt),
                &testkit::walk_disk(&our_mnt),
                option,
            );
        }
    }
}
