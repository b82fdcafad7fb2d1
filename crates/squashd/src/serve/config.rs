//! The daemon's configuration file (TOML):
//!
//! ```toml
//! socket = "/run/squashd/control.sock"   # optional
//! allow_uids = [1000]                     # besides root, who may use the socket
//! allow_image_prefixes = ["/srv/images"]  # optional: where those users' images must lie
//! allow_mount_prefixes = ["/home"]         # optional: where they may mount
//! max_images_per_user = 16                # optional: how many each may hold attached
//! cache = "1GiB"                          # one budget for all images (1/4 metadata, 3/4 data)
//! # metadata_cache = "256MiB"             # or set the tiers one by one
//! # data_cache = "768MiB"
//! # compressed_cache = "0"
//! disk_cache = "/var/cache/squashd"        # optional: fetched data of remote images, kept
//! disk_cache_size = "4GiB"                 #   across restarts within this budget
//! uring = "off"                           # FUSE over io_uring: auto, on or off (the default);
//!                                         #   images that give no `uring=` and the kernel
//!                                         #   path's shared blob file system follow it
//!
//! [[image]]                               # path: a file, or http(s)://... or s3://BUCKET/KEY
//! path = "/var/lib/portables/foo.raw"
//! mountpoint = "/run/portables/foo"
//! options = "allow_other,uid=0"            # as `squashd mount -o`
//! ```
//!
//! Each `[[image]]` entry is checked on its own, so one bad entry is reported by name and the
//! others still mount. Two entries with the same mount point would race to mount there: the
//! second is reported and skipped.

use super::access::AccessLimits;
use crate::control::protocol::DEFAULT_SOCKET;
use crate::size::parse_size;
use anyhow::{bail, Context};
use serde::Deserialize;
use squashd_core::CacheBudgets;
use squashd_fuse::server::UringMode;
use std::path::{Path, PathBuf};

/// One image to serve.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageEntry {
    /// The image file.
    pub path: PathBuf,
    /// Where to mount it.
    pub mountpoint: PathBuf,
    /// Mount options, comma-separated, as `squashd mount -o` takes them.
    #[serde(default)]
    pub options: String,
}

impl ImageEntry {
    /// The options as a list for the mount option parser.
    pub fn option_list(&self) -> Vec<String> {
        if self.options.is_empty() {
            Vec::new()
        } else {
            vec![self.options.clone()]
        }
    }
}

/// The whole configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The control socket's path.
    pub socket: PathBuf,
    /// Users besides root (and the daemon's own user) allowed on the control socket.
    pub allow_uids: Vec<u32>,
    /// What those users may attach, and where.
    pub(crate) access: AccessLimits,
    /// The shared cache budgets.
    pub budgets: CacheBudgets,
    /// How remote images are fetched and cached unless their options say otherwise.
    pub(crate) remote: crate::remote::RemoteSettings,
    /// FUSE over io_uring for images whose options give no `uring=`, and for the kernel path's
    /// blob file system, which every kernel-path image shares (read at start: a reload keeps
    /// the value the daemon started with).
    pub uring: UringMode,
    /// The images that parsed.
    pub images: Vec<ImageEntry>,
    /// Entries that did not parse, each as "image #N (path): why".
    pub bad_entries: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            socket: DEFAULT_SOCKET.into(),
            allow_uids: Vec::new(),
            access: AccessLimits::default(),
            budgets: default_budgets(),
            remote: crate::remote::RemoteSettings::default(),
            uring: UringMode::default(),
            images: Vec::new(),
            bad_entries: Vec::new(),
        }
    }
}

/// 256 MiB for all images together: 64 MiB of metadata keeps every directory and inode of
/// dozens of service images, 192 MiB of data serves their hot files.
fn default_budgets() -> CacheBudgets {
    CacheBudgets::new(64 << 20, 192 << 20)
}

impl Config {
    /// Where the kernel path's blob file system is mounted: `blobs/` beside the socket.
    pub fn blob_dir(&self) -> PathBuf {
        self.socket
            .parent()
            .unwrap_or(Path::new("/run/squashd"))
            .join("blobs")
    }

    /// Reads and parses the file at `path`.
    pub fn load(path: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("{}: cannot read the config", path.display()))?;
        Self::parse(&text).with_context(|| format!("{}", path.display()))
    }

    /// Parses a configuration's text.
    pub fn parse(text: &str) -> anyhow::Result<Config> {
        let table: toml::Table = text.parse().context("not valid TOML")?;
        let mut config = Config::default();
        let size = |key: &str| -> anyhow::Result<Option<u64>> {
            match table.get(key) {
                None => Ok(None),
                Some(toml::Value::String(s)) => parse_size(s)
                    .map(Some)
                    .map_err(|e| anyhow::anyhow!("{key}: {e}")),
                Some(toml::Value::Integer(n)) if *n >= 0 => Ok(Some(*n as u64)),
                Some(other) => bail!("{key}: expected a size like \"1GiB\", found {other}"),
            }
        };
        if let Some(total) = size("cache")? {
            config.budgets = CacheBudgets::new(total / 4, total - total / 4);
        }
        if let Some(n) = size("metadata_cache")? {
            config.budgets.metadata_bytes = n;
        }
        if let Some(n) = size("data_cache")? {
            config.budgets.data_bytes = n;
        }
        if let Some(n) = size("compressed_cache")? {
            config.budgets.compressed_bytes = n;
        }
        if let Some(n) = size("disk_cache_size")? {
            config.remote.disk_cache_bytes = n;
        }
        for (key, value) in &table {
            match key.as_str() {
                "cache" | "metadata_cache" | "data_cache" | "compressed_cache" | "image"
                | "disk_cache_size" => {}
                "disk_cache" => {
                    let dir = PathBuf::from(value.as_str().context("disk_cache: expected a path")?);
                    if !dir.is_absolute() {
                        bail!("disk_cache: {} is not an absolute path", dir.display());
                    }
                    config.remote.disk_cache_dir = Some(dir);
                }
                "uring" => {
                    config.uring = value.as_str().and_then(UringMode::parse).with_context(|| {
                        format!("uring: expected \"auto\", \"on\" or \"off\", found {value}")
                    })?
                }
                "socket" => {
                    config.socket = value.as_str().context("socket: expected a path")?.into()
                }
                "allow_uids" => {
                    config.allow_uids = value
                        .clone()
                        .try_into()
                        .context("allow_uids: expected a list of numbers")?
                }
                "allow_image_prefixes" => config.access.image_prefixes = prefixes(key, value)?,
                "allow_mount_prefixes" => config.access.mount_prefixes = prefixes(key, value)?,
                "max_images_per_user" => {
                    config.access.max_images_per_user = value
                        .as_integer()
                        .and_then(|n| usize::try_from(n).ok())
                        .context("max_images_per_user: expected a number")?
                }
                other => bail!("unknown setting {other:?}"),
            }
        }
        let entries = match table.get("image") {
            None => &Vec::new(),
            Some(toml::Value::Array(a)) => a,
            Some(_) => bail!("image: expected [[image]] tables"),
        };
        // The entry number (1-based, as reported) of each image kept, and where its mount
        // point is (resolved once per entry: comparing pairs by resolving both each time cost
        // 69 images some 20,000 readlink calls at start-up).
        let mut image_numbers = Vec::new();
        let mut places: Vec<Place> = Vec::new();
        for (n, entry) in entries.iter().enumerate() {
            let name = entry
                .get("path")
                .and_then(|p| p.as_str())
                .unwrap_or("no path");
            match entry.clone().try_into::<ImageEntry>() {
                Ok(e)
                    if !e.mountpoint.is_absolute()
                        || !(e.path.is_absolute() || crate::remote::is_remote(&e.path)) =>
                {
                    config.bad_entries.push(format!(
                        "image #{} ({name}): path (unless a remote address) and mountpoint must be absolute",
                        n + 1
                    ))
                }
                Ok(e) => {
                    let place = Place::of(&e.mountpoint);
                    match places.iter().position(|other| other.same_as(&place)) {
                        Some(first) => config.bad_entries.push(format!(
                            "image #{} ({name}): mount point {} is already used by image #{} ({})",
                            n + 1,
                            e.mountpoint.display(),
                            image_numbers[first],
                            config.images[first].path.display()
                        )),
                        None => {
                            image_numbers.push(n + 1);
                            places.push(place);
                            config.images.push(e)
                        }
                    }
                }
                Err(e) => {
                    config
                        .bad_entries
                        .push(format!("image #{} ({name}): {}", n + 1, e.message()))
                }
            }
        }
        Ok(config)
    }
}

/// Absolute directory prefixes from a list of strings.
fn prefixes(key: &str, value: &toml::Value) -> anyhow::Result<Vec<PathBuf>> {
    let list: Vec<PathBuf> = value
        .clone()
        .try_into()
        .with_context(|| format!("{key}: expected a list of paths"))?;
    if let Some(relative) = list.iter().find(|p| !p.is_absolute()) {
        bail!("{key}: {} is not an absolute path", relative.display());
    }
    Ok(list)
}

/// Where a mount point is, for telling whether two name the same directory: the same once `.`,
/// `..` and repeated slashes are resolved, or the same directory on disk (through symlinks)
/// where they exist.
struct Place {
    lexical: PathBuf,
    on_disk: Option<PathBuf>,
}

impl Place {
    fn of(mountpoint: &Path) -> Self {
        Place {
            lexical: std::path::absolute(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf()),
            on_disk: crate::real_path::resolve(mountpoint).ok(),
        }
    }

    fn same_as(&self, other: &Place) -> bool {
        self.lexical == other.lexical
            || matches!((&self.on_disk, &other.on_disk), (Some(a), Some(b)) if a == b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_budgets_and_entries() {
        let c = Config::parse(
            r#"
            cache = "1GiB"
            data_cache = "512MiB"
            allow_uids = [1000]
            [[image]]
            path = "/a.sqfs"
            mountpoint = "/mnt/a"
            options = "uid=0"
            [[image]]
            path = "/b.sqfs"
            mountpint = "/mnt/b"
            [[image]]
            path = "relative.sqfs"
            mountpoint = "/mnt/c"
            "#,
        )
        .unwrap();
        assert_eq!(c.budgets.metadata_bytes, 256 << 20);
        assert_eq!(c.budgets.data_bytes, 512 << 20);
        assert_eq!(c.allow_uids, vec![1000]);
        assert_eq!(c.images.len(), 1);
        assert_eq!(c.images[0].option_list(), vec!["uid=0".to_string()]);
        assert_eq!(c.bad_entries.len(), 2, "{:?}", c.bad_entries);
        assert!(c.bad_entries[0].contains("/b.sqfs"), "{:?}", c.bad_entries);
        assert!(c.bad_entries[1].contains("absolute"));
    }

    #[test]
    fn a_second_entry_on_the_same_mount_point_is_named_and_skipped() {
        let c = Config::parse(
            r#"
            [[image]]
            path = "/a.sqfs"
            mountpoint = "/mnt/x"
            [[image]]
            path = "/b.sqfs"
            mountpoint = "/mnt/y"
            [[image]]
            path = "/c.sqfs"
            mountpoint = "/mnt/./x/"
            "#,
        )
        .unwrap();
        assert_eq!(c.images.len(), 2);
        assert_eq!(c.images[0].path, Path::new("/a.sqfs"));
        assert_eq!(c.images[1].path, Path::new("/b.sqfs"));
        assert_eq!(c.bad_entries.len(), 1, "{:?}", c.bad_entries);
        let bad = &c.bad_entries[0];
        assert!(
            bad.contains("image #3 (/c.sqfs)") && bad.contains("image #1 (/a.sqfs)"),
            "{bad}"
        );
    }

    #[test]
    fn access_limits() {
        let c = Config::parse(
            r#"
            allow_uids = [1000]
            allow_image_prefixes = ["/srv/images"]
            allow_mount_prefixes = ["/home", "/run/user"]
            max_images_per_user = 3
            "#,
        )
        .unwrap();
        assert_eq!(c.access.image_prefixes, vec![PathBuf::from("/srv/images")]);
        assert_eq!(c.access.mount_prefixes.len(), 2);
        assert_eq!(c.access.max_images_per_user, 3);
        assert!(Config::parse("allow_mount_prefixes = [\"home\"]").is_err());
        assert!(Config::parse("max_images_per_user = -1").is_err());
    }

    #[test]
    fn rejects_unknown_settings_and_bad_sizes() {
        assert!(Config::parse("cahce = \"1GiB\"").is_err());
        assert!(Config::parse("cache = \"lots\"").is_err());
        assert!(Config::parse("cache = [").is_err());
    }
}
