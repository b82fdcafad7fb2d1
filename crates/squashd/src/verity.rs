//! Verity for every command: finds an image's hash tree and root hash (options, then the files
//! and xattr beside it as systemd looks for them) and puts a [`VeritySource`] between the image
//! and its bytes, so that nothing above reads an unchecked byte. The mount funnel calls
//! [`verify_opened`] on the [`OpenedSource`] that `remote::open`/`remote::from_file` gave it,
//! before `Image::from_source`, as the offline tools do (`cli::ImageArgs::open_located`).

use crate::remote::OpenedSource;
use anyhow::anyhow;
use squashd_core::container::{GptLayout, GptPartition};
use squashd_core::source::{FileSource, Source};
use squashd_core::verity::{
    discover, find_root_hash, find_signature, from_hex, read_tree_location, to_hex, Found,
    RootHashSource, VerityHandle, VerityMode, VerityOptions, VeritySource,
};
use squashd_core::{Caches, OpenOptions};
use squashd_remote::{Location, RemoteOptions, RemoteSource};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An image opened through its hash tree.
#[derive(Clone)]
pub(crate) struct Verified {
    /// The checking source (the image reads through a clone of it): `squashd verify` checks
    /// every block with it.
    pub(crate) source: VeritySource,
    /// Its counters, for `status`.
    pub(crate) handle: VerityHandle,
    /// Where the root hash came from.
    pub(crate) root_hash_from: RootHashSource,
    /// The root hash, in hex.
    pub(crate) root_hash: String,
    /// The subject of the trusted certificate that signed the root hash, if it was signed.
    pub(crate) signed_by: Option<String>,
}

/// The verity flags of the offline tools (the `key=value` options of mounts, as flags).
#[derive(clap::Args, Debug, Clone)]
pub struct VerityArgs {
    /// Check the image against its dm-verity hash tree: auto (when a tree and a root hash are
    /// found: IMAGE.verity, IMAGE.roothash, the user.verity.roothash xattr, a disk image's
    /// -verity partition), require, signed (a root hash signed by a trusted certificate: see
    /// --roothash-sig), or off.
    #[arg(long, value_name = "MODE", default_value = "auto")]
    pub verity: String,
    /// The root hash (hex), instead of IMAGE.roothash.
    #[arg(long, value_name = "HEX")]
    pub roothash: Option<String>,
    /// The file holding the hash tree, instead of IMAGE.verity.
    #[arg(long, value_name = "PATH")]
    pub verity_data: Option<std::path::PathBuf>,
    /// A PKCS#7 signature of the hex root hash, instead of IMAGE.roothash.p7s; checked against
    /// the certificates in /etc/verity.d (and systemd's other verity.d directories).
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

/// The caches an image opened with `open` reads through, made now when they are its own, and
/// set in `open`: the verity source must use the same ones (see [`verify_opened`]).
pub(crate) fn image_caches(open: &mut OpenOptions) -> Arc<Caches> {
    open.caches
        .get_or_insert_with(|| Arc::new(Caches::new(&open.budgets)))
        .clone()
}

/// Where an image's tree, root hash and data are, found.
struct Plan {
    found: Found,
    /// Where the data the tree covers starts in the file (a disk image's partition).
    data_start: u64,
    /// The most bytes of data the tree may cover (a disk image's partition).
    data_limit: Option<u64>,
    /// The tree's source when it is neither a local file nor the image's own (`URL.verity`).
    hash_source: Option<Arc<dyn Source>>,
}

/// How much of the end of an image's data is asked for while its tree is opened: the tables
/// of the E3 services' images and the blocks of their roots lie in their last 100 KiB, usr's
/// tables in its last 220 KiB.
const DATA_TAIL_AHEAD: u64 = 256 << 10;

/// Puts `opened` (read from `image`) behind its hash tree as `options` say, its checked hash
/// blocks and bitmap within the metadata budget of `caches` (the caches the image will be
/// opened with: [`image_caches`]): unchanged when
/// there is nothing to verify (`verity=off`, or `auto` and no tree found); an error of one line
/// when a tree is required and missing, cannot be read, or does not match its root hash. A
/// disk image's `-verity` partition is its tree, its root hash taken from `roothash=`, its
/// `-verity-sig` partition, or the files beside it.
pub(crate) fn verify_opened(
    opened: OpenedSource,
    image: &Path,
    options: &VerityOptions,
    caches: &Arc<Caches>,
) -> anyhow::Result<(OpenedSource, Option<Verified>)> {
    if options.mode == VerityMode::Off {
        return Ok((opened, None));
    }
    let name = opened.name.clone();
    let disk = opened
        .located
        .as_ref()
        .and_then(|l| l.gpt.as_ref())
        .filter(|gpt| gpt.verity.is_some() && options.verity_data.is_none());
    let plan = match disk {
        Some(gpt) => disk_plan(&opened, gpt, image, options)?,
        None => plain_plan(&opened, image, options)?,
    };
    let Some(Plan {
        found,
        data_start,
        data_limit,
        hash_source,
    }) = plan
    else {
        return Ok((opened, None));
    };
    let signed_by = match &found.signature {
        Some((from, signature)) => {
            let dirs = crate::verity_signature::dirs(options.certs_dir.as_deref());
            match crate::verity_signature::check(&to_hex(&found.root_hash), signature, &dirs) {
                Ok(signer) => Some(signer),
                // A root hash given by the caller is trusted as given, signed or not.
                Err(e)
                    if found.root_hash_from == RootHashSource::Option
                        && options.mode != VerityMode::Signed =>
                {
                    tracing::warn!("{name}: {e}; the root hash given is used unsigned");
                    None
                }
                Err(e) => {
                    return Err(anyhow!(
                        "{name}: signature {} of the root hash from {}: {e} (add the signer's \
                         certificate there, give the root hash with roothash=HEX to trust it \
                         unsigned, or verity=off)",
                        from.display(),
                        found.root_hash_from
                    ))
                }
            }
        }
        None if options.mode == VerityMode::Signed => {
            return Err(anyhow!(
                "{name}: verity=signed, but its root hash ({}) has no signature: put it in \
                 IMAGE.roothash.p7s or give roothash_sig=PATH",
                found.root_hash_from
            ))
        }
        None => None,
    };
    let data: Arc<dyn Source> = Arc::from(opened.source);
    let tree_in_image = found.tree_file.is_none() && hash_source.is_none();
    let data_len = match data_limit {
        Some(limit) => limit,
        // A tree in the image's own file starts where the data ends.
        None if tree_in_image => found.hash_offset,
        None => data.len()?,
    };
    // The data's end, asked for before the tree is opened and read: a SquashFS image keeps
    // its tables there, the image's first reads after its superblock (which the container
    // probe read). Their read then runs beside the tree's instead of after it: one read less
    // on the way to a mount that answers (E3: 69 images).
    let tail = data_len.min(DATA_TAIL_AHEAD);
    data.will_need(data_start + (data_len - tail), tail);
    let hash: Arc<dyn Source> = match (&found.tree_file, hash_source) {
        (_, Some(source)) => source,
        (Some(path), None) => Arc::new(FileSource::open(path).map_err(|e| {
            anyhow!(
                "{}: cannot open the hash tree: {e}",
                options.shown(path).display()
            )
        })?),
        // The tree is in the image's own file.
        (None, None) => data.clone(),
    };
    let tree_name = found.tree_file.as_ref().map_or_else(
        || name.to_string(),
        |p| options.shown(p).display().to_string(),
    );
    let location = read_tree_location(
        hash.as_ref(),
        found.hash_offset,
        found.root_hash.clone(),
        options,
        data_len,
    )
    .map_err(|e| anyhow!("{tree_name}: {e}"))?;
    if data_limit.is_some_and(|limit| location.params.data_len() > limit) {
        return Err(anyhow!(
            "{tree_name}: the tree covers {} bytes, more than the {data_len}-byte partition",
            location.params.data_len()
        ));
    }
    let offset = opened
        .offset
        .checked_sub(data_start)
        .ok_or_else(|| anyhow!("{name}: the image starts before the data its tree covers"))?;
    let source = VeritySource::new(
        name.clone(),
        data,
        data_start,
        hash,
        &location,
        caches.clone(),
    )
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
        signed_by,
    };
    Ok((
        OpenedSource {
            source: Box::new(source),
            offset,
            ..opened
        },
        Some(verified),
    ))
}

/// A file's tree found beside it (or given); a remote image's only as given.
fn plain_plan(
    opened: &OpenedSource,
    image: &Path,
    options: &VerityOptions,
) -> anyhow::Result<Option<Plan>> {
    if opened.remote.is_some() {
        return remote_plan(opened, image, options);
    }
    let found = discover(image, options).map_err(|e| anyhow!(e))?;
    Ok(found.map(|found| Plan {
        found,
        data_start: 0,
        data_limit: None,
        hash_source: None,
    }))
}

/// The most bytes of a remote `URL.roothash` or `URL.roothash.p7s` read.
const MAX_REMOTE_SIDECAR: u64 = 64 << 10;

/// `address` with `suffix` on its path: a query (`?...`) or fragment belongs to the whole
/// address (a token, a signature) and stays after it, as `URL.verity` is the path's sidecar.
fn beside_address(address: &str, suffix: &str) -> String {
    let end = address.find(['?', '#']).unwrap_or(address.len());
    format!("{}{suffix}{}", &address[..end], &address[end..])
}

/// A remote object beside the image (`URL` + `suffix` on its path), opened, without read-ahead.
fn remote_beside(address: &str, suffix: &str) -> Result<RemoteSource, String> {
    let location = Location::parse(&beside_address(address, suffix))?;
    RemoteSource::open(
        &location,
        &RemoteOptions {
            read_ahead_threads: 0,
            open_tail_bytes: 0,
            ..RemoteOptions::default()
        },
    )
}

/// A small remote object read whole.
fn read_small(source: &RemoteSource) -> Result<Vec<u8>, String> {
    let len = source.len().map_err(|e| e.to_string())?;
    if len > MAX_REMOTE_SIDECAR {
        return Err(format!("{}: {len} bytes is too long", source.name()));
    }
    let mut bytes = vec![0u8; len as usize];
    source
        .read_exact_at(&mut bytes, 0)
        .map_err(|e| format!("{}: {e}", source.name()))?;
    Ok(bytes)
}

/// A remote image's tree and root hash: as given, else `URL.verity` and `URL.roothash` (and
/// `URL.roothash.p7s`) fetched like the image. In `auto`, a `URL.roothash` that cannot be
/// fetched means no verity; once it is found, a missing tree is an error.
fn remote_plan(
    opened: &OpenedSource,
    image: &Path,
    options: &VerityOptions,
) -> anyhow::Result<Option<Plan>> {
    let name = &opened.name;
    let address = image.to_string_lossy();
    let (root_hash, root_hash_from) = match &options.root_hash {
        Some(hash) => (hash.clone(), RootHashSource::Option),
        None => match remote_beside(&address, ".roothash").and_then(|s| read_small(&s)) {
            Ok(text) => {
                let hash = from_hex(&String::from_utf8_lossy(&text))
                    .map_err(|e| anyhow!("{}: {e}", beside_address(name, ".roothash")))?;
                (
                    hash,
                    RootHashSource::File(PathBuf::from(beside_address(name, ".roothash"))),
                )
            }
            Err(e) if options.mode == VerityMode::Auto => {
                tracing::debug!("{name}: no root hash beside it ({e}): read unverified");
                return Ok(None);
            }
            Err(e) => {
                return Err(anyhow!(
                    "{name}: verity=require: no root hash (give roothash=HEX): {e}"
                ))
            }
        },
    };
    let (tree_file, hash_source): (Option<PathBuf>, Option<Arc<dyn Source>>) = match &options
        .verity_data
    {
        Some(path) => (Some(path.clone()), None),
        None if options.hash_offset.is_some() => (None, None),
        None => {
            let tree = remote_beside(&address, ".verity")
                .map_err(|e| anyhow!("{name}: a root hash ({root_hash_from}) but no tree: {e}"))?;
            (None, Some(Arc::new(tree)))
        }
    };
    let signature = match &options.root_hash_sig {
        Some(path) => {
            let shown = options.shown(path);
            Some((
                shown.to_path_buf(),
                std::fs::read(path)
                    .map_err(|e| anyhow!("{}: cannot read the signature: {e}", shown.display()))?,
            ))
        }
        None => remote_beside(&address, ".roothash.p7s")
            .and_then(|s| read_small(&s))
            .ok()
            .map(|bytes| (PathBuf::from(beside_address(name, ".roothash.p7s")), bytes)),
    };
    Ok(Some(Plan {
        found: Found {
            root_hash,
            root_hash_from,
            tree_file,
            hash_offset: options.hash_offset.unwrap_or(0),
            signature,
        },
        data_start: 0,
        data_limit: None,
        hash_source,
    }))
}

/// The most bytes of a `-verity-sig` partition read: its JSON is a few KiB.
const MAX_SIGNATURE_PARTITION: u64 = 1 << 20;

/// A disk image's tree: its `-verity` partition; the root hash given, else from its
/// `-verity-sig` partition, else from the files beside it.
fn disk_plan(
    opened: &OpenedSource,
    gpt: &GptLayout,
    image: &Path,
    options: &VerityOptions,
) -> anyhow::Result<Option<Plan>> {
    let name = &opened.name;
    let Some(tree) = &gpt.verity else {
        return Ok(None);
    };
    let mut root = options
        .root_hash
        .clone()
        .map(|hash| (hash, RootHashSource::Option));
    let mut signature = None;
    if let Some(sig) = &gpt.verity_sig {
        let (hash, signed) = signature_partition(opened, sig)?;
        // Its signature also stands for a root hash given that is the same.
        if root.as_ref().is_none_or(|(given, _)| *given == hash) {
            signature = Some((PathBuf::from(format!("partition {}", sig.number)), signed));
            root.get_or_insert((hash, RootHashSource::Partition));
        }
    }
    if root.is_none() && opened.remote.is_none() {
        let (found, suffix) = find_root_hash(image, options).map_err(|e| anyhow!(e))?;
        root = found;
        signature = find_signature(image, options, suffix).map_err(|e| anyhow!(e))?;
    }
    let Some((root_hash, root_hash_from)) = root else {
        if options.mode == VerityMode::Require {
            return Err(anyhow!(
                "{name}: verity=require: partition {} has a -verity partition but no root hash \
                 was found (no -verity-sig partition; give roothash=HEX or put it in \
                 IMAGE.roothash)",
                gpt.chosen.number
            ));
        }
        tracing::warn!("{name}: a -verity partition but no root hash: read unverified");
        return Ok(None);
    };
    Ok(Some(Plan {
        found: Found {
            root_hash,
            root_hash_from,
            tree_file: None,
            hash_offset: tree.offset,
            signature,
        },
        data_start: gpt.chosen.offset,
        data_limit: Some(gpt.chosen.size),
        hash_source: None,
    }))
}

/// The `rootHash` and the decoded `signature` of a `-verity-sig` partition's JSON object
/// (NUL-padded to the partition's end), as systemd-repart writes it.
fn signature_partition(
    opened: &OpenedSource,
    partition: &GptPartition,
) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    let name = &opened.name;
    let len = partition.size.min(MAX_SIGNATURE_PARTITION);
    let mut bytes = vec![0u8; len as usize];
    opened
        .source
        .read_exact_at(&mut bytes, partition.offset)
        .map_err(|e| anyhow!("{name}: cannot read its -verity-sig partition: {e}"))?;
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let json: serde_json::Value = serde_json::from_slice(&bytes[..end]).map_err(|e| {
        anyhow!(
            "{name}: partition {} (-verity-sig) is not JSON: {e}",
            partition.number
        )
    })?;
    let hex = json
        .get("rootHash")
        .and_then(|v| v.as_str())
        .ok_or_else(|| {
            anyhow!(
                "{name}: partition {} (-verity-sig) has no rootHash",
                partition.number
            )
        })?;
    let hash = from_hex(hex)
        .map_err(|e| anyhow!("{name}: partition {} rootHash: {e}", partition.number))?;
    let signature = json
        .get("signature")
        .and_then(|v| v.as_str())
        .ok_or_else(|| {
            anyhow!(
                "{name}: partition {} (-verity-sig) has no signature",
                partition.number
            )
        })
        .and_then(|text| {
            crate::verity_signature::from_base64(text)
                .map_err(|e| anyhow!("{name}: partition {} signature: {e}", partition.number))
        })?;
    Ok((hash, signature))
}

#[cfg(test)]
mod tests {
    use super::beside_address;

    #[test]
    fn a_sidecar_suffix_goes_on_the_path_before_a_query() {
        assert_eq!(
            beside_address("https://h/i.sqfs", ".verity"),
            "https://h/i.sqfs.verity"
        );
        assert_eq!(
            beside_address("https://h/i.sqfs?token=a.b&x=1", ".roothash"),
            "https://h/i.sqfs.roothash?token=a.b&x=1"
        );
        assert_eq!(
            beside_address("https://h/i.sqfs#part", ".verity"),
            "https://h/i.sqfs.verity#part"
        );
    }
}
