//! Hashing blocks with their salt, and building a tree in memory the way `veritysetup format`
//! does (for tests and for images squashd writes itself).

use super::params::{first_tree_block, write_superblock, Geometry, HashAlgorithm, HashType};
use super::{TreeParams, VerityError};
use sha2::Digest;

/// The longest digest of any [`HashAlgorithm`].
pub const MAX_DIGEST: usize = 64;

/// A digest, sized for the longest algorithm; `len` bytes of it are used.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct BlockDigest {
    bytes: [u8; MAX_DIGEST],
    len: usize,
}

impl BlockDigest {
    /// A digest of `bytes` (at most [`MAX_DIGEST`] of them are kept).
    pub fn from_slice(bytes: &[u8]) -> BlockDigest {
        let len = bytes.len().min(MAX_DIGEST);
        let mut digest = BlockDigest {
            bytes: [0; MAX_DIGEST],
            len,
        };
        digest.bytes[..len].copy_from_slice(&bytes[..len]);
        digest
    }

    /// The digest's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl std::fmt::Debug for BlockDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&to_hex(self.as_bytes()))
    }
}

fn salted<D: Digest>(salt: &[u8], block: &[u8], hash_type: HashType, out: &mut [u8]) {
    let mut hasher = D::new();
    match hash_type {
        HashType::Normal => {
            hasher.update(salt);
            hasher.update(block);
        }
        HashType::ChromeOs => {
            hasher.update(block);
            hasher.update(salt);
        }
    }
    out.copy_from_slice(&hasher.finalize());
}

/// The digest of one block (data or hash) under `params`: salt and block hashed together in
/// the order its format says.
pub fn hash_block(params: &TreeParams, block: &[u8]) -> BlockDigest {
    let len = params.algorithm.digest_len();
    let mut digest = BlockDigest {
        bytes: [0; MAX_DIGEST],
        len,
    };
    let out = &mut digest.bytes[..len];
    let (salt, kind) = (&params.salt[..], params.hash_type);
    match params.algorithm {
        HashAlgorithm::Sha1 => salted::<sha1::Sha1>(salt, block, kind, out),
        HashAlgorithm::Sha224 => salted::<sha2::Sha224>(salt, block, kind, out),
        HashAlgorithm::Sha256 => salted::<sha2::Sha256>(salt, block, kind, out),
        HashAlgorithm::Sha384 => salted::<sha2::Sha384>(salt, block, kind, out),
        HashAlgorithm::Sha512 => salted::<sha2::Sha512>(salt, block, kind, out),
    }
    digest
}

/// Lower-case hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The bytes of a hex string (white space around it ignored), or why not.
pub fn from_hex(text: &str) -> Result<Vec<u8>, String> {
    // The errors do not repeat the text: it may come from a file the caller cannot read (a
    // daemon reads IMAGE.roothash for a user, and its error goes back to that user).
    let text = text.trim();
    if text.len() % 2 != 0 {
        return Err(format!(
            "{} characters: an odd number of hex digits",
            text.len()
        ));
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            text.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(|| format!("not hex (at character {i})"))
        })
        .collect()
}

/// A tree `veritysetup format` would write for `data`, as a hash device: the superblock (when
/// `superblock`) at `hash_offset`, the tree after it; bytes before `hash_offset` are zero. The
/// second value is the root hash.
pub fn build_tree(
    params: &TreeParams,
    data: &[u8],
    hash_offset: u64,
    superblock: bool,
) -> Result<(Vec<u8>, BlockDigest), VerityError> {
    let data_len = usize::try_from(params.data_len())
        .ok()
        .filter(|&len| len <= data.len())
        .ok_or_else(|| {
            VerityError::Params(format!(
                "{} data blocks do not fit in {} bytes",
                params.data_blocks,
                data.len()
            ))
        })?;
    let hash_size = params.hash_block_size as usize;
    let first = first_tree_block(hash_offset, params.hash_block_size, superblock);
    let geometry = Geometry::new(params, first)?;
    let end = usize::try_from(geometry.end_block)
        .ok()
        .and_then(|blocks| blocks.checked_mul(hash_size))
        .ok_or_else(|| VerityError::Params("the tree does not fit in memory".into()))?;
    let mut device = vec![0u8; end];
    if superblock {
        let at = usize::try_from(hash_offset).unwrap_or(usize::MAX);
        device
            .get_mut(at..at.saturating_add(512))
            .ok_or_else(|| VerityError::Params("no room for the superblock".into()))?
            .copy_from_slice(&write_superblock(params));
    }
    // Digests of the level below, level by level upwards.
    let mut below: Vec<BlockDigest> = data[..data_len]
        .chunks(params.data_block_size as usize)
        .map(|block| hash_block(params, block))
        .collect();
    for &(first_block, blocks) in &geometry.levels {
        let start = first_block as usize * hash_size;
        let level = &mut device[start..start + blocks as usize * hash_size];
        for (i, digest) in below.iter().enumerate() {
            let at = i * geometry.slot_len;
            level[at..at + digest.len].copy_from_slice(digest.as_bytes());
        }
        below = level
            .chunks(hash_size)
            .map(|block| hash_block(params, block))
            .collect();
    }
    let root = below
        .first()
        .copied()
        .ok_or_else(|| VerityError::Params("the tree covers no data block".into()))?;
    Ok((device, root))
}

#[cfg(test)]
mod hex_tests {
    #[test]
    fn errors_do_not_repeat_the_text() {
        for bad in ["secret!", "root:x:0:0:root:/root:/bin/bash\n"] {
            let e = super::from_hex(bad).unwrap_err();
            assert!(!e.contains("secret") && !e.contains("root"), "{e}");
        }
        assert_eq!(super::from_hex(" 0aff\n").unwrap(), [0x0a, 0xff]);
    }
}
