//! The SIF parser against files from testkit's writer (the layout pkg/sif publishes), sound and
//! damaged. The images in them are stand-ins: a superblock's magic and `bytes_used`, which is
//! all that locating reads; the integration tests use real mksquashfs images.

use super::types::{arch, name};
use super::*;
use crate::container::{locate, Bytes, Container, Located};
use testkit::sif::{self as writer, Object, Sif};

/// A stand-in image of `len` bytes whose superblock claims `bytes_used`.
fn image(bytes_used: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    b[..4].copy_from_slice(b"hsqs");
    b[40..48].copy_from_slice(&bytes_used.to_le_bytes());
    b
}

/// A definition file, the primary system partition (id 2) and a data partition (id 3).
fn three() -> Sif {
    writer::build(&[
        Object::deffile("Bootstrap: scratch\n"),
        Object::partition(
            "rootfs",
            writer::FS_SQUASHFS,
            writer::PART_PRIMSYS,
            image(5000, 8192),
        ),
        Object::partition(
            "data",
            writer::FS_SQUASHFS,
            writer::PART_DATA,
            image(100, 4096),
        ),
    ])
}

fn found(sif: &Sif, partition: Option<u32>) -> Located {
    locate(&Bytes(sif.bytes.clone()), partition).unwrap()
}

fn error(sif: &Sif, partition: Option<u32>) -> String {
    let e = locate(&Bytes(sif.bytes.clone()), partition)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("Apptainer SIF: "), "{e}");
    assert!(!e.contains('\n'), "{e}");
    e
}

#[test]
fn the_primary_system_partition_is_found_and_every_partition_listed() {
    let sif = three();
    let got = found(&sif, None);
    assert_eq!(got.container, Container::Sif);
    assert_eq!(got.partition, Some(2));
    assert_eq!(got.offset, sif.placed[1].offset);
    assert_eq!(got.offset % 4096, 0);
    let listed: Vec<_> = got
        .partitions
        .iter()
        .map(|p| {
            (
                p.id,
                p.name.as_str(),
                p.fs,
                p.kind,
                p.arch,
                p.offset,
                p.size,
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            (
                2,
                "rootfs",
                FsType::Squashfs,
                PartType::PrimarySystem,
                "amd64",
                sif.placed[1].offset,
                8192
            ),
            (
                3,
                "data",
                FsType::Squashfs,
                PartType::Data,
                "amd64",
                sif.placed[2].offset,
                4096
            ),
        ]
    );
}

#[test]
fn a_partition_is_chosen_by_its_id() {
    let sif = three();
    let got = found(&sif, Some(3));
    assert_eq!((got.partition, got.offset), (Some(3), sif.placed[2].offset));
    let e = error(&sif, Some(1));
    assert!(
        e.contains("descriptor 1 is a definition file, not a partition"),
        "{e}"
    );
    assert!(
        e.contains(r#"2 ("rootfs", SquashFS), 3 ("data", SquashFS)"#),
        "{e}"
    );
    let e = error(&sif, Some(9));
    assert!(e.contains("no descriptor 9"), "{e}");
}

#[test]
fn encrypted_and_other_file_systems_are_refused() {
    for (fs, why) in [
        (
            writer::FS_ENCRYPTED_SQUASHFS,
            "is encrypted SquashFS: encrypted SIF partitions are not supported; decrypt",
        ),
        (
            6,
            "gocryptfs SquashFS: encrypted SIF partitions are not supported",
        ),
        (writer::FS_EXT3, "holds ext3, not SquashFS"),
        (77, "holds unknown file system 77, not SquashFS"),
    ] {
        let sif = writer::build(&[Object::partition(
            "rootfs",
            fs,
            writer::PART_PRIMSYS,
            image(100, 4096),
        )]);
        let e = error(&sif, None);
        assert!(
            e.contains(why) && e.contains(r#"partition 1 ("rootfs""#),
            "{e}"
        );
    }
}

#[test]
fn without_one_primary_partition_the_choice_is_the_callers() {
    let data = |name: &str| {
        Object::partition(name, writer::FS_SQUASHFS, writer::PART_DATA, image(1, 4096))
    };
    let sif = writer::build(&[data("a"), data("b")]);
    let e = locate(&Bytes(sif.bytes.clone()), None).unwrap_err();
    assert!(matches!(e, ContainerError::NoChoice { .. }), "{e:?}");
    let e = e.to_string();
    assert!(e.contains("no primary system partition"), "{e}");
    assert!(e.contains(r#"1 ("a", SquashFS), 2 ("b", SquashFS)"#), "{e}");
    assert_eq!(found(&sif, Some(2)).offset, sif.placed[1].offset);

    let primary = |name: &str| {
        Object::partition(
            name,
            writer::FS_SQUASHFS,
            writer::PART_PRIMSYS,
            image(1, 4096),
        )
    };
    let e = error(&writer::build(&[primary("a"), primary("b")]), None);
    assert!(e.contains("2 primary system partitions"), "{e}");

    let e = error(&writer::build(&[Object::deffile("x")]), None);
    assert!(e.contains("it has no SquashFS partition"), "{e}");
}

/// One case per number the file gives: each broken alone in an otherwise sound file.
#[test]
fn hostile_layouts_are_one_line_errors() {
    let table = Sif::descriptor_at(0);
    let second = Sif::descriptor_at(1);
    let third = Sif::descriptor_at(2);
    let header = |at: usize, v: i64| (at, v);
    let cases: Vec<((usize, i64), &str)> = vec![
        (
            header(writer::HEADER_TOTAL, -1),
            "descriptor count is negative",
        ),
        (header(writer::HEADER_TOTAL, 1 << 40), "more than the 65536"),
        (
            header(writer::HEADER_TOTAL, i64::MAX),
            "more than the 65536",
        ),
        (
            header(writer::HEADER_TABLE_SIZE, 585),
            "cannot hold the 48 descriptors",
        ),
        (
            header(writer::HEADER_TABLE_SIZE, -5),
            "table size is negative",
        ),
        (
            header(writer::HEADER_TABLE_OFFSET, -4096),
            "table offset is negative",
        ),
        (
            header(writer::HEADER_TABLE_OFFSET, 0),
            "overlaps its 128-byte header",
        ),
        (
            header(writer::HEADER_TABLE_OFFSET, i64::MAX),
            "runs past the end",
        ),
        (
            header(writer::HEADER_TABLE_OFFSET, 1 << 20),
            "runs past the end",
        ),
        (
            (second + writer::DESCRIPTOR_OFFSET, -1),
            "descriptor 2's offset is negative",
        ),
        (
            (second + writer::DESCRIPTOR_SIZE, i64::MIN),
            "descriptor 2's size is negative",
        ),
        (
            (second + writer::DESCRIPTOR_SIZE, i64::MAX),
            "runs past the end",
        ),
        (
            (second + writer::DESCRIPTOR_OFFSET, i64::MAX),
            "runs past the end",
        ),
        (
            (second + writer::DESCRIPTOR_OFFSET, 4096),
            "overlaps the SIF header or descriptor",
        ),
        (
            (second + writer::DESCRIPTOR_OFFSET, 0),
            "overlaps the SIF header or descriptor",
        ),
        (
            (table + writer::DESCRIPTOR_SIZE, 1000),
            "descriptors 1 (bytes",
        ),
        (
            (third + writer::DESCRIPTOR_SIZE, 1 << 30),
            "runs past the end",
        ),
    ];
    for ((at, value), why) in cases {
        let mut sif = three();
        sif.poke_i64(at, value);
        let e = error(&sif, None);
        assert!(e.contains(why), "{value} at {at}: {e}");
    }
    // Partitions on top of each other.
    let mut sif = three();
    sif.poke_i64(
        third + writer::DESCRIPTOR_OFFSET,
        sif.placed[1].offset as i64 + 4096,
    );
    let e = error(&sif, None);
    assert!(
        e.contains("descriptors 2 (bytes") && e.contains("and 3 (bytes"),
        "{e}"
    );
    // Two descriptors with one id.
    let mut sif = three();
    sif.bytes[third + writer::DESCRIPTOR_ID] = 2;
    assert!(error(&sif, None).contains("two of its descriptors have id 2"));
    // A version this parser does not know.
    let mut sif = three();
    sif.bytes[42..45].copy_from_slice(b"02\0");
    assert!(error(&sif, None).contains("SIF version \"02\" is not supported"));
    // A header cut short after its magic.
    let e = error(
        &Sif {
            bytes: three().bytes[..100].to_vec(),
            placed: vec![],
        },
        None,
    );
    assert!(e.contains("header is cut short"), "{e}");
}

#[test]
fn the_partition_must_hold_a_sane_superblock() {
    let build = |data: Vec<u8>| {
        writer::build(&[Object::partition(
            "rootfs",
            writer::FS_SQUASHFS,
            writer::PART_PRIMSYS,
            data,
        )])
    };
    let e = error(&build(vec![0; 4096]), None);
    assert!(e.contains("holds no SquashFS superblock"), "{e}");
    let e = error(&build(b"hsqs".to_vec()), None);
    assert!(
        e.contains("holds no SquashFS superblock (its 4 bytes"),
        "{e}"
    );
    let e = error(&build(image(4097, 4096)), None);
    assert!(
        e.contains("claims 4097 bytes, more than the partition's 4096"),
        "{e}"
    );
}

/// Random damage to the header and descriptors: errors or a located image, never a panic.
#[test]
fn random_damage_never_panics() {
    let sound = three();
    let mut rng = fastrand::Rng::with_seed(17);
    let end = Sif::descriptor_at(3);
    for _ in 0..3000 {
        let mut bytes = sound.bytes.clone();
        for _ in 0..rng.usize(1..8) {
            let at = if rng.bool() {
                rng.usize(32..writer::HEADER_LEN)
            } else {
                rng.usize(Sif::descriptor_at(0)..end)
            };
            bytes[at] = rng.u8(..);
        }
        if let Ok(got) = locate(&Bytes(bytes.clone()), None) {
            assert!(got.offset < bytes.len() as u64);
        }
    }
}

#[test]
fn names_and_architectures() {
    assert_eq!(arch(b"02\0"), "amd64");
    assert_eq!(arch(b"01\0"), "386");
    assert_eq!(arch(b"13\0"), "loong64");
    for unknown in [b"00\0", b"14\0", b"2\0\0", b"ab\0", b"020"] {
        assert_eq!(arch(unknown), "unknown");
    }
    assert_eq!(name(b"rootfs\0\0\0"), "rootfs");
    assert_eq!(name(b"a\x1b[2Jb\0"), "a\\u{1b}[2Jb");
}
