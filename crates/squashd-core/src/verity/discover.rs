//! Finding an image's tree and root hash the way systemd does for portable services and
//! system extensions: options first, then files beside the image (`IMAGE.verity`,
//! `IMAGE.roothash` in hex, `IMAGE.roothash.p7s`; `IMAGE.raw` is looked up as `IMAGE.*` too),
//! then the `user.verity.roothash` extended attribute of the image file; the same for a `/usr`
//! image's `.usrhash`.

use super::options::{VerityMode, VerityOptions};
use super::params::{parse_superblock, TreeParams, SUPERBLOCK_LEN};
use super::source::TreeLocation;
use super::{from_hex, VerityError};
use crate::source::Source;
use std::path::{Path, PathBuf};

/// Where a root hash came from, for messages and `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootHashSource {
    /// The `roothash=` option.
    Option,
    /// A file beside the image.
    File(PathBuf),
    /// An extended attribute of the image file.
    Xattr(&'static str),
    /// A disk image's `-verity-sig` partition.
    Partition,
}

impl std::fmt::Display for RootHashSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RootHashSource::Option => f.write_str("the roothash option"),
            RootHashSource::File(path) => write!(f, "{}", path.display()),
            RootHashSource::Xattr(name) => write!(f, "the {name} xattr"),
            RootHashSource::Partition => f.write_str("the image's -verity-sig partition"),
        }
    }
}

/// An image's tree and root hash, found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The root hash.
    pub root_hash: Vec<u8>,
    /// Where it came from.
    pub root_hash_from: RootHashSource,
    /// The file holding the tree; `None`: the image file itself, at `hash_offset`.
    pub tree_file: Option<PathBuf>,
    /// Where the verity area starts in the tree's file.
    pub hash_offset: u64,
    /// A detached PKCS#7 signature of the hex root hash, and its file.
    pub signature: Option<(PathBuf, Vec<u8>)>,
}

/// The suffixes of the files beside an image that verity reads.
pub const SIDECAR_SUFFIXES: &[&str] = &[
    ".verity",
    ".roothash",
    ".roothash.p7s",
    ".usrhash",
    ".usrhash.p7s",
];

/// The names of `image`'s file ending in `suffix`, in the order they are looked for, as
/// systemd builds the names of its auxiliary files: a `.raw` ending is replaced, any other
/// name is kept whole.
pub fn sidecar_names(image: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut names = Vec::new();
    let text = image.as_os_str().as_encoded_bytes();
    if let Some(stem) = text.strip_suffix(b".raw") {
        let mut name = stem.to_vec();
        name.extend_from_slice(suffix.as_bytes());
        names.push(PathBuf::from(String::from_utf8_lossy(&name).into_owned()));
    }
    let mut whole = image.as_os_str().to_owned();
    whole.push(suffix);
    names.push(PathBuf::from(whole));
    names
}

/// A sidecar file found: the name it was found at, and the path to read it through.
struct Sidecar {
    shown: PathBuf,
    read: PathBuf,
}

/// The first of `image`'s files ending in `suffix` that is there: among those opened
/// already when `options` has them, else a regular file by that name.
fn first_existing(image: &Path, suffix: &str, options: &VerityOptions) -> Option<Sidecar> {
    let names = sidecar_names(image, suffix);
    match &options.opened_beside {
        Some(opened) => names.into_iter().find_map(|name| {
            opened
                .files
                .iter()
                .find(|(shown, _)| *shown == name)
                .map(|(shown, read)| Sidecar {
                    shown: shown.clone(),
                    read: read.clone(),
                })
        }),
        None => names.into_iter().find(|p| p.is_file()).map(|p| Sidecar {
            shown: p.clone(),
            read: p,
        }),
    }
}

fn read_hex_file(file: &Sidecar) -> Result<Vec<u8>, String> {
    let text = std::fs::read_to_string(&file.read)
        .map_err(|e| format!("{}: cannot read the root hash: {e}", file.shown.display()))?;
    from_hex(&text).map_err(|e| format!("{}: {e}", file.shown.display()))
}

fn read_xattr(image: &Path, name: &str, options: &VerityOptions) -> Option<Vec<u8>> {
    let image = match &options.opened_beside {
        Some(opened) => opened.image.as_deref()?,
        None => image,
    };
    let mut buf = vec![0u8; 256];
    let len = rustix::fs::getxattr(image, name, &mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf[..len.min(buf.len())]).into_owned();
    from_hex(&text).ok()
}

/// A root hash found, and where.
pub type FoundRootHash = (Vec<u8>, RootHashSource);

/// The root hash of `image`: the `roothash=` option, else `IMAGE.roothash` or the
/// `user.verity.roothash` xattr, else the same for `.usrhash`; with the suffix its signature
/// file would have.
pub fn find_root_hash(
    image: &Path,
    options: &VerityOptions,
) -> Result<(Option<FoundRootHash>, &'static str), String> {
    if let Some(hash) = &options.root_hash {
        return Ok((
            Some((hash.clone(), RootHashSource::Option)),
            ".roothash.p7s",
        ));
    }
    for (suffix, sig, attr) in [
        (".roothash", ".roothash.p7s", "user.verity.roothash"),
        (".usrhash", ".usrhash.p7s", "user.verity.usrhash"),
    ] {
        if let Some(file) = first_existing(image, suffix, options) {
            return Ok((
                Some((read_hex_file(&file)?, RootHashSource::File(file.shown))),
                sig,
            ));
        }
        if let Some(hash) = read_xattr(image, attr, options) {
            return Ok((Some((hash, RootHashSource::Xattr(attr))), sig));
        }
    }
    Ok((None, ".roothash.p7s"))
}

/// The detached signature of `image`'s root hash: the `roothash_sig=` option, else the file
/// beside the image ending in `suffix`, read whole.
pub fn find_signature(
    image: &Path,
    options: &VerityOptions,
    suffix: &str,
) -> Result<Option<(PathBuf, Vec<u8>)>, String> {
    let file = match &options.root_hash_sig {
        Some(path) => Some(Sidecar {
            shown: options.shown(path).to_path_buf(),
            read: path.clone(),
        }),
        None => first_existing(image, suffix, options),
    };
    file.map(|file| match std::fs::read(&file.read) {
        Ok(bytes) => Ok((file.shown, bytes)),
        Err(e) => Err(format!(
            "{}: cannot read the signature: {e}",
            file.shown.display()
        )),
    })
    .transpose()
}

/// Looks for `image`'s tree and root hash as `options` say. `Ok(None)`: nothing to verify
/// (`verity=off`, or `auto` and neither found); with `verity=require`, finding nothing is the
/// error. A root hash without a tree (or a tree without root hash, when asked for) is an error
/// in every mode but `off`: someone meant the image to be verified. Errors are one line.
pub fn discover(image: &Path, options: &VerityOptions) -> Result<Option<Found>, String> {
    if options.mode == VerityMode::Off {
        return Ok(None);
    }
    let shown = image.display();
    let (root, sig_names) = find_root_hash(image, options)?;
    let tree = match (&options.verity_data, options.hash_offset) {
        (Some(path), _) => Some((Some(path.clone()), options.hash_offset.unwrap_or(0))),
        (None, Some(offset)) => Some((None, offset)),
        (None, None) => first_existing(image, ".verity", options).map(|file| (Some(file.read), 0)),
    };
    let (root_hash, root_hash_from) = match (root, &tree) {
        (Some(root), Some(_)) => root,
        (None, None) if options.mode == VerityMode::Auto => return Ok(None),
        (None, None) => {
            return Err(format!(
                "{shown}: verity=require or signed, but no hash tree and no root hash were found (looked for \
                 {shown}.verity and {shown}.roothash; give verity_data= and roothash=)"
            ))
        }
        (Some((_, from)), None) => {
            return Err(format!(
                "{shown}: a root hash is given ({from}) but no hash tree: put it in {shown}.verity \
                 or give verity_data= (or verity=off to read it unverified)"
            ))
        }
        (None, Some(_)) => {
            return Err(format!(
                "{shown}: a hash tree is given but no root hash: put it in {shown}.roothash or \
                 give roothash= (or verity=off to read it unverified)"
            ))
        }
    };
    let (tree_file, hash_offset) = tree.unwrap_or((None, 0));
    let signature = find_signature(image, options, sig_names)?;
    Ok(Some(Found {
        root_hash,
        root_hash_from,
        tree_file,
        hash_offset,
        signature,
    }))
}

/// How much of a tree's start is asked for (in the background) before its superblock is read:
/// the superblock and the upper levels (those of a 2 GiB image fill 132 KiB with sha256 and 4
/// KiB blocks), and the whole tree of an image up to about 30 MiB (the E3 services'). Opening
/// then waits for one read of the tree, not one per level and one for the blocks that check
/// the image's tables at its end.
pub const TREE_HEAD_AHEAD: u64 = 256 << 10;

/// The tree in `hash` whose verity area starts at `hash_offset`: read from its superblock, or
/// (`options.superblock` false) made of `options`' parameters over `data_len` bytes of data.
/// Its first [`TREE_HEAD_AHEAD`] bytes are asked for ahead of the checks that will need them.
pub fn read_tree_location(
    hash: &dyn Source,
    hash_offset: u64,
    root_hash: Vec<u8>,
    options: &VerityOptions,
    data_len: u64,
) -> Result<TreeLocation, VerityError> {
    hash.will_need(hash_offset, TREE_HEAD_AHEAD);
    let params = if options.superblock {
        let mut raw = [0u8; SUPERBLOCK_LEN];
        hash.read_exact_at(&mut raw, hash_offset).map_err(|e| {
            VerityError::Superblock(format!("cannot read it at byte {hash_offset}: {e}"))
        })?;
        parse_superblock(&raw)?
    } else {
        TreeParams {
            algorithm: options.algorithm,
            data_block_size: options.block_size,
            hash_block_size: options.block_size,
            data_blocks: data_len / u64::from(options.block_size),
            ..TreeParams::new(0, options.salt.clone())
        }
    };
    Ok(TreeLocation {
        params,
        hash_offset,
        superblock: options.superblock,
        root_hash,
    })
}
