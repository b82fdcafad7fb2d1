//! A type-2 AppImage: an ELF runtime, marked `AI\x02` at byte 8, with the SquashFS image
//! appended where the ELF file ends: after its section header table or its last section,
//! whichever is later (the runtime finds itself the same way).

use super::{has_magic, malformed, Container, ContainerError};
use crate::source::Source;

/// Whether the file whose first 64 bytes are `ident` is a type-2 AppImage.
pub(super) fn is_appimage(ident: &[u8; 64]) -> bool {
    &ident[..4] == b"\x7fELF" && &ident[8..11] == b"AI\x02"
}

/// Where the image in the AppImage `source` (of `len` bytes, beginning with `ident`) starts:
/// where its ELF part ends, which must hold a SquashFS superblock.
pub(super) fn image_start(
    source: &dyn Source,
    ident: &[u8; 64],
    len: u64,
) -> Result<u64, ContainerError> {
    let offset = elf_end(source, ident, len)?;
    if !has_magic(source, offset, len)? {
        return Err(malformed(
            Container::AppImage,
            format!("no SquashFS image where its ELF part ends (byte {offset})"),
        ));
    }
    Ok(offset)
}

/// Where the ELF file whose first 64 bytes are `ident` ends: after its section header table or
/// its last section's bytes, whichever is later.
fn elf_end(source: &dyn Source, ident: &[u8; 64], len: u64) -> Result<u64, ContainerError> {
    let bad = |what: String| malformed(Container::AppImage, what);
    let little = match ident[5] {
        1 => true,
        2 => false,
        other => return Err(bad(format!("ELF byte order {other} is unknown"))),
    };
    let u16_at = |b: &[u8], at: usize| {
        let v = [b[at], b[at + 1]];
        if little {
            u16::from_le_bytes(v)
        } else {
            u16::from_be_bytes(v)
        }
    };
    let u32_at = |b: &[u8], at: usize| {
        let v = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        if little {
            u32::from_le_bytes(v)
        } else {
            u32::from_be_bytes(v)
        }
    };
    let u64_at = |b: &[u8], at: usize| {
        let mut v = [0u8; 8];
        v.copy_from_slice(&b[at..at + 8]);
        if little {
            u64::from_le_bytes(v)
        } else {
            u64::from_be_bytes(v)
        }
    };
    // (shoff, shentsize, shnum), and where a section header keeps (type, offset, size).
    let (shoff, shentsize, shnum, wide) = match ident[4] {
        1 => (
            u64::from(u32_at(ident, 0x20)),
            u16_at(ident, 0x2e),
            u16_at(ident, 0x30),
            false,
        ),
        2 => (
            u64_at(ident, 0x28),
            u16_at(ident, 0x3a),
            u16_at(ident, 0x3c),
            true,
        ),
        other => return Err(bad(format!("ELF class {other} is unknown"))),
    };
    let min_entry = if wide { 64 } else { 40 };
    if shnum > 0 && usize::from(shentsize) < min_entry {
        return Err(bad(format!(
            "section headers of {shentsize} bytes are too small"
        )));
    }
    let table_len = u64::from(shentsize) * u64::from(shnum);
    let table_end = shoff
        .checked_add(table_len)
        .filter(|&end| end <= len)
        .ok_or_else(|| {
            bad(format!(
                "its section header table ({shnum} entries at byte {shoff}) runs past the {len}-byte file"
            ))
        })?;
    // At most 65535 entries of at most 65535 bytes, all inside the file: bounded.
    let mut table = vec![0u8; table_len as usize];
    source.read_exact_at(&mut table, shoff)?;
    let mut end = table_end;
    for entry in table.chunks_exact(usize::from(shentsize.max(1))) {
        const SHT_NOBITS: u32 = 8;
        let kind = u32_at(entry, 4);
        let (offset, size) = if wide {
            (u64_at(entry, 0x18), u64_at(entry, 0x20))
        } else {
            (
                u64::from(u32_at(entry, 0x10)),
                u64::from(u32_at(entry, 0x14)),
            )
        };
        if kind == SHT_NOBITS {
            continue;
        }
        let section_end = offset
            .checked_add(size)
            .filter(|&e| e <= len)
            .ok_or_else(|| {
                bad(format!(
                    "a section ({size} bytes at byte {offset}) runs past the {len}-byte file"
                ))
            })?;
        end = end.max(section_end);
    }
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::{locate, Bytes};

    /// A 64-bit little-endian AppImage header with one section, its table at `shoff`.
    fn elf64(shoff: u64, shentsize: u16, shnum: u16, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[8..11].copy_from_slice(b"AI\x02");
        b[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        b[0x3a..0x3c].copy_from_slice(&shentsize.to_le_bytes());
        b[0x3c..0x3e].copy_from_slice(&shnum.to_le_bytes());
        b
    }

    #[test]
    fn an_appimage_image_starts_after_the_later_of_its_table_and_sections() {
        // Table of one 64-byte entry at 64; its section covers bytes 128..300.
        let mut b = elf64(64, 64, 1, 300);
        b[64 + 4..64 + 8].copy_from_slice(&1u32.to_le_bytes());
        b[64 + 0x18..64 + 0x20].copy_from_slice(&128u64.to_le_bytes());
        b[64 + 0x20..64 + 0x28].copy_from_slice(&172u64.to_le_bytes());
        b.extend_from_slice(b"hsqs");
        b.extend_from_slice(&[0; 96]);
        let found = locate(&Bytes(b), None).unwrap();
        assert_eq!((found.container, found.offset), (Container::AppImage, 300));
    }

    #[test]
    fn hostile_layouts_are_errors() {
        let cases = [
            (elf64(u64::MAX - 10, 64, 2, 256), "runs past"),
            (elf64(64, 8, 1, 256), "too small"),
            (elf64(64, 64, u16::MAX, 256), "runs past"),
            (elf64(64, 64, 0, 256), "no SquashFS image"),
        ];
        for (bytes, why) in cases {
            let e = locate(&Bytes(bytes), None).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("AppImage"), "{e}");
        }
        // A section whose end overflows.
        let mut b = elf64(64, 64, 1, 256);
        b[64 + 0x18..64 + 0x20].copy_from_slice(&(u64::MAX - 1).to_le_bytes());
        b[64 + 0x20..64 + 0x28].copy_from_slice(&16u64.to_le_bytes());
        let e = locate(&Bytes(b), None).unwrap_err().to_string();
        assert!(e.contains("runs past"), "{e}");
    }
}
