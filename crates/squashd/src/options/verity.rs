//! The verity options ([`VERITY_OPTIONS`]): every key of [`VerityOptions::KEYS`] as a mount
//! option, parsed by [`VerityOptions::set`] into [`Options::verity`]. The mount funnel's callers
//! give them to [`crate::verity::verify_opened`] between opening the image and reading it.

use super::table::{Arg, DefaultValue, OptionSpec, Value};
use super::Options;

/// Why a user may not set the trusted signers: `verity=signed` would then trust whatever the
/// user signed.
const CERTS_ARE_THE_DAEMONS: &str = "the trusted signers are the daemon's to set";

/// One verity option: its value goes to [`VerityOptions::set`] under the same name.
macro_rules! verity_option {
    ($name:literal, $placeholder:literal, $default:expr, $root_only:expr, $help:literal) => {
        OptionSpec {
            name: $name,
            root_only: $root_only,
            value: Value::Text($placeholder),
            default: $default,
            help: $help,
            apply: |o, a| o.set_verity($name, a),
        }
    };
}

/// Every verity option, in `--help`'s order (after [`super::OPTIONS`]).
pub(crate) const VERITY_OPTIONS: &[OptionSpec] = &[
    verity_option!(
        "verity",
        "MODE",
        DefaultValue::Value("auto"),
        None,
        "check the image against its dm-verity hash tree: auto (when a tree and a root hash \
         are found: IMAGE.verity, IMAGE.roothash, the user.verity.roothash xattr, a disk \
         image's -verity partition), require, signed (a root hash signed by a trusted \
         certificate), or off; a block that fails its check reads as EIO"
    ),
    verity_option!(
        "roothash",
        "HEX",
        DefaultValue::None,
        None,
        "the root hash, instead of IMAGE.roothash"
    ),
    verity_option!(
        "usrhash",
        "HEX",
        DefaultValue::None,
        None,
        "the same as roothash (systemd's name for a /usr image)"
    ),
    verity_option!(
        "verity_data",
        "PATH",
        DefaultValue::None,
        None,
        "the file holding the hash tree, instead of IMAGE.verity"
    ),
    verity_option!(
        "roothash_sig",
        "PATH",
        DefaultValue::None,
        None,
        "a PKCS#7 signature of the hex root hash, instead of IMAGE.roothash.p7s, checked \
         against the certificates in /etc/verity.d"
    ),
    verity_option!(
        "usrhash_sig",
        "PATH",
        DefaultValue::None,
        None,
        "the same as roothash_sig"
    ),
    verity_option!(
        "verity_certs",
        "DIR",
        DefaultValue::Described("systemd's verity.d directories"),
        Some(CERTS_ARE_THE_DAEMONS),
        "the trusted signers' certificates (*.crt)"
    ),
    verity_option!(
        "verity_hash_offset",
        "BYTES",
        DefaultValue::None,
        None,
        "the tree is in the image file itself from this byte on (veritysetup --hash-offset)"
    ),
    verity_option!(
        "verity_superblock",
        "yes|no",
        DefaultValue::Described("yes"),
        None,
        "no: the tree has no superblock (veritysetup --no-superblock); give its parameters \
         with the next three"
    ),
    verity_option!(
        "verity_hash",
        "ALG",
        DefaultValue::Described("sha256"),
        None,
        "a tree without superblock: its hash (sha1, sha224, sha256, sha384, sha512)"
    ),
    verity_option!(
        "verity_salt",
        "HEX",
        DefaultValue::Described("none"),
        None,
        "a tree without superblock: its salt"
    ),
    verity_option!(
        "verity_block_size",
        "BYTES",
        DefaultValue::Described("4096"),
        None,
        "a tree without superblock: its data and hash block size"
    ),
];

impl Options {
    /// Sets the verity option `key` to the text given.
    fn set_verity(&mut self, key: &str, arg: Arg<'_>) -> Result<(), String> {
        let Arg::Text(value) = arg else {
            return Ok(());
        };
        match self.verity.set(key, value)? {
            true => Ok(()),
            false => Err(format!("{key} is not a verity option")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use squashd_core::verity::{VerityMode, VerityOptions};

    #[test]
    fn every_verity_key_is_a_mount_option() {
        for key in VerityOptions::KEYS {
            assert!(
                VERITY_OPTIONS.iter().any(|s| s.name == *key),
                "{key} missing"
            );
        }
        assert_eq!(VERITY_OPTIONS.len(), VerityOptions::KEYS.len());
    }

    #[test]
    fn verity_options_parse_into_the_verity_field() {
        let hash = "9de18652fe74edfb9b805aaed72ae2aa48f94333f1ba5c452ac33b1c39325174";
        let given = [format!(
            "verity=require,roothash={hash},verity_data=/t/a.verity,roothash_sig=/t/a.p7s"
        )];
        let o = Options::parse(
            &given,
            std::path::Path::new("a"),
            super::super::Context::LoneMount,
        )
        .unwrap();
        assert_eq!(o.verity.mode, VerityMode::Require);
        assert_eq!(o.verity.root_hash.as_ref().map(|h| h.len()), Some(32));
        assert_eq!(o.verity.verity_data, Some("/t/a.verity".into()));
        assert_eq!(o.verity.root_hash_sig, Some("/t/a.p7s".into()));
        let bad = Options::parse(
            &["verity=maybe".to_string()],
            std::path::Path::new("a"),
            super::super::Context::LoneMount,
        )
        .unwrap_err()
        .to_string();
        assert!(
            bad.contains("mount option verity") && !bad.contains('\n'),
            "{bad}"
        );
    }
}
