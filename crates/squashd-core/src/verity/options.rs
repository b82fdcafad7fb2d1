//! How an image is to be verified, as `key=value` options: the same keys for `mount -o`,
//! `attach`, serve configs and the offline tools' `--verity...` flags.
//!
//! ```
//! use squashd_core::verity::{VerityMode, VerityOptions};
//! let mut options = VerityOptions::default();
//! assert!(options.set("verity", "require")?);
//! let hash = "9de18652fe74edfb9b805aaed72ae2aa48f94333f1ba5c452ac33b1c39325174";
//! assert!(options.set("roothash", hash)?);
//! assert!(!options.set("uid", "0")?); // not a verity key: left to the caller
//! assert_eq!(options.mode, VerityMode::Require);
//! assert_eq!(options.root_hash.as_ref().map(|h| h[..2].to_vec()), Some(vec![0x9d, 0xe1]));
//! assert!(options.set("roothash", "00ff").is_err()); // too short for any digest
//! # Ok::<(), String>(())
//! ```

use super::hash::from_hex;
use super::params::{HashAlgorithm, MAX_SALT};
use std::path::{Path, PathBuf};

/// When to verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VerityMode {
    /// Verify when a tree and a root hash are found; open unverified when neither is.
    #[default]
    Auto,
    /// Refuse an image without a tree and a root hash.
    Require,
    /// Refuse an image without a tree and a root hash signed by a trusted certificate.
    Signed,
    /// Never verify (and look for nothing).
    Off,
}

impl std::str::FromStr for VerityMode {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "auto" => Ok(VerityMode::Auto),
            "require" | "required" | "on" | "yes" => Ok(VerityMode::Require),
            "signed" => Ok(VerityMode::Signed),
            "off" | "no" => Ok(VerityMode::Off),
            other => Err(format!("verity={other}: use auto, require, signed or off")),
        }
    }
}

/// How to find and check an image's hash tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerityOptions {
    /// `verity=auto|require|signed|off`.
    pub mode: VerityMode,
    /// `roothash=HEX`: the root hash, instead of the one found beside the image.
    pub root_hash: Option<Vec<u8>>,
    /// `verity_data=PATH`: the file holding the tree, instead of `IMAGE.verity`.
    pub verity_data: Option<PathBuf>,
    /// `roothash_sig=PATH`: a detached PKCS#7 signature of the hex root hash, instead of
    /// `IMAGE.roothash.p7s`.
    pub root_hash_sig: Option<PathBuf>,
    /// `verity_certs=DIR`: the trusted signers' certificates (`*.crt`), instead of systemd's
    /// `verity.d` directories.
    pub certs_dir: Option<PathBuf>,
    /// `verity_hash_offset=BYTES`: the tree is in the image file itself, from this byte on
    /// (`veritysetup format --hash-offset`), when no `verity_data` is given.
    pub hash_offset: Option<u64>,
    /// `verity_superblock=no`: the tree has no superblock (`veritysetup --no-superblock`);
    /// its parameters are then the following.
    pub superblock: bool,
    /// `verity_hash=ALG` for a tree without superblock (default sha256).
    pub algorithm: HashAlgorithm,
    /// `verity_salt=HEX` for a tree without superblock (default none).
    pub salt: Vec<u8>,
    /// `verity_block_size=BYTES`: data and hash block size of a tree without superblock
    /// (default 4096).
    pub block_size: u32,
    /// The files beside the image, opened already (by the daemon, with the rights of the user
    /// who attaches the image): when set, discovery reads these and no path beside the image.
    /// Not an option a user can give.
    pub opened_beside: Option<OpenedBeside>,
}

/// The files beside an image where verity looks (see [`super::sidecar_names`]), opened
/// once by whoever checked that they may be read; discovery then reads them through these
/// descriptors rather than by name, so that no file swapped in after the check is read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenedBeside {
    /// Each sidecar found: the name it was found at (for messages) and a path that reads the
    /// very file opened (`/proc/self/fd/N`, held open by the caller). A name not here is absent.
    pub files: Vec<(PathBuf, PathBuf)>,
    /// Where the image's extended attributes are read (`/proc/self/fd/N` of the image opened
    /// for the user); `None`: none are read.
    pub image: Option<PathBuf>,
    /// The files the options name (`verity_data=`, `roothash_sig=`), opened likewise: the path
    /// the user gave (for messages) and the path the option now holds, which reads the file
    /// opened.
    pub given: Vec<(PathBuf, PathBuf)>,
}

impl Default for VerityOptions {
    fn default() -> Self {
        VerityOptions {
            mode: VerityMode::Auto,
            root_hash: None,
            verity_data: None,
            root_hash_sig: None,
            certs_dir: None,
            hash_offset: None,
            superblock: true,
            algorithm: HashAlgorithm::Sha256,
            salt: Vec::new(),
            block_size: 4096,
            opened_beside: None,
        }
    }
}

impl VerityOptions {
    /// The keys [`set`](Self::set) takes.
    pub const KEYS: &'static [&'static str] = &[
        "verity",
        "roothash",
        "usrhash",
        "verity_data",
        "roothash_sig",
        "usrhash_sig",
        "verity_certs",
        "verity_hash_offset",
        "verity_superblock",
        "verity_hash",
        "verity_salt",
        "verity_block_size",
    ];

    /// Applies one `key=value` option. `Ok(false)`: `key` is not a verity option (the caller
    /// handles it); `Err`: a verity option with a bad value, said in one line.
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool, String> {
        let number = |value: &str| {
            value
                .parse::<u64>()
                .map_err(|_| format!("{key}={value}: not a number of bytes"))
        };
        match key {
            "verity" => self.mode = value.parse()?,
            "roothash" | "usrhash" => {
                let hash = from_hex(value).map_err(|e| format!("{key}: {e}"))?;
                if !(20..=64).contains(&hash.len()) {
                    return Err(format!(
                        "{key}: a root hash has 20 to 64 bytes (40 to 128 hex digits), not {}",
                        hash.len()
                    ));
                }
                self.root_hash = Some(hash);
            }
            "verity_data" => self.verity_data = Some(PathBuf::from(value)),
            "roothash_sig" | "usrhash_sig" => self.root_hash_sig = Some(PathBuf::from(value)),
            "verity_certs" => self.certs_dir = Some(PathBuf::from(value)),
            "verity_hash_offset" => self.hash_offset = Some(number(value)?),
            "verity_superblock" => {
                self.superblock = match value {
                    "yes" | "on" | "1" => true,
                    "no" | "off" | "0" => false,
                    _ => return Err(format!("{key}={value}: use yes or no")),
                }
            }
            "verity_hash" => {
                self.algorithm = HashAlgorithm::from_name(value).ok_or_else(|| {
                    format!("{key}={value}: use sha1, sha224, sha256, sha384 or sha512")
                })?
            }
            "verity_salt" => {
                let salt = if value == "-" {
                    Vec::new()
                } else {
                    from_hex(value).map_err(|e| format!("{key}: {e}"))?
                };
                if salt.len() > MAX_SALT {
                    return Err(format!("{key}: longer than {MAX_SALT} bytes"));
                }
                self.salt = salt;
            }
            "verity_block_size" => {
                let size = number(value)?;
                self.block_size = u32::try_from(size)
                    .ok()
                    .filter(|s| s.is_power_of_two() && (512..=1 << 20).contains(s))
                    .ok_or_else(|| format!("{key}={value}: a power of two from 512 to 1048576"))?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The name to show in messages for `path`, a file verity reads: the name a user gave or
    /// the file was found at when the daemon opened it for them (and reads it through
    /// `/proc/self/fd/N`, which says nothing to the user); else `path` itself.
    pub fn shown<'a>(&'a self, path: &'a Path) -> &'a Path {
        self.opened_beside
            .as_ref()
            .and_then(|opened| {
                opened
                    .files
                    .iter()
                    .chain(&opened.given)
                    .find(|(_, read)| read == path)
            })
            .map_or(path, |(shown, _)| shown.as_path())
    }

    /// Options from a comma-separated `key=value` list holding only verity keys.
    pub fn parse(list: &str) -> Result<VerityOptions, String> {
        let mut options = VerityOptions::default();
        for item in list.split(',').filter(|item| !item.is_empty()) {
            let (key, value) = item.split_once('=').unwrap_or((item, ""));
            if !options.set(key, value)? {
                return Err(format!(
                    "{key}: not a verity option (use {})",
                    Self::KEYS.join(", ")
                ));
            }
        }
        Ok(options)
    }
}
