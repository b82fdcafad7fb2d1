//! GPT tables built here from the UEFI layout: a sound disk image is located, every hostile
//! header is one error saying what is wrong.

use super::*;
use crate::container::{locate, Bytes, Container};

const SECTOR: usize = 512;
const ROOT_X86_64: &str = "4f68bce3-e8cd-4db1-96e7-fbcaf984b709";
const ROOT_X86_64_VERITY: &str = "2c7357ed-ebd2-46d9-aec1-23d437ec2bf5";
const USR_ARM64: &str = "b0e01050-ee5f-4390-949a-9101b17104e9";
const LINUX_DATA: &str = "0fc63daf-8483-4772-8e79-3d69d8477de4";

fn guid_bytes(text: &str) -> [u8; 16] {
    let hex: String = text.chars().filter(|c| *c != '-').collect();
    let b: Vec<u8> = (0..16)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    [
        b[3], b[2], b[1], b[0], b[5], b[4], b[7], b[6], b[8], b[9], b[10], b[11], b[12], b[13],
        b[14], b[15],
    ]
}

/// A disk image of `sectors` sectors with these partitions (type, first LBA, last LBA, name);
/// each data partition starts with the SquashFS magic when `squashfs`.
struct Disk {
    bytes: Vec<u8>,
}

impl Disk {
    fn new(sectors: usize, parts: &[(&str, u64, u64, &str)]) -> Disk {
        let mut bytes = vec![0u8; sectors * SECTOR];
        let mut table = vec![0u8; 128 * 128];
        for (i, (kind, first, last, name)) in parts.iter().enumerate() {
            let e = &mut table[i * 128..(i + 1) * 128];
            e[..16].copy_from_slice(&guid_bytes(kind));
            e[16..32].copy_from_slice(&[i as u8 + 1; 16]);
            e[32..40].copy_from_slice(&first.to_le_bytes());
            e[40..48].copy_from_slice(&last.to_le_bytes());
            for (j, unit) in name.encode_utf16().enumerate() {
                e[56 + 2 * j..58 + 2 * j].copy_from_slice(&unit.to_le_bytes());
            }
            let at = (*first as usize)
                .checked_mul(SECTOR)
                .filter(|at| at + 4 <= bytes.len());
            if let Some(at) = at {
                bytes[at..at + 4].copy_from_slice(b"hsqs");
            }
        }
        bytes[2 * SECTOR..2 * SECTOR + table.len()].copy_from_slice(&table);
        let mut disk = Disk { bytes };
        let h = &mut disk.bytes[SECTOR..2 * SECTOR];
        h[..8].copy_from_slice(b"EFI PART");
        h[8..12].copy_from_slice(&0x0001_0000u32.to_le_bytes());
        h[12..16].copy_from_slice(&92u32.to_le_bytes());
        h[24..32].copy_from_slice(&1u64.to_le_bytes());
        h[40..48].copy_from_slice(&34u64.to_le_bytes());
        h[72..80].copy_from_slice(&2u64.to_le_bytes());
        h[80..84].copy_from_slice(&128u32.to_le_bytes());
        h[84..88].copy_from_slice(&128u32.to_le_bytes());
        disk.seal();
        disk
    }

    /// Recomputes both CRCs (after an edit meant to pass them).
    fn seal(&mut self) {
        let count = le32(&self.bytes[SECTOR..], 80) as usize;
        let size = le32(&self.bytes[SECTOR..], 84) as usize;
        let start = 2 * SECTOR;
        let table_crc = self
            .bytes
            .get(start..start + count.saturating_mul(size))
            .map_or(0, crc32fast::hash);
        self.bytes[SECTOR + 88..SECTOR + 92].copy_from_slice(&table_crc.to_le_bytes());
        self.bytes[SECTOR + 16..SECTOR + 20].fill(0);
        let crc = crc32fast::hash(&self.bytes[SECTOR..SECTOR + 92]);
        self.bytes[SECTOR + 16..SECTOR + 20].copy_from_slice(&crc.to_le_bytes());
    }

    fn poke32(&mut self, at: usize, v: u32) {
        self.bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }
}

fn ddi() -> Disk {
    Disk::new(
        200,
        &[
            (LINUX_DATA, 34, 39, "other"),
            (ROOT_X86_64, 40, 139, "root-x86-64"),
            (ROOT_X86_64_VERITY, 140, 159, "root-x86-64-verity"),
        ],
    )
}

#[test]
fn a_disk_image_is_opened_at_its_root_partition_with_its_verity_partition() {
    let found = locate(&Bytes(ddi().bytes), None).unwrap();
    assert_eq!(found.container, Container::Gpt);
    assert_eq!(found.offset, 40 * 512);
    assert_eq!(found.partition, Some(2));
    let gpt = found.gpt.unwrap();
    assert_eq!(gpt.partitions.len(), 3);
    assert_eq!(gpt.chosen.kind, Some("root-x86-64"));
    assert_eq!(gpt.chosen.size, 100 * 512);
    assert_eq!(gpt.chosen.type_guid, ROOT_X86_64);
    assert_eq!(gpt.verity.as_ref().map(|p| p.offset), Some(140 * 512));
    assert!(gpt.verity_sig.is_none());
    // The other partition holds the magic too: chosen by number.
    let found = locate(&Bytes(ddi().bytes), Some(1)).unwrap();
    assert_eq!(found.offset, 34 * 512);
    let e = locate(&Bytes(ddi().bytes), Some(9))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no partition 9"), "{e}");
}

#[test]
fn a_usr_partition_of_another_architecture_is_found_too() {
    let disk = Disk::new(100, &[(USR_ARM64, 40, 79, "usr")]);
    let found = locate(&Bytes(disk.bytes), None).unwrap();
    assert_eq!(found.offset, 40 * 512);
    assert_eq!(found.gpt.unwrap().chosen.kind, Some("usr-arm64"));
}

#[test]
fn hostile_tables_are_one_line_errors() {
    type Edit = Box<dyn Fn(&mut Disk)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "bad header CRC",
            Box::new(|d| d.bytes[SECTOR + 40] ^= 1),
            "header's CRC32",
        ),
        (
            "bad table CRC",
            Box::new(|d| d.bytes[2 * SECTOR + 70] ^= 1),
            "table's CRC32",
        ),
        (
            "absurd count",
            Box::new(|d| {
                d.poke32(SECTOR + 80, u32::MAX);
                d.seal()
            }),
            "partition entries",
        ),
        (
            "zero entries",
            Box::new(|d| {
                d.poke32(SECTOR + 80, 0);
                d.seal()
            }),
            "partition entries",
        ),
        (
            "odd entry size",
            Box::new(|d| {
                d.poke32(SECTOR + 84, 100);
                d.seal()
            }),
            "entries of 100 bytes",
        ),
        (
            "table past the end",
            Box::new(|d| {
                d.bytes[SECTOR + 72..SECTOR + 80].copy_from_slice(&190u64.to_le_bytes());
                d.seal()
            }),
            "runs past the end",
        ),
        (
            "table at an absurd LBA",
            Box::new(|d| {
                d.bytes[SECTOR + 72..SECTOR + 80].copy_from_slice(&u64::MAX.to_le_bytes());
                d.seal()
            }),
            "runs past the end",
        ),
        (
            "header size",
            Box::new(|d| {
                d.poke32(SECTOR + 12, 4096);
                d.seal()
            }),
            "header size",
        ),
    ];
    for (what, edit, expected) in cases {
        let mut disk = ddi();
        edit(&mut disk);
        let e = locate(&Bytes(disk.bytes), None).unwrap_err().to_string();
        assert!(e.contains(expected), "{what}: {e}");
        assert!(!e.contains('\n'), "{what}: {e}");
    }
    for (parts, expected) in [
        (
            vec![(ROOT_X86_64, 40, 139, "a"), (LINUX_DATA, 100, 150, "b")],
            "overlap",
        ),
        (vec![(ROOT_X86_64, 40, 1000, "a")], "runs past the end"),
        (vec![(ROOT_X86_64, 60, 50, "a")], "is empty"),
        (
            vec![(ROOT_X86_64, u64::MAX - 1, u64::MAX, "a")],
            "runs past the end",
        ),
        (vec![(LINUX_DATA, 40, 139, "a")], "none of its 1 partitions"),
    ] {
        let disk = Disk::new(200, &parts);
        let e = locate(&Bytes(disk.bytes), None).unwrap_err().to_string();
        assert!(e.contains(expected), "{parts:?}: {e}");
    }
}
