//! Directories: listing, lookup through the directory index, and path resolution.

use super::inode::{Inode, InodeDetail, InodeId};
use super::metadata::MetadataCursor;
use super::ImageInner;
use crate::error::{Error, Result};
use crate::format::dir::{check_name, DirEntryFixed, DirHeader, ENTRY_FIXED_SIZE, HEADER_SIZE};
use crate::format::inode::{parse_dir_index_fixed, FileKind, DIR_INDEX_FIXED_SIZE};
use crate::format::{MetadataRef, METADATA_BLOCK_SIZE};
use std::ops::ControlFlow;

/// One entry of a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The name: any bytes but '/' and NUL, not necessarily UTF-8.
    pub name: Vec<u8>,
    /// The entry's inode.
    pub id: InodeId,
    /// The entry's inode number.
    pub number: u32,
    /// The entry's file type.
    pub kind: FileKind,
}

/// The listing bytes a directory inode's size accounts for: "." and ".." count 3 bytes that are
/// not stored.
const UNSTORED: u32 = 3;

fn listing_of(image: &ImageInner, dir: &Inode) -> Result<(MetadataRef, u32, u16, MetadataRef)> {
    match dir.detail {
        InodeDetail::Directory {
            listing,
            file_size,
            index_count,
            index_at,
        } => Ok((listing, file_size, index_count, index_at)),
        _ => Err(Error::NotADirectory {
            image: image.name.clone(),
            path: format!("inode {}", dir.number),
        }),
    }
}

/// Walks `len` bytes of listing from `cur`, calling `each` on every entry until it breaks.
fn scan(
    image: &ImageInner,
    mut cur: MetadataCursor<'_>,
    mut len: u64,
    mut each: impl FnMut(DirEntry) -> ControlFlow<()>,
) -> Result<()> {
    let sb = &image.superblock;
    let inode_table_len = sb.directory_table_start - sb.inode_table_start;
    let take = |cur: &MetadataCursor, n: usize, len: &mut u64| {
        if (n as u64) > *len {
            return Err(image.corrupt(
                cur.block_pos(),
                "directory entry runs past the directory's size",
            ));
        }
        *len -= n as u64;
        Ok(())
    };
    let mut raw = [0u8; HEADER_SIZE];
    // Names are strictly increasing (mksquashfs sorts them; lookup relies on it). Checking it
    // also bounds a listing by the image: a tiny compressed block can repeat one entry 900
    // times, but distinct sorted names do not compress like that.
    let mut last: Vec<u8> = Vec::new();
    while len > 0 {
        take(&cur, HEADER_SIZE, &mut len)?;
        cur.read_exact(&mut raw)?;
        let header = DirHeader::parse(&raw).map_err(|e| image.format_error(cur.block_pos(), e))?;
        if header.inode_block as u64 >= inode_table_len {
            return Err(image.corrupt(
                cur.block_pos(),
                "directory header points outside the inode table",
            ));
        }
        for _ in 0..header.count {
            take(&cur, ENTRY_FIXED_SIZE, &mut len)?;
            cur.read_exact(&mut raw[..ENTRY_FIXED_SIZE])?;
            let fixed = DirEntryFixed::parse(&raw[..ENTRY_FIXED_SIZE])
                .map_err(|e| image.format_error(cur.block_pos(), e))?;
            take(&cur, fixed.name_len, &mut len)?;
            let mut name = vec![0u8; fixed.name_len];
            cur.read_exact(&mut name)?;
            check_name(&name).map_err(|e| image.format_error(cur.block_pos(), e))?;
            if !last.is_empty() && name <= last {
                return Err(image.corrupt(
                    cur.block_pos(),
                    format!(
                        "directory entry {:?} is not after {:?}: entries out of order or repeated",
                        String::from_utf8_lossy(&name),
                        String::from_utf8_lossy(&last)
                    ),
                ));
            }
            last.clear();
            last.extend_from_slice(&name);
            let entry = DirEntry {
                name,
                id: InodeId::from_ref(MetadataRef {
                    block: header.inode_block as u64,
                    offset: fixed.inode_offset,
                }),
                number: fixed.inode_number(&header),
                kind: fixed.kind,
            };
            if each(entry).is_break() {
                return Ok(());
            }
        }
    }
    Ok(())
}

pub(crate) fn read_dir(image: &ImageInner, dir: &Inode) -> Result<Vec<DirEntry>> {
    let (listing, file_size, _, _) = listing_of(image, dir)?;
    let mut out = Vec::new();
    if file_size <= UNSTORED {
        return Ok(out);
    }
    let cur = MetadataCursor::new(image, image.superblock.directory_table_start, listing)?;
    scan(image, cur, (file_size - UNSTORED) as u64, |e| {
        out.push(e);
        ControlFlow::Continue(())
    })?;
    Ok(out)
}

pub(crate) fn lookup(image: &ImageInner, dir: &Inode, name: &[u8]) -> Result<Option<DirEntry>> {
    let (listing, file_size, index_count, index_at) = listing_of(image, dir)?;
    if file_size <= UNSTORED {
        return Ok(None);
    }
    let mut start = listing;
    let mut skipped = 0u32;
    if index_count > 0 {
        // The index names the first entry of runs of the (sorted) listing: start at the last
        // run whose first name is not after `name`.
        let mut cur = MetadataCursor::new(image, image.superblock.inode_table_start, index_at)?;
        let mut raw = [0u8; DIR_INDEX_FIXED_SIZE];
        for _ in 0..index_count {
            cur.read_exact(&mut raw)?;
            let (entry, name_len) =
                parse_dir_index_fixed(&raw).map_err(|e| image.format_error(cur.block_pos(), e))?;
            let mut first = vec![0u8; name_len];
            cur.read_exact(&mut first)?;
            if first.as_slice() > name {
                break;
            }
            if entry.listing_offset > file_size - UNSTORED {
                return Err(
                    image.corrupt(cur.block_pos(), "directory index points past the listing")
                );
            }
            skipped = entry.listing_offset;
            start = MetadataRef {
                block: entry.block as u64,
                // In u64: both terms come from the image and their sum can pass u32::MAX.
                offset: ((listing.offset as u64 + entry.listing_offset as u64)
                    % METADATA_BLOCK_SIZE as u64) as u16,
            };
        }
    }
    let cur = MetadataCursor::new(image, image.superblock.directory_table_start, start)?;
    let mut found = None;
    scan(image, cur, (file_size - UNSTORED - skipped) as u64, |e| {
        match e.name.as_slice().cmp(name) {
            std::cmp::Ordering::Less => ControlFlow::Continue(()),
            std::cmp::Ordering::Equal => {
                found = Some(e);
                ControlFlow::Break(())
            }
            // Entries are sorted: it is not in this directory.
            std::cmp::Ordering::Greater => ControlFlow::Break(()),
        }
    })?;
    Ok(found)
}

pub(crate) fn resolve_path(image: &ImageInner, path: &[u8]) -> Result<Inode> {
    let mut inode = super::inode::load(image, InodeId::from_ref(image.superblock.root_inode))?;
    let shown = || String::from_utf8_lossy(path).into_owned();
    for component in path
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
    {
        if !inode.is_dir() {
            return Err(Error::NotADirectory {
                image: image.name.clone(),
                path: shown(),
            });
        }
        let entry = lookup(image, &inode, component)?.ok_or_else(|| Error::NotFound {
            image: image.name.clone(),
            path: shown(),
        })?;
        inode = super::inode::load(image, entry.id)?;
    }
    Ok(inode)
}
