//! Verity for every command: finds an image's hash tree and root hash (options, then the files
//! and xattr beside it as systemd looks for them) and puts a [`VeritySource`] between the image
//! and its bytes, so that nothing above reads an unchecked byte. The mount funnel calls
//! [`verify_opened`] on the [`OpenedSource`] that `remote::open`/`remote::from_file` gave it,
//! before `Image::from_source`, as the offline tools do (`cli::ImageArgs::open_located`).

use crate::remote::OpenedSource;
use anyhow::anyhow;
use squashd_core::source::{FileSource, Source};
use squashd_core::verity::{
    discover, read_tree_location, to_hex, RootHashSource, VerityHandle, VerityMode, VerityOptions,
    VeritySource,
};
use std::path::Path;
use std::sync::Arc;

/// An image opened through its hash tree.
#[derive(Clone)]
pub(crate) struct Verified {
    /// The checking source (the image reads through a clone of it): `squashd verify` checks
    /// every block with it.
    pub(crate) source: VeritySource,
    /// Its counters, for `status` (read by the mount funnel once it wires verity in).
    #[allow(dead_code)]
    pub(crate) handle: VerityHandle,
    /// Where the root hash came from.
    pub(crate) root_hash_from: RootHashSource,
    /// The root hash, in hex.
    pub(crate) root_hash: String,
}

/// The verity flags of the offline tools (the `key=value` options of mounts, as flags).
#[derive(clap::Args, Debug, Clone)]
pub struct VerityArgs {
    /// Check the image against its dm-verity hash tree: auto (when a tree and a root hash are
    /// found: IMAGE.verity, IMAGE.roothash, the user.verity.roothash xattr, a disk image's
    /// -verity partition), require, or off.
    #[arg(long, value_name = "MODE", default_value = "auto")]
    pub verity: String,
    /// The root hash (hex), instead of IMAGE.roothash.
    #[arg(long, value_name = "HEX")]
    pub roothash: Option<String>,
    /// The file holding the hash tree, instead of IMAGE.verity.
    #[arg(long, value_name = "PATH")]
    pub verity_data: Option<std::path::PathBuf>,
    /// A PKCS#7 signature of the hex root hash, instead of IMAGE.roothash.p7s.
    #[arg(long, value_name = "PATH")]
    pub roothash_sig: Option<std::path::PathBuf>,
    /// The tree is in the image file itself from this byte on (veritysetup --hash-offset).
    #[arg(long, value_name = "BYTES")]
    pub verity_hash_offset: Option<u64>,
    /// Any verity option of mounts, as KEY=VALUE (repeatable): for a tree without superblock
    /// verity_superblock=no, verity_hash=ALG, verity_salt=HEX, verity_block_size=BYTES.
    #[arg(long = "verity-opt", value_name = "KEY=VALUE")]
    pub verity_opt: Vec<String>,
}

impl Default for VerityArgs {
    fn default() -> Self {
        VerityArgs {
            verity: "auto".into(),
            roothash: None,
            verity_data: None,
            roothash_sig: None,
            verity_hash_offset: None,
            verity_opt: Vec::new(),
        }
    }
}

impl VerityArgs {
    /// The flags as [`VerityOptions`].
    pub(crate) fn options(&self) -> anyhow::Result<VerityOptions> {
        let mut options = VerityOptions::default();
        let mut set = |key: &str, value: &str| {
            options
                .set(key, value)
                .map_err(|e| anyhow!(crate::cli::UsageError(format!("--{e}"))))
        };
        set("verity", &self.verity)?;
        if let Some(hash) = &self.roothash {
            set("roothash", hash)?;
        }
        if let Some(path) = &self.verity_data {
            set("verity_data", &path.to_string_lossy())?;
        }
        if let Some(path) = &self.roothash_sig {
            set("roothash_sig", &path.to_string_lossy())?;
        }
        if let Some(offset) = self.verity_hash_offset {
            set("verity_hash_offset", &offset.to_string())?;
        }
        for item in &self.verity_opt {
            let (key, value) = item.split_once('=').unwrap_or((item, ""));
            if !set(key, value)? {
                return Err(anyhow!(crate::cli::UsageError(format!(
                    "--verity-opt {key}: not a verity option (use {})",
                    VerityOptions::KEYS.join(", ")
                ))));
            }
        }
        Ok(options)
    }
}

/// Puts `opened` (read from `image`) behind its hash tree as `options` say: unchanged when
/// there is nothing to verify (`verity=off`, or `auto` and no tree found); an error of one line
/// when a tree is required and missing, cannot be read, or does not match its root hash.
pub(crate) fn verify_opened(
    opened: OpenedSource,
    image: &Path,
    options: &VerityOptions,
) -> anyhow::Result<(OpenedSource, Option<Verified>)> {
    if options.mode == VerityMode::Off {
        return Ok((opened, None));
    }
    let name = opened.name.clone();
    let found = if opened.remote.is_some() {
        // A remote image's URL.verity and URL.roothash are not fetched (yet): only a tree and
        // a root hash given as options are used.
        match (&options.root_hash, &options.verity_data) {
            (Some(hash), Some(tree)) => Some(squashd_core::verity::Found {
                root_hash: hash.clone(),
                root_hash_from: RootHashSource::Option,
                tree_file: Some(tree.clone()),
                hash_offset: options.hash_offset.unwrap_or(0),
                signature: None,
            }),
            _ if options.mode == VerityMode::Require => {
                return Err(anyhow!(
                    "{name}: verity=require: a remote image's tree and root hash must be given \
                     (verity_data=PATH, roothash=HEX)"
                ))
            }
            _ => None,
        }
    } else {
        discover(image, options).map_err(|e| anyhow!(e))?
    };
    let Some(found) = found else {
        return Ok((opened, None));
    };
    if let Some((path, _)) = &found.signature {
        // Checking PKCS#7 signatures against /etc/verity.d is not built yet: say so rather
        // than pretend.
        tracing::warn!(
            "{name}: the root hash signature {} is not checked (not supported yet)",
            path.display()
        );
    }
    let data: Arc<dyn Source> = Arc::from(opened.source);
    let hash: Arc<dyn Source> = match (&found.tree_file, &opened.remote) {
        (Some(path), _) => Arc::new(
            FileSource::open(path)
                .map_err(|e| anyhow!("{}: cannot open the hash tree: {e}", path.display()))?,
        ),
        (None, Some(remote)) => Arc::new(remote.clone()),
        (None, None) => Arc::new(
            FileSource::open(image)
                .map_err(|e| anyhow!("{name}: cannot open it again for its hash tree: {e}"))?,
        ),
    };
    let tree_name = found
        .tree_file
        .as_ref()
        .map_or_else(|| name.to_string(), |p| p.display().to_string());
    let data_len = match found.tree_file {
        Some(_) => data.len()?,
        None => found.hash_offset,
    };
    let location = read_tree_location(
        hash.as_ref(),
        found.hash_offset,
        found.root_hash.clone(),
        options,
        data_len,
    )
    .map_err(|e| anyhow!("{tree_name}: {e}"))?;
    let source = VeritySource::new(name.clone(), data, 0, hash, &location, options.cache_bytes)
        .map_err(|e| {
            let hint = if e.is_root_mismatch() {
                format!(
                    " (root hash {} from {})",
                    to_hex(&found.root_hash),
                    found.root_hash_from
                )
            } else {
                String::new()
            };
            anyhow!("{name}: {e}{hint}")
        })?;
    let verified = Verified {
        handle: source.handle(),
        source: source.clone(),
        root_hash_from: found.root_hash_from,
        root_hash: to_hex(&found.root_hash),
    };
    Ok((
        OpenedSource {
            source: Box::new(source),
            ..opened
        },
        Some(verified),
    ))
}
