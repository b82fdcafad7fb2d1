//! The parameters of a dm-verity hash tree as `veritysetup format` writes it (format version
//! 1, and the Chrome OS format 0), its on-disk superblock, and where each level of the tree
//! lies in the hash area. Pure: no I/O.

use super::VerityError;

/// The digests `veritysetup` offers that RustCrypto's maintained crates compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashAlgorithm {
    /// SHA-1 (20-byte digests; `veritysetup --hash sha1`).
    Sha1,
    /// SHA-224.
    Sha224,
    /// SHA-256, the default of `veritysetup` and of systemd.
    Sha256,
    /// SHA-384.
    Sha384,
    /// SHA-512.
    Sha512,
}

impl HashAlgorithm {
    /// The algorithm called `name` by `veritysetup` (its superblock's `algorithm` field).
    pub fn from_name(name: &str) -> Option<HashAlgorithm> {
        Some(match name.to_ascii_lowercase().as_str() {
            "sha1" => HashAlgorithm::Sha1,
            "sha224" => HashAlgorithm::Sha224,
            "sha256" => HashAlgorithm::Sha256,
            "sha384" => HashAlgorithm::Sha384,
            "sha512" => HashAlgorithm::Sha512,
            _ => return None,
        })
    }

    /// Its name as `veritysetup` writes it.
    pub fn name(self) -> &'static str {
        match self {
            HashAlgorithm::Sha1 => "sha1",
            HashAlgorithm::Sha224 => "sha224",
            HashAlgorithm::Sha256 => "sha256",
            HashAlgorithm::Sha384 => "sha384",
            HashAlgorithm::Sha512 => "sha512",
        }
    }

    /// Bytes in one digest.
    pub fn digest_len(self) -> usize {
        match self {
            HashAlgorithm::Sha1 => 20,
            HashAlgorithm::Sha224 => 28,
            HashAlgorithm::Sha256 => 32,
            HashAlgorithm::Sha384 => 48,
            HashAlgorithm::Sha512 => 64,
        }
    }
}

/// How a block and the salt are hashed together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashType {
    /// Format 0 (Chrome OS): the block, then the salt.
    ChromeOs,
    /// Format 1, veritysetup's default: the salt, then the block.
    Normal,
}

/// Everything needed to find and check a hash tree, besides the root hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeParams {
    /// The digest.
    pub algorithm: HashAlgorithm,
    /// Format 1 or 0.
    pub hash_type: HashType,
    /// Bytes per data block (a power of two, 512 to 1 MiB).
    pub data_block_size: u32,
    /// Bytes per hash block (a power of two, 512 to 1 MiB).
    pub hash_block_size: u32,
    /// Data blocks the tree covers, from the start of the data device.
    pub data_blocks: u64,
    /// The salt (up to 256 bytes; may be empty).
    pub salt: Vec<u8>,
}

impl TreeParams {
    /// veritysetup's defaults (sha256, format 1, 4096-byte blocks) for `data_blocks` blocks.
    pub fn new(data_blocks: u64, salt: Vec<u8>) -> TreeParams {
        TreeParams {
            algorithm: HashAlgorithm::Sha256,
            hash_type: HashType::Normal,
            data_block_size: 4096,
            hash_block_size: 4096,
            data_blocks,
            salt,
        }
    }

    /// Checks the numbers a superblock or a user gave.
    pub fn check(&self) -> Result<(), VerityError> {
        for (what, size) in [
            ("data block size", self.data_block_size),
            ("hash block size", self.hash_block_size),
        ] {
            if !size.is_power_of_two() || !(512..=1 << 20).contains(&size) {
                return Err(VerityError::Params(format!(
                    "{what} {size} is not a power of two from 512 to 1048576"
                )));
            }
        }
        if self.salt.len() > MAX_SALT {
            return Err(VerityError::Params(format!(
                "a salt of {} bytes is longer than {MAX_SALT}",
                self.salt.len()
            )));
        }
        if self.algorithm.digest_len() * 2 > self.hash_block_size as usize {
            return Err(VerityError::Params(format!(
                "{}-byte hash blocks hold fewer than two {} digests",
                self.hash_block_size,
                self.algorithm.name()
            )));
        }
        if self.data_blocks == 0 {
            return Err(VerityError::Params("the tree covers no data block".into()));
        }
        self.data_blocks
            .checked_mul(u64::from(self.data_block_size))
            .ok_or_else(|| VerityError::Params("the data area overflows 64 bits".into()))?;
        Ok(())
    }

    /// Bytes of data the tree covers.
    pub fn data_len(&self) -> u64 {
        self.data_blocks
            .saturating_mul(u64::from(self.data_block_size))
    }
}

/// The longest salt a superblock holds.
pub const MAX_SALT: usize = 256;
/// The superblock's size on disk.
pub const SUPERBLOCK_LEN: usize = 512;
const SIGNATURE: &[u8; 8] = b"verity\0\0";

/// Reads a verity superblock (`veritysetup format` without `--no-superblock`).
pub fn parse_superblock(raw: &[u8; SUPERBLOCK_LEN]) -> Result<TreeParams, VerityError> {
    let u32_at = |at: usize| u32::from_le_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
    if &raw[..8] != SIGNATURE {
        return Err(VerityError::Superblock(
            "no verity superblock (signature \"verity\") where the tree should start".into(),
        ));
    }
    let version = u32_at(8);
    if version != 1 {
        return Err(VerityError::Superblock(format!(
            "superblock version {version}, only 1 is known"
        )));
    }
    let hash_type = match u32_at(12) {
        0 => HashType::ChromeOs,
        1 => HashType::Normal,
        other => {
            return Err(VerityError::Superblock(format!(
                "hash type {other}, only 0 and 1 are known"
            )))
        }
    };
    let name_field = &raw[32..64];
    let name_len = name_field.iter().position(|&b| b == 0).unwrap_or(32);
    let name = String::from_utf8_lossy(&name_field[..name_len]).into_owned();
    let algorithm = HashAlgorithm::from_name(&name).ok_or_else(|| {
        VerityError::Superblock(format!(
            "hash algorithm {name:?} is not one of sha1, sha224, sha256, sha384, sha512"
        ))
    })?;
    let mut data_blocks = [0u8; 8];
    data_blocks.copy_from_slice(&raw[72..80]);
    let salt_len = usize::from(u16::from_le_bytes([raw[80], raw[81]]));
    if salt_len > MAX_SALT {
        return Err(VerityError::Superblock(format!(
            "salt of {salt_len} bytes is longer than {MAX_SALT}"
        )));
    }
    let params = TreeParams {
        algorithm,
        hash_type,
        data_block_size: u32_at(64),
        hash_block_size: u32_at(68),
        data_blocks: u64::from_le_bytes(data_blocks),
        salt: raw[88..88 + salt_len].to_vec(),
    };
    params
        .check()
        .map_err(|e| VerityError::Superblock(e.to_string()))?;
    Ok(params)
}

/// Writes the superblock `veritysetup format` would write for `params` (with a zero UUID).
pub fn write_superblock(params: &TreeParams) -> [u8; SUPERBLOCK_LEN] {
    let mut raw = [0u8; SUPERBLOCK_LEN];
    raw[..8].copy_from_slice(SIGNATURE);
    raw[8..12].copy_from_slice(&1u32.to_le_bytes());
    let hash_type: u32 = match params.hash_type {
        HashType::ChromeOs => 0,
        HashType::Normal => 1,
    };
    raw[12..16].copy_from_slice(&hash_type.to_le_bytes());
    let name = params.algorithm.name().as_bytes();
    raw[32..32 + name.len()].copy_from_slice(name);
    raw[64..68].copy_from_slice(&params.data_block_size.to_le_bytes());
    raw[68..72].copy_from_slice(&params.hash_block_size.to_le_bytes());
    raw[72..80].copy_from_slice(&params.data_blocks.to_le_bytes());
    let salt_len = params.salt.len().min(MAX_SALT);
    raw[80..82].copy_from_slice(&(salt_len as u16).to_le_bytes());
    raw[88..88 + salt_len].copy_from_slice(&params.salt[..salt_len]);
    raw
}

/// Where the tree's levels lie in the hash device, in hash blocks, as dm-verity and
/// veritysetup place them: the level nearest the root first, the level of data-block hashes
/// last; digests in slots of a power-of-two size, as many to a block as fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Geometry {
    /// log2 of the digests one hash block holds.
    pub per_block_bits: u32,
    /// Bytes per digest slot in a hash block.
    pub slot_len: usize,
    /// For each level, bottom (hashes of data blocks) first: its first hash block, counted
    /// from the start of the hash device, and its number of blocks.
    pub levels: Vec<(u64, u64)>,
    /// Hash blocks from the start of the hash device to the end of the tree.
    pub end_block: u64,
}

impl Geometry {
    /// The layout of `params`'s tree starting at hash block `first_block`.
    pub fn new(params: &TreeParams, first_block: u64) -> Result<Geometry, VerityError> {
        params.check()?;
        let per_block = params.hash_block_size as usize / params.algorithm.digest_len();
        // A power of two: dm-verity indexes slots with shifts.
        let per_block_bits = per_block.ilog2();
        let slot_len = params.hash_block_size as usize >> per_block_bits;
        let mut level_count = 0u32;
        while per_block_bits * level_count < 64
            && (params.data_blocks - 1) >> (per_block_bits * level_count) != 0
        {
            level_count += 1;
        }
        let mut levels = vec![(0u64, 0u64); level_count as usize];
        let mut position = first_block;
        for level in (0..level_count).rev() {
            let shift = per_block_bits * (level + 1);
            let blocks = if shift >= 64 {
                1
            } else {
                (params.data_blocks - 1) >> shift
            } + 1;
            levels[level as usize] = (position, blocks);
            position = position
                .checked_add(blocks)
                .ok_or_else(|| VerityError::Params("the hash area overflows 64 bits".into()))?;
        }
        position
            .checked_mul(u64::from(params.hash_block_size))
            .ok_or_else(|| VerityError::Params("the hash area overflows 64 bits".into()))?;
        Ok(Geometry {
            per_block_bits,
            slot_len,
            levels,
            end_block: position,
        })
    }
}

/// The first hash block of the tree in a hash device whose verity area starts at byte
/// `hash_offset`: right there without a superblock, else after the superblock, rounded up to
/// a hash block (veritysetup's `VERITY_hash_offset_block`).
pub fn first_tree_block(hash_offset: u64, hash_block_size: u32, superblock: bool) -> u64 {
    let size = u64::from(hash_block_size);
    if superblock {
        hash_offset
            .saturating_add(SUPERBLOCK_LEN as u64)
            .div_ceil(size)
    } else {
        hash_offset / size
    }
}
