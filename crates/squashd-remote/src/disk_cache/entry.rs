//! The format of one entry file, and its name.
//!
//! An entry file holds one unit, self-describing so that a file found after a crash or a restart
//! can be checked on its own:
//!
//! ```text
//! 0   8  magic "SQDUNIT1" (the 1 is the format's version)
//! 8   8  the unit's index, little-endian
//! 16  4  length of the object's identity in bytes, little-endian
//! 20  4  length of the unit's bytes, little-endian
//! 24  4  CRC-32C of bytes 0..24, the identity and the unit's bytes
//! 28     the object's identity (a hash of its address and version), then the unit's bytes
//! ```
//!
//! The file's name is `<32 hex digits>-<16 hex digits>`: the first 128 bits of the SHA-256 of the
//! object's identity, then the unit's index. SHA-256 rather than std's `DefaultHasher`, whose
//! output may change between Rust releases (a cache found again after an upgrade must keep its
//! names); and a cryptographic hash, because an ETag is chosen by a server: two objects can share
//! a name only by a chance of about 2^-64, and even then the identity stored in the header, which
//! is compared on every read, makes it a miss, never another object's bytes.

use std::io::{self, Read, Write};

use sha2::{Digest, Sha256};

use super::UnitKey;

const MAGIC: &[u8; 8] = b"SQDUNIT1";
/// Bytes before the identity.
pub(super) const HEADER_LEN: u64 = 28;
/// The longest identity stored; a longer one is not cached (a URL is rarely above 2 KiB).
const MAX_IDENTITY: usize = 64 * 1024;
/// The largest unit stored. Units are 1 MiB by default; the bound keeps a damaged or foreign file
/// from making a read allocate more than this.
const MAX_UNIT: usize = 64 * 1024 * 1024;
/// The largest entry file that can be valid; a larger one is damaged or not ours.
pub(super) const MAX_ENTRY_LEN: u64 = HEADER_LEN + MAX_IDENTITY as u64 + MAX_UNIT as u64;
/// Length of an entry file's name.
const NAME_LEN: usize = 32 + 1 + 16;

/// What identifies an entry in the index: the hash of its object and the unit's index. The same
/// thing as its file name, in binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct EntryId {
    object: [u8; 16],
    index: u64,
}

impl EntryId {
    /// The id of a unit.
    pub(super) fn of(key: &UnitKey) -> EntryId {
        let digest = Sha256::digest(key.object.as_bytes());
        let mut object = [0u8; 16];
        object.copy_from_slice(&digest[..16]);
        EntryId {
            object,
            index: key.index,
        }
    }

    /// The id a file name stands for, or `None` if the name is not an entry's.
    pub(super) fn parse(name: &str) -> Option<EntryId> {
        if name.len() != NAME_LEN || name.as_bytes()[32] != b'-' {
            return None;
        }
        let mut object = [0u8; 16];
        for (i, byte) in object.iter_mut().enumerate() {
            *byte = u8::from_str_radix(name.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        let index = u64::from_str_radix(name.get(33..)?, 16).ok()?;
        // from_str_radix takes a leading '+'; a name must be exactly what `name` writes.
        let id = EntryId { object, index };
        (id.name() == name).then_some(id)
    }

    /// The entry's file name.
    pub(super) fn name(&self) -> String {
        let mut name = String::with_capacity(NAME_LEN);
        for byte in self.object {
            name.push_str(&format!("{byte:02x}"));
        }
        name.push_str(&format!("-{:016x}", self.index));
        name
    }
}

/// The length of the entry file for `unit` of `key`, or `None` if it is too large to be cached.
pub(super) fn encoded_len(key: &UnitKey, unit: &[u8]) -> Option<u64> {
    (key.object.len() <= MAX_IDENTITY && unit.len() <= MAX_UNIT)
        .then(|| HEADER_LEN + key.object.len() as u64 + unit.len() as u64)
}

/// Writes the entry file for `unit` of `key` (whose length [`encoded_len`] checked).
pub(super) fn write(out: &mut impl Write, key: &UnitKey, unit: &[u8]) -> io::Result<()> {
    let identity = key.object.as_bytes();
    let mut head = Vec::with_capacity(HEADER_LEN as usize + identity.len());
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&key.index.to_le_bytes());
    // Both fit: encoded_len bounded them far below 4 GiB.
    head.extend_from_slice(&(identity.len() as u32).to_le_bytes());
    head.extend_from_slice(&(unit.len() as u32).to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c_append(crc32c::crc32c(&head), identity), unit);
    head.extend_from_slice(&crc.to_le_bytes());
    head.extend_from_slice(identity);
    out.write_all(&head)?;
    out.write_all(unit)
}

/// What reading an entry file found.
#[derive(Debug)]
pub(super) enum Found {
    /// The unit asked for, checked.
    Unit(Vec<u8>),
    /// The file is torn, damaged or holds another unit: what was wrong.
    Bad(&'static str),
}

/// Reads and checks the entry file `file` of `file_len` bytes, expected to hold unit `key`.
/// An I/O error is returned as such; every check that fails gives [`Found::Bad`].
pub(super) fn read(file: &mut impl Read, file_len: u64, key: &UnitKey) -> io::Result<Found> {
    if !(HEADER_LEN..=MAX_ENTRY_LEN).contains(&file_len) {
        return Ok(Found::Bad("its length cannot be an entry's"));
    }
    let mut head = [0u8; HEADER_LEN as usize];
    file.read_exact(&mut head)?;
    let field =
        |at: usize| u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
    let (identity_len, unit_len, crc) = (field(16) as u64, field(20) as u64, field(24));
    if &head[..8] != MAGIC {
        return Ok(Found::Bad("wrong magic"));
    }
    if HEADER_LEN + identity_len + unit_len != file_len {
        return Ok(Found::Bad(
            "its length does not match its header (torn or truncated)",
        ));
    }
    // Both lengths are bounded by file_len, itself at most MAX_ENTRY_LEN.
    let mut identity = vec![0u8; identity_len as usize];
    file.read_exact(&mut identity)?;
    let mut unit = vec![0u8; unit_len as usize];
    file.read_exact(&mut unit)?;
    let actual = crc32c::crc32c_append(
        crc32c::crc32c_append(crc32c::crc32c(&head[..24]), &identity),
        &unit,
    );
    if actual != crc {
        return Ok(Found::Bad("checksum mismatch"));
    }
    if identity != key.object.as_bytes() || head[8..16] != key.index.to_le_bytes() {
        return Ok(Found::Bad("it holds another unit"));
    }
    Ok(Found::Unit(unit))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn key(object: &str, index: u64) -> UnitKey {
        UnitKey {
            object: Arc::from(object),
            index,
        }
    }

    #[test]
    fn names_round_trip_and_strangers_are_refused() {
        let id = EntryId::of(&key("https://h/i.sqfs\0\"e1\"", 0x1234));
        let name = id.name();
        assert_eq!(name.len(), NAME_LEN);
        assert!(name.ends_with("-0000000000001234"), "{name}");
        assert_eq!(EntryId::parse(&name), Some(id));
        for bad in [
            "lock",
            "tmp.1.2",
            &name.to_uppercase(),
            &name[1..],
            &format!("{name}x"),
        ] {
            assert_eq!(EntryId::parse(bad), None, "{bad}");
        }
        let plus = format!("{}+{}", &name[..33], &name[34..]);
        assert_eq!(EntryId::parse(&plus), None);
    }

    #[test]
    fn the_name_hash_is_sha256_so_it_never_changes() {
        // SHA-256("abc") starts ba7816bf8f01cfea414140de5dae2223 (FIPS 180-2, appendix B.1).
        assert!(EntryId::of(&key("abc", 0))
            .name()
            .starts_with("ba7816bf8f01cfea414140de5dae2223-"));
    }

    #[test]
    fn every_damage_is_found() {
        let k = key("https://h/i.sqfs\0\"e1\"", 7);
        let mut good = Vec::new();
        write(&mut good, &k, b"unit bytes").unwrap();
        assert_eq!(good.len() as u64, encoded_len(&k, b"unit bytes").unwrap());
        let check =
            |bytes: &[u8], k: &UnitKey| read(&mut &bytes[..], bytes.len() as u64, k).unwrap();
        assert!(matches!(check(&good, &k), Found::Unit(u) if u == b"unit bytes"));
        for at in 0..good.len() {
            let mut flipped = good.clone();
            flipped[at] ^= 0x10;
            assert!(matches!(check(&flipped, &k), Found::Bad(_)), "flip at {at}");
        }
        for len in 0..good.len() {
            assert!(
                matches!(check(&good[..len], &k), Found::Bad(_)),
                "truncated to {len}"
            );
        }
        assert!(matches!(
            check(&good, &key("https://h/i.sqfs\0\"e2\"", 7)),
            Found::Bad(_)
        ));
        assert!(matches!(
            check(&good, &key("https://h/i.sqfs\0\"e1\"", 8)),
            Found::Bad(_)
        ));
    }
}
