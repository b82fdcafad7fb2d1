//! Apptainer's SIF (Singularity Image Format), as github.com/apptainer/sif (`pkg/sif`: `header`,
//! `rawDescriptor`, `partition`) writes it with Go's `encoding/binary`: packed, little-endian.
//!
//! The global header, 128 bytes:
//!
//! | at | bytes | field |
//! |---|---|---|
//! | 0 | 32 | launch script (`#!/usr/bin/env run-singularity`) |
//! | 32 | 10 | magic `SIF_MAGIC\0` |
//! | 42 | 3 | spec version `01\0` |
//! | 45 | 3 | primary architecture (`02\0` is amd64) |
//! | 48 | 16 | UUID |
//! | 64 | 8 + 8 | created, modified (int64) |
//! | 80 | 8 + 8 | descriptors free, descriptors total (int64) |
//! | 96 | 8 + 8 | descriptor table offset and size (int64) |
//! | 112 | 8 + 8 | data offset and size (int64) |
//!
//! Then `total` descriptors of 585 bytes each; only those marked used describe an object:
//!
//! | at | bytes | field |
//! |---|---|---|
//! | 0 | 4 | data type (int32): 0x4001 definition file ... 0x4004 partition ... |
//! | 4 | 1 | used (bool) |
//! | 5 | 4 + 4 + 4 | id, group id, linked id (uint32) |
//! | 17 | 8 + 8 + 8 | object offset, size, size with padding (int64) |
//! | 41 | 8 × 4 | created, modified, uid, gid (int64) |
//! | 73 | 128 | name, NUL-padded |
//! | 201 | 384 | extra; a partition's: fs type (int32), partition type (int32), arch (3 bytes) |

mod types;

pub use types::{FsType, PartType, SifPartition};

use super::{has_magic, Container, ContainerError};
use crate::source::Source;
use std::collections::HashSet;
use types::{arch, data_type, name};

const MAGIC: &[u8; 10] = b"SIF_MAGIC\0";
const VERSION: &[u8; 3] = b"01\0";
const HEADER_LEN: u64 = 128;
const DESCRIPTOR_LEN: usize = 585;
/// The data type of a partition object (`DataPartition`).
const DATA_PARTITION: i32 = 0x4004;
/// The most descriptors squashd reads. Apptainer makes 48; the bound keeps a hostile count
/// from costing more than a few dozen MiB of reads.
const MAX_DESCRIPTORS: u64 = 65536;
/// The size of a SquashFS superblock, the least a partition holding one can have.
const SUPERBLOCK_LEN: u64 = 96;

/// Whether the file whose first 64 bytes are `head` is a SIF file.
pub(super) fn is_sif(head: &[u8; 64]) -> bool {
    &head[32..42] == MAGIC
}

/// Finds the image in the SIF file `source` of `len` bytes: the partition `wanted` (by
/// descriptor id), else the primary system partition. Returns its offset, its id, and every
/// partition listed.
pub(super) fn locate(
    source: &dyn Source,
    len: u64,
    wanted: Option<u32>,
) -> Result<(u64, u32, Vec<SifPartition>), ContainerError> {
    let table = Table::read(source, len)?;
    let chosen = table.choose(wanted)?;
    match chosen.fs {
        FsType::Squashfs => {}
        FsType::EncryptedSquashfs | FsType::GocryptfsSquashfs => {
            return Err(unsupported(format!(
                "partition {} is {}: encrypted SIF partitions are not supported; decrypt the \
                 image with apptainer first",
                chosen.label(),
                chosen.fs.name()
            )))
        }
        other => {
            return Err(unsupported(format!(
                "partition {} holds {}, not SquashFS",
                chosen.label(),
                other.name()
            )))
        }
    }
    let (id, offset, size) = (chosen.id, chosen.offset, chosen.size);
    if size < SUPERBLOCK_LEN || !has_magic(source, offset, len)? {
        return Err(malformed(format!(
            "partition {} holds no SquashFS superblock (its {size} bytes at byte {offset})",
            chosen.label()
        )));
    }
    let mut bytes_used = [0u8; 8];
    source.read_exact_at(&mut bytes_used, offset + 40)?;
    let bytes_used = u64::from_le_bytes(bytes_used);
    if bytes_used > size {
        return Err(malformed(format!(
            "partition {}: its SquashFS image claims {bytes_used} bytes, more than the \
             partition's {size}",
            chosen.label()
        )));
    }
    Ok((offset, id, table.partitions))
}

/// The used descriptors of a SIF file, every number checked against the file.
struct Table {
    partitions: Vec<SifPartition>,
    /// (id, data type) of every used descriptor, to say what an id that is no partition is.
    kinds: Vec<(u32, i32)>,
}

impl Table {
    fn read(source: &dyn Source, len: u64) -> Result<Table, ContainerError> {
        if len < HEADER_LEN {
            return Err(malformed(format!(
                "its {HEADER_LEN}-byte header is cut short: the file has {len} bytes"
            )));
        }
        let mut header = [0u8; HEADER_LEN as usize];
        source.read_exact_at(&mut header, 0)?;
        if &header[42..45] != VERSION {
            return Err(unsupported(format!(
                "SIF version {:?} is not supported (squashd reads version 01)",
                String::from_utf8_lossy(header[42..45].split(|&b| b == 0).next().unwrap_or(&[]))
            )));
        }
        let total = non_negative(i64_at(&header, 88), "descriptor count")?;
        let table_at = non_negative(i64_at(&header, 96), "descriptor table offset")?;
        let table_size = non_negative(i64_at(&header, 104), "descriptor table size")?;
        if total > MAX_DESCRIPTORS {
            return Err(malformed(format!(
                "it claims {total} descriptors, more than the {MAX_DESCRIPTORS} squashd reads"
            )));
        }
        let table_len = total * DESCRIPTOR_LEN as u64;
        if table_size < table_len {
            return Err(malformed(format!(
                "its descriptor table of {table_size} bytes cannot hold the {total} descriptors \
                 of {DESCRIPTOR_LEN} bytes it claims"
            )));
        }
        if table_at < HEADER_LEN {
            return Err(malformed(format!(
                "its descriptor table (at byte {table_at}) overlaps its {HEADER_LEN}-byte header"
            )));
        }
        let table_end = table_at
            .checked_add(table_len)
            .filter(|&end| end <= len)
            .ok_or_else(|| {
                malformed(format!(
                    "its descriptor table ({total} descriptors at byte {table_at}) runs past \
                     the end of the {len}-byte file"
                ))
            })?;
        let mut table = Table {
            partitions: Vec::new(),
            kinds: Vec::new(),
        };
        // (offset, end, id) of every object, to find overlaps.
        let mut extents = Vec::new();
        let mut ids = HashSet::new();
        // Read in chunks: one read per 64 descriptors, never the whole claimed table at once.
        let mut chunk = vec![0u8; 64 * DESCRIPTOR_LEN];
        let mut at = table_at;
        while at < table_end {
            let n =
                usize::try_from((table_end - at).min(chunk.len() as u64)).unwrap_or(chunk.len());
            source.read_exact_at(&mut chunk[..n], at)?;
            at += n as u64;
            for d in chunk[..n].chunks_exact(DESCRIPTOR_LEN) {
                if d[4] == 0 {
                    continue; // An unused slot.
                }
                let (kind, id) = (i32_at(d, 0), u32_at(d, 5));
                if !ids.insert(id) {
                    return Err(malformed(format!("two of its descriptors have id {id}")));
                }
                let what = |field: &str| format!("descriptor {id}'s {field}");
                let offset = non_negative(i64_at(d, 17), &what("offset"))?;
                let size = non_negative(i64_at(d, 25), &what("size"))?;
                let end = offset
                    .checked_add(size)
                    .filter(|&end| end <= len)
                    .ok_or_else(|| {
                        malformed(format!(
                            "descriptor {id}'s object ({size} bytes at byte {offset}) runs past \
                             the end of the {len}-byte file"
                        ))
                    })?;
                let overlaps = |start: u64, stop: u64| offset < stop && start < end;
                if size > 0 && (overlaps(0, HEADER_LEN) || overlaps(table_at, table_end)) {
                    return Err(malformed(format!(
                        "descriptor {id}'s object (bytes {offset}..{end}) overlaps the SIF \
                         header or descriptor table"
                    )));
                }
                if size > 0 {
                    extents.push((offset, end, id));
                }
                table.kinds.push((id, kind));
                if kind == DATA_PARTITION {
                    table.partitions.push(SifPartition {
                        id,
                        name: name(&d[73..201]),
                        fs: FsType::from_raw(i32_at(d, 201)),
                        kind: PartType::from_raw(i32_at(d, 205)),
                        arch: arch(&d[209..212]),
                        offset,
                        size,
                    });
                }
            }
        }
        extents.sort_unstable();
        if let Some(pair) = extents.windows(2).find(|w| w[0].1 > w[1].0) {
            let ((a0, a1, a), (b0, b1, b)) = (pair[0], pair[1]);
            return Err(malformed(format!(
                "the objects of descriptors {a} (bytes {a0}..{a1}) and {b} (bytes {b0}..{b1}) \
                 overlap"
            )));
        }
        Ok(table)
    }

    /// The partition `wanted`, else the primary system partition.
    fn choose(&self, wanted: Option<u32>) -> Result<&SifPartition, ContainerError> {
        if let Some(id) = wanted {
            if let Some(p) = self.partitions.iter().find(|p| p.id == id) {
                return Ok(p);
            }
            return Err(unsupported(match self.kinds.iter().find(|k| k.0 == id) {
                Some(&(_, kind)) => format!(
                    "descriptor {id} is {}, not a partition; {}",
                    data_type(kind),
                    self.candidates()
                ),
                None => format!("it has no descriptor {id}; {}", self.candidates()),
            }));
        }
        let primary: Vec<_> = self
            .partitions
            .iter()
            .filter(|p| p.kind == PartType::PrimarySystem)
            .collect();
        match primary.as_slice() {
            [p] => Ok(p),
            [] => Err(no_choice(format!(
                "it has no primary system partition; {}",
                self.candidates()
            ))),
            several => Err(no_choice(format!(
                "it has {} primary system partitions ({})",
                several.len(),
                several
                    .iter()
                    .map(|p| p.label())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    /// What a message offers instead: the SquashFS partitions, or that there are none.
    fn candidates(&self) -> String {
        let squashfs: Vec<_> = self
            .partitions
            .iter()
            .filter(|p| p.fs == FsType::Squashfs)
            .map(|p| p.label())
            .collect();
        if squashfs.is_empty() {
            "it has no SquashFS partition".into()
        } else {
            format!("its SquashFS partitions: {}", squashfs.join(", "))
        }
    }
}

fn malformed(what: String) -> ContainerError {
    super::malformed(Container::Sif, what)
}

fn unsupported(what: String) -> ContainerError {
    ContainerError::Unsupported {
        container: Container::Sif.name(),
        what,
    }
}

fn no_choice(what: String) -> ContainerError {
    ContainerError::NoChoice {
        container: Container::Sif.name(),
        what,
    }
}

/// Go's int64 fields as offsets and sizes: a negative one is an error naming `what`.
fn non_negative(v: i64, what: &str) -> Result<u64, ContainerError> {
    u64::try_from(v).map_err(|_| malformed(format!("its {what} is negative ({v})")))
}

fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    i64::from_le_bytes(v)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[cfg(test)]
mod tests;
