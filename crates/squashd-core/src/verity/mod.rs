//! dm-verity, checked by squashd itself: the hash trees `veritysetup format` writes (format 1
//! and Chrome OS's 0; sha1, sha224, sha256, sha384, sha512; any salt; 512-byte to 1 MiB
//! blocks; with or without the verity superblock; in a file of its own or after the data at a
//! hash offset), and a [`VeritySource`] that checks every byte read through it.
//!
//! A data block is hashed the first time it is read and marked in a bitmap; later reads of it
//! go straight to the underlying source, as with dm-verity's `check_at_most_once`: squashd's
//! caches above keep what was read, and the image is immutable. Hash blocks, once checked up to
//! the root, are kept: the tree's upper levels (about 1/128 of it) for the image's life, the
//! level of data-block hashes in the image's metadata cache tier; the bitmap's and the upper
//! levels' bytes are taken from that tier's budget: verifying costs no memory beyond it (with
//! `metadata_cache=0`, only the bitmap and the upper levels, about 1/10000 of the data).
//!
//! ```
//! use std::sync::Arc;
//! use squashd_core::source::{MemorySource, Source};
//! use squashd_core::verity::{build_tree, TreeLocation, TreeParams, VeritySource};
//! use squashd_core::{CacheBudgets, Caches};
//! let data = vec![7u8; 64 * 4096];
//! let params = TreeParams::new(64, b"salt".to_vec());
//! let (tree, root) = build_tree(&params, &data, 0, true)?;
//! let location = TreeLocation {
//!     params, hash_offset: 0, superblock: true, root_hash: root.as_bytes().to_vec(),
//! };
//! let source = VeritySource::new(
//!     "example".into(), Arc::new(MemorySource::new(data)), 0,
//!     Arc::new(MemorySource::new(tree)), &location,
//!     Arc::new(Caches::new(&CacheBudgets::default())),
//! )?;
//! let mut buf = [0u8; 10];
//! source.read_exact_at(&mut buf, 5000)?;
//! assert_eq!(buf, [7; 10]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod discover;
mod hash;
mod options;
mod params;
mod source;
#[cfg(test)]
mod tests;

pub use discover::{
    discover, find_root_hash, find_signature, read_tree_location, sidecar_names, Found,
    FoundRootHash, RootHashSource, SIDECAR_SUFFIXES, TREE_HEAD_AHEAD,
};
pub use hash::{build_tree, from_hex, hash_block, to_hex, BlockDigest, MAX_DIGEST};
pub use options::{OpenedBeside, VerityMode, VerityOptions};
pub use params::{
    first_tree_block, parse_superblock, write_superblock, Geometry, HashAlgorithm, HashType,
    TreeParams, MAX_SALT, SUPERBLOCK_LEN,
};
pub use source::{TreeLocation, VerityHandle, VeritySource, VerityStats};

/// Why a tree cannot be used, or a block failed it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerityError {
    /// Reading the data or the tree failed.
    #[error("cannot read: {0}")]
    Io(#[source] std::io::Error),
    /// The verity superblock is missing or malformed.
    #[error("verity superblock: {0}")]
    Superblock(String),
    /// The tree's parameters are impossible or do not fit the files.
    #[error("verity tree: {0}")]
    Params(String),
    /// A block does not hash to what the tree (or the root hash) says.
    #[error("{}", describe_bad_block(*.hash_block, *.block, *.position, *.root))]
    BadBlock {
        /// Whether it is a block of the tree (else of the data).
        hash_block: bool,
        /// Its number: a data block counted from the data's start, or a hash block counted
        /// from the hash device's start.
        block: u64,
        /// Its byte position in the file it was read from.
        position: u64,
        /// Whether it was checked against the root hash itself.
        root: bool,
    },
}

fn describe_bad_block(hash_block: bool, block: u64, position: u64, root: bool) -> String {
    match (hash_block, root) {
        (true, true) => format!(
            "verity: the root hash does not match the tree (its top block {block}, at byte \
             {position}): wrong root hash, or a damaged tree"
        ),
        (true, false) => {
            format!("verity: hash block {block} (at byte {position}) fails its hash: damaged tree")
        }
        (false, true) => {
            format!("verity: the root hash does not match data block {block} (at byte {position})")
        }
        (false, false) => format!(
            "verity: data block {block} (at byte {position}) fails its hash: the image is damaged \
             or was changed"
        ),
    }
}

impl VerityError {
    /// Whether the root hash itself failed: the image must not be opened.
    pub fn is_root_mismatch(&self) -> bool {
        matches!(self, VerityError::BadBlock { root: true, .. })
    }

    /// As the I/O error of the read that needed the block (EIO on a mount); the image's name
    /// is added by whoever reports it.
    pub fn into_io(self) -> std::io::Error {
        match self {
            VerityError::Io(e) => e,
            other => std::io::Error::other(other.to_string()),
        }
    }
}
