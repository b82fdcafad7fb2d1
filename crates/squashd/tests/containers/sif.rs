//! Apptainer SIF files, written by testkit::sif from the layout pkg/sif publishes: a definition
//! file, the primary system partition holding a real mksquashfs image of the fixture tree, and
//! a data partition holding a second image. Read without an offset, `squashd ls -lR` must print
//! what `unsquashfs -lls` prints of the raw image, a mount must show what the kernel's squashfs
//! shows of the same file at the partition's offset; `--partition` / `partition=` choose the
//! other; damaged or encrypted SIF files are one line of error. Where siftool is installed, it
//! must read the writer's files alike and squashd must read siftool's.

use super::squashd;
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use testkit::sif::{self, Object, Sif};
use testkit::{Built, TreeOptions};

/// What the data partition's image holds.
const DATA_FILE: (&str, &[u8]) = ("note.txt", b"the data partition\n");

/// The SIF file `name` in `dir`, written from `objects`.
fn write(dir: &Path, name: &str, objects: &[Object]) -> (PathBuf, Sif) {
    let built = sif::build(objects);
    let path = dir.join(name);
    fs::write(&path, &built.bytes).unwrap();
    (path, built)
}

/// A definition file, `rootfs` as the primary system partition (id 2), `data` as a data
/// partition (id 3).
fn sif_of(dir: &Path, rootfs: &Path, data: &Path) -> (PathBuf, Sif) {
    write(
        dir,
        "app.sif",
        &[
            Object::deffile("Bootstrap: scratch\n"),
            Object::partition(
                "rootfs",
                sif::FS_SQUASHFS,
                sif::PART_PRIMSYS,
                fs::read(rootfs).unwrap(),
            ),
            Object::partition(
                "data",
                sif::FS_SQUASHFS,
                sif::PART_DATA,
                fs::read(data).unwrap(),
            ),
        ],
    )
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

fn lls(image: &Path) -> String {
    text(&testkit::unsquashfs(&[OsStr::new("-lls"), image.as_os_str()]).stdout)
}

#[test]
fn a_sif_file_is_read_without_an_offset() {
    if !testkit::have_squashfs_tools() {
        return;
    }
    let built = Built::new(&TreeOptions {
        huge_sparse: false,
        many_entries: 40,
    });
    let rootfs = built.image("zstd", &["-comp", "zstd"]);
    let data_dir = built.scratch("data");
    fs::create_dir_all(&data_dir).unwrap();
    let data = testkit::image_of_files(&data_dir, &[DATA_FILE], &[]);
    let (app, layout) = sif_of(built.dir.path(), &rootfs, &data);
    let (primary, second) = (layout.placed[1], layout.placed[2]);

    let ls = squashd(&[OsStr::new("ls"), OsStr::new("-lR"), app.as_os_str()]);
    assert!(ls.status.success(), "{ls:?}");
    assert_eq!(
        text(&ls.stdout),
        lls(&rootfs),
        "squashd ls -lR of the SIF file against unsquashfs -lls of its image"
    );
    let cat = squashd(&[OsStr::new("cat"), app.as_os_str(), OsStr::new("dup/one")]);
    assert!(cat.status.success(), "{cat:?}");
    assert_eq!(cat.stdout, fs::read(built.src.join("dup/one")).unwrap());
    let cat_partition = squashd(&[
        OsStr::new("cat"),
        OsStr::new("--partition"),
        OsStr::new("3"),
        app.as_os_str(),
        OsStr::new(DATA_FILE.0),
    ]);
    assert_eq!(cat_partition.stdout, DATA_FILE.1, "{cat_partition:?}");
    let ls_partition = squashd(&[
        OsStr::new("ls"),
        OsStr::new("-lR"),
        OsStr::new("--partition"),
        OsStr::new("3"),
        app.as_os_str(),
    ]);
    assert_eq!(text(&ls_partition.stdout), lls(&data), "{ls_partition:?}");

    // info names the container, the offset and the partition, and lists both partitions.
    let info = text(&squashd(&[OsStr::new("info"), app.as_os_str()]).stdout);
    let has = |line: &str| info.lines().any(|l| l == line);
    for expected in [
        format!("{:<24}Apptainer SIF", "container:"),
        format!("{:<24}{}", "offset:", primary.offset),
        format!("{:<24}2", "partition:"),
        format!(
            "{:<24}SquashFS, primary system, amd64, {} bytes at byte {}, \"rootfs\"",
            "  id 2:", primary.size, primary.offset
        ),
        format!(
            "{:<24}SquashFS, data, amd64, {} bytes at byte {}, \"data\"",
            "  id 3:", second.size, second.offset
        ),
    ] {
        assert!(has(&expected), "{expected:?} missing from\n{info}");
    }

    // An explicit offset wins: at 0 there is the SIF header, not an image.
    let at_zero = squashd(&[
        OsStr::new("ls"),
        OsStr::new("--offset"),
        OsStr::new("0"),
        app.as_os_str(),
    ]);
    assert_eq!(at_zero.status.code(), Some(1), "{at_zero:?}");
    // Both at once is a usage error.
    let both = squashd(&[
        OsStr::new("ls"),
        OsStr::new("--offset"),
        OsStr::new("0"),
        OsStr::new("--partition"),
        OsStr::new("3"),
        app.as_os_str(),
    ]);
    assert_eq!(both.status.code(), Some(2), "{both:?}");

    if !testkit::can_mount() {
        return;
    }
    let reference = kernel_view(&built, &app, primary.offset, &rootfs);
    let mnt = built.scratch("mnt-sif");
    fs::create_dir_all(&mnt).unwrap();
    let out = squashd(&[OsStr::new("mount"), app.as_os_str(), mnt.as_os_str()]);
    assert!(out.status.success(), "{out:?}");
    let mounted = testkit::walk_disk(&mnt);
    let expected = testkit::walk_disk(&reference.0);
    testkit::umount(&mnt);
    if let Some(k) = reference.1 {
        testkit::detach(&k);
    }
    testkit::assert_records_eq(&expected, &mounted, "squashd mount of the SIF file");

    // -o partition=3 serves the data partition.
    let out = squashd(&[
        OsStr::new("mount"),
        OsStr::new("-o"),
        OsStr::new("partition=3"),
        app.as_os_str(),
        mnt.as_os_str(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let read = fs::read(mnt.join(DATA_FILE.0));
    testkit::umount(&mnt);
    assert_eq!(read.unwrap(), DATA_FILE.1);
}

/// The kernel's squashfs mount of `file` at `offset` (returned with where to unmount it), or,
/// where the kernel cannot mount it, an unsquashfs extraction of `image`, saying so.
fn kernel_view(
    built: &Built,
    file: &Path,
    offset: u64,
    image: &Path,
) -> (PathBuf, Option<PathBuf>) {
    let kmnt = built.scratch("kernel-sif");
    fs::create_dir_all(&kmnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "squashfs", "-o"])
        .arg(format!("loop,ro,offset={offset}"))
        .arg(file)
        .arg(&kmnt)
        .status()
        .is_ok_and(|s| s.success());
    if mounted {
        (kmnt.clone(), Some(kmnt))
    } else {
        eprintln!("note: the kernel cannot mount squashfs here; comparing with unsquashfs -d");
        (built.extract(image), None)
    }
}

#[test]
fn a_damaged_or_encrypted_sif_file_is_one_line_of_error() {
    let dir = tempfile::tempdir().unwrap();
    let stand_in = || {
        let mut b = vec![0u8; 4096];
        b[..4].copy_from_slice(b"hsqs");
        b
    };
    let (_, encrypted) = write(
        dir.path(),
        "encrypted.sif",
        &[Object::partition(
            "rootfs",
            sif::FS_ENCRYPTED_SQUASHFS,
            sif::PART_PRIMSYS,
            stand_in(),
        )],
    );
    let data = |name: &str| Object::partition(name, sif::FS_SQUASHFS, sif::PART_DATA, stand_in());
    let (_, no_primary) = write(dir.path(), "choose.sif", &[data("a"), data("b")]);
    let mut past = no_primary.bytes.clone();
    let at = sif::HEADER_TABLE_OFFSET;
    past[at..at + 8].copy_from_slice(&(1i64 << 40).to_le_bytes());
    let mut overlapping = sif::build(&[data("a"), data("b")]);
    let second = Sif::descriptor_at(1) + sif::DESCRIPTOR_OFFSET;
    overlapping.poke_i64(second, overlapping.placed[0].offset as i64 + 16);
    for (name, bytes, why) in [
        (
            "encrypted.sif",
            encrypted.bytes,
            "is encrypted SquashFS: encrypted SIF partitions are not supported; decrypt the \
             image with apptainer first",
        ),
        (
            "choose.sif",
            no_primary.bytes,
            "no primary system partition; its SquashFS partitions: 1 (\"a\", SquashFS), \
             2 (\"b\", SquashFS); choose one with --partition ID",
        ),
        ("past.sif", past, "runs past the end"),
        ("overlapping.sif", overlapping.bytes, "overlap"),
    ] {
        let path = dir.path().join(name);
        fs::write(&path, bytes).unwrap();
        for command in ["info", "ls"] {
            let out = squashd(&[OsStr::new(command), path.as_os_str()]);
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{name}: {out:?}");
            assert_eq!(err.lines().count(), 1, "{name}: {err}");
            assert!(
                err.contains(name) && err.contains("Apptainer SIF") && err.contains(why),
                "{name}: {err}"
            );
        }
    }
    // A partition asked of a raw image.
    let raw = dir.path().join("raw.sqfs");
    fs::write(&raw, stand_in()).unwrap();
    let out = squashd(&[
        OsStr::new("info"),
        OsStr::new("--partition"),
        OsStr::new("1"),
        raw.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("not a SIF file"), "{out:?}");
}

/// siftool, from PATH or where `go install` puts it.
fn siftool() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(|h| Path::new(&h).join("go/bin/siftool"));
    [Some(PathBuf::from("siftool")), home]
        .into_iter()
        .flatten()
        .find(|p| {
            Command::new(p)
                .arg("version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

/// `siftool list`'s rows: (id, start, end, type column).
fn siftool_list(siftool: &Path, file: &Path) -> Vec<(u32, u64, u64, String)> {
    let out = Command::new(siftool)
        .arg("list")
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    text(&out.stdout)
        .lines()
        .filter_map(|line| {
            let cols: Vec<&str> = line.split('|').map(str::trim).collect();
            let (start, end) = cols.get(3)?.split_once('-')?;
            Some((
                cols[0].parse().ok()?,
                start.parse().ok()?,
                end.parse().ok()?,
                cols.get(4)?.to_string(),
            ))
        })
        .collect()
}

#[test]
fn siftool_and_squashd_read_each_others_sif_files() {
    let Some(siftool) = siftool() else {
        testkit::skip(
            "siftool is not installed (go install github.com/apptainer/sif/v2/cmd/siftool@latest)",
        );
        return;
    };
    if !testkit::have_squashfs_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let image = testkit::image_of_files(dir.path(), &[DATA_FILE], &[]);
    // siftool reads testkit's writer as it was written.
    let (ours, layout) = sif_of(dir.path(), &image, &image);
    let rows = siftool_list(&siftool, &ours);
    let expected: Vec<_> = layout
        .placed
        .iter()
        .zip([
            "Def.FILE",
            "FS (Squashfs/*System/amd64)",
            "FS (Squashfs/Data/amd64)",
        ])
        .map(|(p, kind)| (p.id, p.offset, p.offset + p.size, kind.to_string()))
        .collect();
    assert_eq!(rows, expected, "siftool list of testkit's SIF file");

    // squashd reads siftool's: the primary partition where siftool says it is.
    let theirs = dir.path().join("siftool.sif");
    let run = |args: &[&OsStr]| {
        let out = Command::new(&siftool).args(args).output().unwrap();
        assert!(out.status.success(), "siftool {args:?}: {out:?}");
    };
    run(&[OsStr::new("new"), theirs.as_os_str()]);
    run(&[
        OsStr::new("add"),
        theirs.as_os_str(),
        image.as_os_str(),
        OsStr::new("--datatype"),
        OsStr::new("4"),
        OsStr::new("--parttype"),
        OsStr::new("2"),
        OsStr::new("--partfs"),
        OsStr::new("1"),
        OsStr::new("--partarch"),
        OsStr::new("2"),
    ]);
    let rows = siftool_list(&siftool, &theirs);
    assert_eq!(rows.len(), 1, "{rows:?}");
    let info = squashd(&[OsStr::new("info"), OsStr::new("--json"), theirs.as_os_str()]);
    assert!(info.status.success(), "{info:?}");
    let info = text(&info.stdout);
    assert!(
        info.contains(&format!("\"offset\": {},", rows[0].1)) && info.contains("\"partition\": 1,"),
        "{info}"
    );
    let cat = squashd(&[
        OsStr::new("cat"),
        theirs.as_os_str(),
        OsStr::new(DATA_FILE.0),
    ]);
    assert_eq!(cat.stdout, DATA_FILE.1, "{cat:?}");
}
