//! GUID partition tables (UEFI 2.x, chapter 5) as systemd's Discoverable Disk Images use them:
//! a root or /usr partition holding SquashFS (any architecture's type GUID of the
//! Discoverable Partitions Specification), with its `-verity` partition (the hash tree, with
//! its superblock) and its `-verity-sig` partition (JSON: `rootHash`, `signature`).
//!
//! The primary header is at LBA 1 (512- or 4096-byte sectors): signature `EFI PART`, header
//! size (92), header CRC32, ... partition entry LBA at 72, entry count at 80, entry size at
//! 84, entry table CRC32 at 88. Each entry: type GUID, unique GUID, first and last LBA
//! (inclusive), attributes, UTF-16LE name of 36 units. Every number is checked against the
//! file before it is used; the CRCs are checked; partitions may not overlap.

mod types;

use super::{has_magic, ContainerError};
use crate::source::Source;

/// The largest partition table squashd reads (the usual one holds 128 entries of 128 bytes).
const MAX_TABLE_BYTES: u64 = 1 << 20;
const SIGNATURE: &[u8; 8] = b"EFI PART";
const CONTAINER: &str = "GPT disk image";

/// One partition of a GPT disk image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GptPartition {
    /// Its number (1 for the table's first entry), by which it can be chosen.
    pub number: u32,
    /// Its type GUID.
    pub type_guid: String,
    /// What the Discoverable Partitions Specification calls that type (`root-x86-64`,
    /// `usr-arm64-verity`, ...), if it is a root or /usr type.
    pub kind: Option<&'static str>,
    /// Its unique GUID.
    pub uuid: String,
    /// Its label, control characters escaped.
    pub name: String,
    /// Where it starts in the file.
    pub offset: u64,
    /// Its length in bytes.
    pub size: u64,
}

impl GptPartition {
    /// The designator and architecture of a root or /usr type without `-verity`/`-verity-sig`
    /// (`root-x86-64`), and which of the three it is.
    fn role(&self) -> Option<(&'static str, Role)> {
        let kind = self.kind?;
        Some(if let Some(base) = kind.strip_suffix("-verity-sig") {
            (base, Role::Signature)
        } else if let Some(base) = kind.strip_suffix("-verity") {
            (base, Role::Tree)
        } else {
            (kind, Role::Data)
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Data,
    Tree,
    Signature,
}

/// A disk image's partitions, and those that matter to squashd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GptLayout {
    /// Bytes per sector (LBA).
    pub sector_size: u64,
    /// Every used entry, in table order.
    pub partitions: Vec<GptPartition>,
    /// The partition holding the image.
    pub chosen: GptPartition,
    /// Its `-verity` partition, if the image has one.
    pub verity: Option<GptPartition>,
    /// Its `-verity-sig` partition, if the image has one.
    pub verity_sig: Option<GptPartition>,
}

/// Whether `source` has a GPT header at LBA 1 (of 512 or 4096 bytes): its sector size.
pub(super) fn sector_size(source: &dyn Source, len: u64) -> Result<Option<u64>, ContainerError> {
    for size in [512u64, 4096] {
        if len >= size + 92 {
            let mut signature = [0u8; 8];
            source.read_exact_at(&mut signature, size)?;
            if &signature == SIGNATURE {
                return Ok(Some(size));
            }
        }
    }
    Ok(None)
}

fn malformed(what: String) -> ContainerError {
    ContainerError::Malformed {
        container: CONTAINER,
        what,
    }
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le64(b: &[u8], at: usize) -> u64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(raw)
}

/// A GUID as text: its first three fields are little-endian on disk.
fn guid(b: &[u8]) -> String {
    format!(
        "{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
        b[3], b[2], b[1], b[0], b[5], b[4], b[7], b[6], b[8], b[9], b[10], b[11], b[12], b[13],
        b[14], b[15]
    )
}

fn label(raw: &[u8]) -> String {
    let units: Vec<u16> = raw
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .take_while(|&u| u != 0)
        .collect();
    String::from_utf16_lossy(&units)
        .escape_default()
        .to_string()
}

/// Reads the table of the GPT disk image `source` (`len` bytes, `sector`-byte sectors) and
/// chooses its partition: number `wanted`, else the first root partition holding SquashFS,
/// else the first /usr partition holding it.
pub(super) fn locate(
    source: &dyn Source,
    len: u64,
    sector: u64,
    wanted: Option<u32>,
) -> Result<GptLayout, ContainerError> {
    let partitions = read_table(source, len, sector)?;
    let holds_squashfs = |p: &GptPartition| has_magic(source, p.offset, len);
    let chosen = match wanted {
        Some(number) => {
            let p = partitions
                .iter()
                .find(|p| p.number == number)
                .ok_or_else(|| unsupported(format!("it has no partition {number}")))?;
            if !holds_squashfs(p)? {
                return Err(unsupported(format!(
                    "partition {number} ({:?}) holds no SquashFS image",
                    p.name
                )));
            }
            p.clone()
        }
        None => {
            let mut found = None;
            'roles: for designator in ["root-", "usr-"] {
                for p in &partitions {
                    let data = p.role().is_some_and(|(base, role)| {
                        role == Role::Data && base.starts_with(designator)
                    });
                    if data && holds_squashfs(p)? {
                        found = Some(p.clone());
                        break 'roles;
                    }
                }
            }
            found.ok_or_else(|| {
                unsupported(format!(
                    "none of its {} partitions is a root or /usr partition holding SquashFS; \
                     choose one with --partition N (squashd info lists them)",
                    partitions.len()
                ))
            })?
        }
    };
    let base = chosen.role().map(|(base, _)| base);
    let with_role = |wanted: Role| {
        partitions
            .iter()
            .find(|p| {
                p.role()
                    .is_some_and(|(b, role)| Some(b) == base && role == wanted)
            })
            .cloned()
    };
    Ok(GptLayout {
        sector_size: sector,
        verity: with_role(Role::Tree),
        verity_sig: with_role(Role::Signature),
        chosen,
        partitions,
    })
}

fn unsupported(what: String) -> ContainerError {
    ContainerError::Unsupported {
        container: CONTAINER,
        what,
    }
}

/// The used entries of the primary table, checked.
fn read_table(
    source: &dyn Source,
    len: u64,
    sector: u64,
) -> Result<Vec<GptPartition>, ContainerError> {
    let mut header = vec![0u8; sector as usize];
    source.read_exact_at(&mut header, sector)?;
    let header_size = le32(&header, 12) as usize;
    if !(92..=sector as usize).contains(&header_size) {
        return Err(malformed(format!(
            "header size {header_size} is not between 92 and the {sector}-byte sector"
        )));
    }
    let stored_crc = le32(&header, 16);
    let mut zeroed = header[..header_size].to_vec();
    zeroed[16..20].fill(0);
    if crc32fast::hash(&zeroed) != stored_crc {
        return Err(malformed(
            "the header's CRC32 does not match: a damaged or hand-edited table".into(),
        ));
    }
    let entries_lba = le64(&header, 72);
    let count = u64::from(le32(&header, 80));
    let entry_size = u64::from(le32(&header, 84));
    if entry_size < 128 || !entry_size.is_power_of_two() || entry_size > sector {
        return Err(malformed(format!(
            "entries of {entry_size} bytes (128 times a power of two, at most a sector, expected)"
        )));
    }
    let table_bytes = count * entry_size;
    if count == 0 || table_bytes > MAX_TABLE_BYTES {
        return Err(malformed(format!(
            "{count} partition entries of {entry_size} bytes (1 to {} expected)",
            MAX_TABLE_BYTES / entry_size
        )));
    }
    let table_start = entries_lba.checked_mul(sector);
    if entries_lba < 2
        || table_start
            .and_then(|s| s.checked_add(table_bytes))
            .is_none_or(|end| end > len)
    {
        return Err(malformed(format!(
            "the partition table ({count} entries at LBA {entries_lba}) runs past the end of the \
             {len}-byte file"
        )));
    }
    let mut table = vec![0u8; table_bytes as usize];
    source.read_exact_at(&mut table, table_start.unwrap_or_default())?;
    if crc32fast::hash(&table) != le32(&header, 88) {
        return Err(malformed(
            "the partition table's CRC32 does not match: a damaged or hand-edited table".into(),
        ));
    }
    let mut partitions = Vec::new();
    for (i, entry) in table.chunks_exact(entry_size as usize).enumerate() {
        if entry[..16].iter().all(|&b| b == 0) {
            continue;
        }
        let number = i as u32 + 1;
        let (first, last) = (le64(entry, 32), le64(entry, 40));
        let span = last
            .checked_add(1)
            .filter(|&end| first < end)
            .and_then(|end| end.checked_mul(sector))
            .filter(|&end| end <= len)
            .and_then(|end| Some((first.checked_mul(sector)?, end)));
        let Some((offset, end)) = span else {
            return Err(malformed(format!(
                "partition {number} (LBA {first} to {last}) is empty or runs past the end of the \
                 {len}-byte file"
            )));
        };
        let type_guid = guid(&entry[..16]);
        let kind = types::TYPES
            .iter()
            .find(|(_, g)| *g == type_guid)
            .map(|(name, _)| *name);
        partitions.push(GptPartition {
            number,
            type_guid,
            kind,
            uuid: guid(&entry[16..32]),
            name: label(&entry[56..128]),
            offset,
            size: end - offset,
        });
    }
    let mut by_start: Vec<&GptPartition> = partitions.iter().collect();
    by_start.sort_by_key(|p| p.offset);
    for pair in by_start.windows(2) {
        if pair[0].offset + pair[0].size > pair[1].offset {
            return Err(malformed(format!(
                "partitions {} and {} overlap",
                pair[0].number, pair[1].number
            )));
        }
    }
    Ok(partitions)
}

#[cfg(test)]
mod tests;
