//! The offline tools, run as a user runs them, on images the real mksquashfs builds from the
//! testkit fixture tree, compared with the real unsquashfs, getfattr and the source tree.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use testkit::{Built, Kind, TreeOptions};

fn squashd<S: AsRef<OsStr>>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_squashd"))
        .args(args)
        .env("TZ", "America/New_York")
        .output()
        .expect("run squashd")
}

fn ok<S: AsRef<OsStr>>(args: &[S]) -> Vec<u8> {
    let out = squashd(args);
    assert!(
        out.status.success(),
        "squashd {:?} failed: {}",
        args.iter()
            .map(|a| a.as_ref().to_owned())
            .collect::<Vec<_>>(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// unsquashfs with the same time zone as squashd (listings print local times).
fn unsquashfs<S: AsRef<OsStr>>(args: &[S]) -> Vec<u8> {
    let out = Command::new("unsquashfs")
        .args(args)
        .env("TZ", "America/New_York")
        .output()
        .expect("run unsquashfs");
    assert!(out.status.success(), "unsquashfs failed");
    out.stdout
}

/// One fixture tree and its default zstd image, shared by the tests of this file.
fn fixture() -> Option<&'static (Built, PathBuf)> {
    static FIXTURE: OnceLock<Option<(Built, PathBuf)>> = OnceLock::new();
    FIXTURE
        .get_or_init(|| {
            if !testkit::have_squashfs_tools() {
                return None;
            }
            let built = Built::new(&TreeOptions::default());
            let image = built.image("zstd", &["-comp", "zstd"]);
            Some((built, image))
        })
        .as_ref()
}

fn lines(bytes: &[u8]) -> Vec<&[u8]> {
    bytes.split(|&b| b == b'\n').collect()
}

/// Shows the first differing line when two outputs differ.
fn assert_same_output(ours: &[u8], theirs: &[u8], what: &str) {
    if ours == theirs {
        return;
    }
    let (a, b) = (lines(ours), lines(theirs));
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        if x != y {
            panic!(
                "{what}: line {} differs:\n  squashd:    {}\n  unsquashfs: {}",
                i + 1,
                x.escape_ascii(),
                y.escape_ascii()
            );
        }
    }
    panic!("{what}: {} lines vs {} lines", a.len(), b.len());
}

#[test]
fn ls_recursive_matches_unsquashfs_byte_for_byte() {
    let Some((_, image)) = fixture() else { return };
    for (ours, theirs) in [(["-lR"], ["-lls"]), (["-R"], ["-ls"])] {
        let a = ok(&[OsStr::new("ls"), OsStr::new(ours[0]), image.as_os_str()]);
        let b = unsquashfs(&[OsStr::new(theirs[0]), image.as_os_str()]);
        assert!(
            lines(&b).len() > 3000,
            "the listing covers the big directory"
        );
        assert_same_output(
            &a,
            &b,
            &format!("ls {} vs unsquashfs {}", ours[0], theirs[0]),
        );
    }
    // A subtree, with unsquashfs's leading directories, and another prefix.
    let a = ok(&[
        OsStr::new("ls"),
        OsStr::new("-lR"),
        OsStr::new("-d"),
        OsStr::new("out"),
        image.as_os_str(),
        OsStr::new("files"),
    ]);
    let b = unsquashfs(&[
        OsStr::new("-lls"),
        OsStr::new("-d"),
        OsStr::new("out"),
        image.as_os_str(),
        OsStr::new("files"),
    ]);
    assert_same_output(&a, &b, "ls -lR files");
}

#[test]
fn ls_recursive_matches_unsquashfs_for_other_layouts() {
    let Some((built, _)) = fixture() else { return };
    // Small blocks, uncompressed everything, no fragments: other inode and listing layouts.
    let image = built.image(
        "gzip-4k-noI",
        &[
            "-comp",
            "gzip",
            "-b",
            "4096",
            "-noI",
            "-noD",
            "-noF",
            "-no-fragments",
        ],
    );
    let a = ok(&[OsStr::new("ls"), OsStr::new("-lR"), image.as_os_str()]);
    let b = unsquashfs(&[OsStr::new("-lls"), image.as_os_str()]);
    assert_same_output(&a, &b, "ls -lR of a -b 4096 -noI -noD -noF image");
}

/// Mtimes whose local times are hard to get right: the epoch, DST changes in both hemispheres,
/// 2038 and the last u32 second, and 1971 (Africa/Monrovia's offset then had seconds).
const HARD_MTIMES: [u32; 10] = [
    0,
    31_536_000,
    63_000_000,
    1_710_054_000,
    1_730_613_600,
    1_743_865_200,
    2_147_483_647,
    2_147_483_648,
    4_000_000_000,
    u32::MAX,
];

#[test]
fn local_times_match_unsquashfs_and_date_in_any_time_zone() {
    if !testkit::have_squashfs_tools() {
        return testkit::skip("mksquashfs/unsquashfs not installed");
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    for (i, secs) in HARD_MTIMES.iter().enumerate() {
        let file = std::fs::File::create(src.join(format!("f{i}"))).unwrap();
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(u64::from(*secs));
        file.set_modified(t).unwrap();
    }
    let image = tmp.path().join("times.sqfs");
    testkit::mksquashfs(&src, &image, &[]);
    // Zone names, a zone with seconds in its offset, a half-hour DST, a path, a POSIX rule,
    // an empty TZ (UTC) and one that names nothing (UTC too).
    for tz in [
        "America/New_York",
        "Europe/Berlin",
        "Africa/Monrovia",
        "Australia/Lord_Howe",
        ":/usr/share/zoneinfo/Asia/Kolkata",
        "<+0330>-3:30",
        "",
        "No/Such_Zone",
    ] {
        let run = |program: &str, args: &[&OsStr]| {
            let out = Command::new(program)
                .args(args)
                .env("TZ", tz)
                .output()
                .unwrap();
            assert!(out.status.success(), "{program} {args:?} with TZ={tz:?}");
            out.stdout
        };
        let ours = run(
            env!("CARGO_BIN_EXE_squashd"),
            &[OsStr::new("ls"), OsStr::new("-lR"), image.as_os_str()],
        );
        let theirs = run("unsquashfs", &[OsStr::new("-lls"), image.as_os_str()]);
        assert_same_output(&ours, &theirs, &format!("ls -lR with TZ={tz:?}"));
        // stat prints what GNU date (the same strftime as stat(1)) prints.
        for (i, secs) in HARD_MTIMES.iter().enumerate() {
            let ours = run(
                env!("CARGO_BIN_EXE_squashd"),
                &[
                    OsStr::new("stat"),
                    image.as_os_str(),
                    OsStr::new(&format!("f{i}")),
                ],
            );
            let date = run(
                "date",
                &[
                    OsStr::new("-d"),
                    OsStr::new(&format!("@{secs}")),
                    OsStr::new("+Modify: %Y-%m-%d %H:%M:%S %z"),
                ],
            );
            let date = String::from_utf8(date).unwrap();
            let ours = String::from_utf8(ours).unwrap();
            assert!(
                ours.lines().any(|l| l == date.trim_end()),
                "TZ={tz:?}, {secs}: date says {date:?}, squashd stat:\n{ours}"
            );
        }
    }
}

#[test]
fn ls_of_a_directory_lists_its_names() {
    let Some((built, image)) = fixture() else {
        return;
    };
    for dir in [&b""[..], b"big", b"\xff\xfe-dir", b"empty"] {
        let mut expected: Vec<Vec<u8>> = std::fs::read_dir(built.src.join(OsStr::from_bytes(dir)))
            .unwrap()
            .map(|e| e.unwrap().file_name().as_bytes().to_vec())
            .collect();
        expected.sort();
        let out = ok(&[OsStr::new("ls"), image.as_os_str(), OsStr::from_bytes(dir)]);
        let got: Vec<Vec<u8>> = lines(&out)
            .into_iter()
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        assert_eq!(got, expected, "ls of {}", dir.escape_ascii());
    }
    // Long form: the same columns as unsquashfs -lls, with bare names.
    let out = ok(&[
        OsStr::new("ls"),
        OsStr::new("-l"),
        image.as_os_str(),
        OsStr::new("one"),
    ]);
    let theirs = unsquashfs(&[
        OsStr::new("-lls"),
        image.as_os_str(),
        OsStr::new("one/only"),
    ]);
    let their_line = lines(&theirs)[2].to_vec();
    let expected = String::from_utf8(their_line)
        .unwrap()
        .replace("squashfs-root/one/", "");
    assert_eq!(String::from_utf8(out).unwrap(), format!("{expected}\n"));
}

#[test]
fn cat_writes_the_source_bytes() {
    let Some((built, image)) = fixture() else {
        return;
    };
    let records = testkit::walk_disk(&built.src);
    let files: Vec<&[u8]> = records
        .iter()
        .filter(|r| r.kind == Kind::File)
        .map(|r| &r.path[..])
        .collect();
    assert!(files.len() > 100);
    let mut args = vec![OsStr::new("cat"), image.as_os_str()];
    args.extend(files.iter().map(|p| OsStr::from_bytes(p)));
    let out = ok(&args);
    let mut expected = Vec::new();
    for p in &files {
        expected.extend(std::fs::read(built.src.join(OsStr::from_bytes(p))).unwrap());
    }
    assert!(out == expected, "cat of every file differs from the source");
    // And a sparse file alone, against unsquashfs -cat.
    let ours = ok(&[
        OsStr::new("cat"),
        image.as_os_str(),
        OsStr::new("sparse/middle"),
    ]);
    let theirs = unsquashfs(&[
        OsStr::new("-cat"),
        image.as_os_str(),
        OsStr::new("sparse/middle"),
    ]);
    assert!(
        ours == theirs,
        "cat of sparse/middle differs from unsquashfs -cat"
    );
}

#[test]
fn cat_reports_bad_paths_and_goes_on() {
    let Some((_, image)) = fixture() else { return };
    let out = squashd(&[
        OsStr::new("cat"),
        image.as_os_str(),
        OsStr::new("files"),
        OsStr::new("no/such"),
        OsStr::new("a"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(out.stdout, b"A");
    let err = String::from_utf8(out.stderr).unwrap();
    let err: Vec<&str> = err.lines().collect();
    assert_eq!(err.len(), 2, "{err:?}");
    assert!(err[0].starts_with("squashd: ") && err[0].ends_with("files: is a directory"));
    assert!(
        err[1].ends_with("no/such: no such file or directory"),
        "{}",
        err[1]
    );
}

/// getfattr's `name=0x...` lines for `path`.
fn getfattr_hex(path: &Path) -> Option<Vec<String>> {
    let out = Command::new("getfattr")
        .args(["-d", "-m", "-", "-e", "hex", "--absolute-names"])
        .arg(path)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    lines.sort();
    Some(lines)
}

#[test]
fn xattr_matches_getfattr_on_the_unsquashfs_extraction() {
    let Some((built, image)) = fixture() else {
        return;
    };
    if !testkit::have_tool("getfattr") {
        return testkit::skip("getfattr is not installed");
    }
    let extracted = built.extract(image);
    let mut checked = 0;
    for rel in [
        "xattr",
        "xattr/basic",
        "xattr/large",
        "xattr/many",
        "xattr/sameset-2",
        "a",
    ] {
        let Some(expected) = getfattr_hex(&extracted.join(rel)) else {
            return testkit::skip("getfattr failed");
        };
        let out = ok(&[
            OsStr::new("xattr"),
            OsStr::new("--hex"),
            image.as_os_str(),
            OsStr::new(rel),
        ]);
        let mut got: Vec<String> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        got.sort();
        assert_eq!(got, expected, "xattrs of {rel}");
        checked += expected.len();
    }
    assert!(checked > 40);
    // Text form and one raw value.
    let out = ok(&[
        OsStr::new("xattr"),
        image.as_os_str(),
        OsStr::new("xattr/basic"),
    ]);
    let text = String::from_utf8(out).unwrap();
    assert!(text.lines().any(|l| l == "user.small=\"v\""), "{text}");
    assert!(text.lines().any(|l| l == "user.empty=\"\""), "{text}");
    let raw = ok(&[
        OsStr::new("xattr"),
        image.as_os_str(),
        OsStr::new("xattr/large"),
        OsStr::new("--name"),
        OsStr::new("user.big"),
    ]);
    let expected = xattr::get(built.src.join("xattr/large"), "user.big")
        .unwrap()
        .unwrap();
    assert_eq!(raw, expected);
    let missing = squashd(&[
        OsStr::new("xattr"),
        image.as_os_str(),
        OsStr::new("a"),
        OsStr::new("--name"),
        OsStr::new("user.none"),
    ]);
    assert_eq!(missing.status.code(), Some(1));
}

/// The value after `key` in `unsquashfs -s` output lines like "Block size 131072".
fn field<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key:?} in:\n{text}"))
        .trim()
}

#[test]
fn info_agrees_with_unsquashfs_s() {
    let Some((built, image)) = fixture() else {
        return;
    };
    let xz = built.image(
        "xz-noexp",
        &[
            "-comp",
            "xz",
            "-Xbcj",
            "x86",
            "-no-exports",
            "-no-xattrs",
            "-b",
            "1M",
        ],
    );
    let no_fragments = built.image("nofrag", &["-no-fragments"]);
    let variants = [
        ("zstd", image.clone()),
        ("xz-noexp", xz.clone()),
        ("nofrag", no_fragments),
    ];
    for (name, image) in variants {
        let theirs = String::from_utf8(unsquashfs(&[OsStr::new("-s"), image.as_os_str()])).unwrap();
        let ours = String::from_utf8(ok(&[OsStr::new("info"), image.as_os_str()])).unwrap();
        let ours_field = |k: &str| field(&ours, &format!("{k}:")).to_string();
        assert_eq!(
            ours_field("compressor"),
            field(&theirs, "Compression"),
            "{name}"
        );
        assert_eq!(
            ours_field("block size").split(' ').next().unwrap(),
            field(&theirs, "Block size")
        );
        assert_eq!(ours_field("inodes"), field(&theirs, "Number of inodes"));
        assert_eq!(
            ours_field("fragments"),
            field(&theirs, "Number of fragments")
        );
        assert_eq!(ours_field("ids"), field(&theirs, "Number of ids"));
        let size = field(&theirs, "Filesystem size").split(' ').next().unwrap();
        assert!(
            ours_field("image size").starts_with(&format!("{size} bytes")),
            "{name}"
        );
        let exportable = theirs.contains("Filesystem is exportable via NFS");
        assert_eq!(
            ours_field("export table") == "present",
            exportable,
            "{name}"
        );
        assert_eq!(
            ours_field("flags").split(' ').any(|f| f == "exportable"),
            exportable
        );
        let duplicates = theirs.contains("Duplicates are removed");
        assert_eq!(
            ours_field("flags").split(' ').any(|f| f == "duplicates"),
            duplicates
        );
        let no_xattrs = !theirs.contains("Xattrs are compressed")
            && !theirs.contains("Xattrs are stored uncompressed");
        assert_eq!(
            ours_field("xattr table") == "absent",
            no_xattrs,
            "{name}: {theirs}"
        );
        // The fragment table's position, read from the superblock's bytes (offset 80), only
        // when the image has fragments: without them the field holds no table's position.
        let fragments: u64 = field(&theirs, "Number of fragments").parse().unwrap();
        let raw = std::fs::read(&image).unwrap();
        let start = u64::from_le_bytes(raw[80..88].try_into().unwrap());
        let expected = if fragments > 0 {
            start.to_string()
        } else {
            "absent".to_string()
        };
        assert_eq!(ours_field("fragment table at"), expected, "{name}");
    }
    let ours = String::from_utf8(ok(&[OsStr::new("info"), xz.as_os_str()])).unwrap();
    assert!(
        ours.contains("x86"),
        "xz options show the BCJ filter:\n{ours}"
    );
}

/// `info --json` is one JSON object whose counts, sizes, compressor and flags are those
/// `unsquashfs -s` reports, for images with and without exports, xattrs and options.
#[test]
fn info_json_agrees_with_unsquashfs_s() {
    let Some((built, image)) = fixture() else {
        eprintln!("SKIPPED: squashfs-tools are not installed");
        return;
    };
    let gzip = built.image(
        "gzip-noexp",
        &[
            "-comp",
            "gzip",
            "-Xcompression-level",
            "4",
            "-no-exports",
            "-no-xattrs",
            "-b",
            "64K",
        ],
    );
    for (name, image) in [("zstd", image.clone()), ("gzip-noexp", gzip)] {
        let theirs = String::from_utf8(unsquashfs(&[OsStr::new("-s"), image.as_os_str()])).unwrap();
        let out = ok(&[OsStr::new("info"), OsStr::new("--json"), image.as_os_str()]);
        let ours: serde_json::Value = serde_json::from_slice(&out).unwrap_or_else(|e| {
            panic!("{name}: not JSON ({e}):\n{}", String::from_utf8_lossy(&out))
        });
        let number = |k: &str| {
            ours[k]
                .as_u64()
                .unwrap_or_else(|| panic!("{name}: {k} is not a number in {ours}"))
                .to_string()
        };
        let yes = |k: &str| {
            ours[k]
                .as_bool()
                .unwrap_or_else(|| panic!("{name}: {k} in {ours}"))
        };
        assert_eq!(ours["compressor"], field(&theirs, "Compression"), "{name}");
        assert_eq!(number("block_size"), field(&theirs, "Block size"), "{name}");
        assert_eq!(
            number("inodes"),
            field(&theirs, "Number of inodes"),
            "{name}"
        );
        assert_eq!(
            number("fragments"),
            field(&theirs, "Number of fragments"),
            "{name}"
        );
        assert_eq!(number("ids"), field(&theirs, "Number of ids"), "{name}");
        let size = field(&theirs, "Filesystem size").split(' ').next().unwrap();
        assert_eq!(number("image_size"), size, "{name}");
        let exportable = theirs.contains("Filesystem is exportable via NFS");
        assert_eq!(yes("export_table"), exportable, "{name}");
        assert_eq!(ours["tables"]["export"].is_null(), !exportable, "{name}");
        let flags: Vec<&str> = ours["flags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        assert_eq!(flags.contains(&"exportable"), exportable, "{name}");
        assert_eq!(
            flags.contains(&"duplicates"),
            theirs.contains("Duplicates are removed"),
            "{name}"
        );
        let xattrs = theirs.contains("Xattrs are compressed")
            || theirs.contains("Xattrs are stored uncompressed");
        assert_eq!(yes("xattr_table"), xattrs, "{name}: {theirs}");
        assert_eq!(
            ours["compressed"]["data"].as_bool(),
            Some(theirs.contains("Data is compressed")),
            "{name}"
        );
        let options = &ours["compressor_options"];
        if name == "gzip-noexp" {
            assert_eq!(options["compression-level"], "4", "{name}: {ours}");
        } else {
            assert!(options.is_null(), "{name}: no options block: {ours}");
        }
    }
}

#[test]
fn stat_shows_the_source_attributes() {
    let Some((built, image)) = fixture() else {
        return;
    };
    use std::os::unix::fs::MetadataExt;
    for rel in ["files/rand-131073", "sparse/middle", "one", "xattr/basic"] {
        let md = std::fs::symlink_metadata(built.src.join(rel)).unwrap();
        let out = String::from_utf8(ok(&[
            OsStr::new("stat"),
            image.as_os_str(),
            OsStr::new(rel),
        ]))
        .unwrap();
        assert!(out.contains(&format!("File: {rel}")), "{out}");
        assert!(
            out.contains(&format!("Access: ({:04o}/", md.mode() & 0o7777)),
            "{out}"
        );
        assert!(out.contains(&format!("Links: {}", md.nlink())), "{out}");
        assert!(out.contains(&format!("Uid: ({:>5}/", md.uid())), "{out}");
        if md.is_file() {
            assert!(out.contains(&format!("Size: {:<15}", md.size())), "{out}");
        }
    }
    let out = String::from_utf8(ok(&[
        OsStr::new("stat"),
        image.as_os_str(),
        OsStr::new("xattr/basic"),
    ]))
    .unwrap();
    assert!(out.contains("user.small"), "{out}");
}

#[test]
fn a_missing_image_is_one_line_with_the_os_error_once() {
    for command in ["info", "ls", "stat"] {
        let mut args = vec![command, "/nonexistent"];
        if command == "stat" {
            args.push("/");
        }
        let out = squashd(&args);
        assert_eq!(out.status.code(), Some(1), "{command}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            err.starts_with("squashd: /nonexistent: ")
                && err.ends_with(": No such file or directory (os error 2)\n"),
            "{command}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{command}: {err}");
        assert_eq!(
            err.matches("No such file or directory").count(),
            1,
            "{command}: {err}"
        );
    }
}

#[test]
fn errors_are_one_line_with_the_right_exit_status() {
    let Some((_, image)) = fixture() else { return };
    let out = squashd(&["ls", "/nonexistent/image.sqfs"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("squashd: /nonexistent/image.sqfs: "),
        "{err}"
    );
    let out = squashd(&[
        OsStr::new("stat"),
        image.as_os_str(),
        OsStr::new("no/such/path"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8(out.stderr).unwrap().lines().count(), 1);
    // Not an image at all.
    let out = squashd(&["info", "/proc/self/exe"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("not a SquashFS image"));
    for bad in [&["ls"][..], &["ls", "--bogus", "x"], &["frobnicate"]] {
        assert_eq!(squashd(bad).status.code(), Some(2), "{bad:?}");
    }
    assert!(squashd(&["extract", "--help"]).status.success());
}

#[test]
fn offset_reads_an_embedded_image() {
    let Some((built, image)) = fixture() else {
        return;
    };
    let embedded = built.scratch("embedded.bin");
    let mut bytes = vec![0x5au8; 12345];
    bytes.extend(std::fs::read(image).unwrap());
    std::fs::write(&embedded, bytes).unwrap();
    let plain = ok(&[OsStr::new("ls"), OsStr::new("-lR"), image.as_os_str()]);
    let shifted = ok(&[
        OsStr::new("ls"),
        OsStr::new("-lR"),
        OsStr::new("--offset"),
        OsStr::new("12345"),
        embedded.as_os_str(),
    ]);
    assert!(plain == shifted);
    let a = ok(&[
        OsStr::new("cat"),
        OsStr::new("-o"),
        OsStr::new("12345"),
        embedded.as_os_str(),
        OsStr::new("files/rand-1048577"),
    ]);
    assert_eq!(
        a,
        std::fs::read(built.src.join("files/rand-1048577")).unwrap()
    );
    assert_eq!(
        squashd(&[OsStr::new("ls"), embedded.as_os_str()])
            .status
            .code(),
        Some(1)
    );
}

/// `squashd <args>`, asserted to be a usage error: exit status 2 and one line on stderr that
/// starts with "squashd: " and holds `says`.
fn assert_usage_error<S: AsRef<OsStr>>(args: &[S], says: &str) {
    let out = squashd(args);
    let shown: Vec<_> = args.iter().map(|a| a.as_ref().to_owned()).collect();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{shown:?}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{shown:?}: {stderr}");
    assert!(stderr.starts_with("squashd: "), "{shown:?}: {stderr}");
    assert!(
        stderr.contains(says),
        "{shown:?}: {stderr:?} should say {says:?}"
    );
}

#[test]
fn usage_errors_exit_2_with_one_line() {
    let Some((built, image)) = fixture() else {
        return;
    };
    let image = image.to_str().unwrap();
    let dir = built.scratch("usage-mnt");
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.to_str().unwrap();
    let out = built.scratch("usage-out");
    let out = out.to_str().unwrap();
    assert_usage_error(&["mount", image, dir, "-o", "bogus"], "\"bogus\"");
    assert_usage_error(&["mount", image, dir, "-o", "ro,uid=x"], "uid");
    assert_usage_error(&["mount", image, dir, "-o", "timeout=-1"], "timeout");
    assert_usage_error(&["mount", image, dir, "-o", "data_cache"], "data_cache");
    // attach checks its options before it asks the daemon (none runs here).
    assert_usage_error(
        &[
            "attach",
            image,
            dir,
            "-o",
            "bogus",
            "--socket",
            "/nonexistent.sock",
        ],
        "\"bogus\"",
    );
    assert_usage_error(&["mount", image], "<MOUNTPOINT>");
    assert_usage_error(&["mount"], "<IMAGE>");
    assert_usage_error(&["extract", image, "../etc", "-d", out], "'..'");
    assert_usage_error(&["extract", image, "files/../../x", "-d", out], "'..'");
    assert!(!Path::new(out).exists(), "a refused extract made {out}");
    assert_usage_error(&["extract"], "<IMAGE>");
    assert_usage_error(&["frobnicate"], "frobnicate");
    assert_usage_error(&["ls", "--bogus", image], "--bogus");
}

/// The option names a README bullet list mentions in backquotes (`name=` or `name`), from the
/// line starting with `start` to the line starting with `end`.
fn readme_options(start: &str, end: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let from = readme.find(start).expect("the options list in README.md");
    let to = from
        + readme[from..]
            .find(end)
            .expect("the end of the options list");
    readme[from..to]
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|quoted| quoted.split('=').next().unwrap_or_default().to_string())
        .filter(|name| !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .collect()
}

#[test]
fn mount_help_lists_every_option_the_readme_and_the_parser_know() {
    let help = squashd(&["mount", "--help"]);
    assert!(help.status.success());
    let help = String::from_utf8(help.stdout).unwrap();
    // The table's rows: "  name=VALUE   help" or "  name   help".
    let rows: Vec<(&str, &str)> = help
        .lines()
        .skip_while(|l| !l.starts_with("Mount options"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| {
            let head = l.split_whitespace().next().unwrap();
            head.split_once('=').unwrap_or((head, ""))
        })
        .collect();
    assert!(rows.len() > 15, "{help}");
    let ignored = help
        .lines()
        .find(|l| l.starts_with("Accepted and ignored"))
        .expect("the ignored options");
    let old_names = help
        .lines()
        .find(|l| l.starts_with("Old names, still accepted"))
        .expect("the old names of options");
    let readme = readme_options("- **Options**", "- **Readiness:**");
    assert!(readme.len() > 15, "{readme:?}");
    for name in &readme {
        let listed = rows.iter().any(|(n, _)| n == name)
            || ignored.split([' ', ',', ':']).any(|w| w == name)
            || old_names.contains(&format!("{name}= (now "));
        assert!(
            listed,
            "README.md lists {name}, squashd mount --help does not"
        );
    }
    for (name, _) in &rows {
        assert!(
            readme.contains(&name.to_string()),
            "squashd mount --help lists {name}, README.md does not"
        );
    }
    // The parser takes every option the help lists: with a mount point that is not a
    // directory, an accepted option reaches that check (exit 1), a refused one is a usage
    // error (exit 2).
    let Some((_, image)) = fixture() else {
        return;
    };
    for (name, value) in &rows {
        let option = match *value {
            "" => name.to_string(),
            "SIZE" => format!("{name}=1MiB"),
            "N" => format!("{name}=2"),
            "SECONDS" => format!("{name}=1.5"),
            "BYTES" => format!("{name}=4096"),
            // The verity options' values (checked further by tests/verity.rs).
            "MODE" => format!("{name}=auto"),
            "HEX" => format!("{name}={}", "ab".repeat(32)),
            "ALG" => format!("{name}=sha256"),
            // A choice (`auto|on|off`): its first.
            choice if choice.contains('|') => {
                format!("{name}={}", choice.split('|').next().unwrap_or_default())
            }
            _ => format!("{name}=x"),
        };
        let out = squashd(&[
            OsStr::new("mount"),
            image.as_os_str(),
            OsStr::new("/nonexistent/mount/point"),
            OsStr::new("-o"),
            OsStr::new(&option),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "-o {option}: {stderr}");
        assert!(stderr.contains("not a directory"), "-o {option}: {stderr}");
    }
}
