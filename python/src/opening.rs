//! Where an image's bytes come from: a local file or an `http(s)://` / `s3://` address, opened
//! as `squashd`'s commands open them (squashd-remote's `image_source`, which both share), or a
//! Python file object (for fsspec's other file systems); and where in it the image starts: at
//! the offset given, else where its container (AppImage, SIF) says.

use crate::pysource::PySource;
use squashd_core::container::ContainerError;
use squashd_remote::image_source::{
    locate_image, open_image, ImageSourceOptions, OpenImageError, OpenedImage,
};
use std::path::PathBuf;

/// Where the image is.
pub enum Target {
    /// A local file's path, or an `http(s)://` or `s3://` address.
    Location(PathBuf),
    /// A Python object with `seek` and `read` (and `readinto`, if it has one).
    PyFile(PySource),
}

/// How a remote image is cached on disk.
#[derive(Debug, Clone, Default)]
pub struct DiskCacheSettings {
    /// The directory; none keeps fetched units in memory only.
    pub dir: Option<PathBuf>,
    /// Its budget in bytes.
    pub budget: u64,
}

/// Opens `target` and finds where the image starts in it. Errors are an errno and one line
/// naming the image.
pub fn open(
    target: Target,
    offset: Option<u64>,
    partition: Option<u32>,
    disk_cache: &DiskCacheSettings,
) -> Result<OpenedImage, (i32, String)> {
    let opened = match target {
        Target::Location(location) => {
            let options = ImageSourceOptions {
                disk_cache_dir: disk_cache.dir.clone(),
                disk_cache_bytes: disk_cache.budget,
                ..ImageSourceOptions::default()
            };
            open_image(&location, offset, partition, &options)
        }
        Target::PyFile(source) => {
            let name = source.name().into();
            locate_image(Box::new(source), None, offset, partition, name)
        }
    };
    opened.map_err(|e| {
        let hint = match e {
            OpenImageError::Container {
                error: ContainerError::NoChoice { .. },
                ..
            } => "; choose one with partition=ID",
            _ => "",
        };
        (e.errno(), format!("{e}{hint}"))
    })
}
