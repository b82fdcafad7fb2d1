//! Where the SquashFS image starts in a file that holds one inside another format, found before
//! anything of the image is read:
//!
//! - a type-2 AppImage (an ELF runtime marked `AI\x02` at byte 8) holds it where the ELF part
//!   ends (`appimage.rs`);
//! - an Apptainer SIF file (`SIF_MAGIC` at byte 32) holds it in a partition its descriptor
//!   table lists: the primary system partition, or the one asked for by its descriptor id
//!   (`sif/`, which documents the layout);
//! - a GPT disk image (`EFI PART` at LBA 1), such as systemd's Discoverable Disk Images, holds
//!   it in its root or /usr partition, or the partition asked for by its number (`gpt/`);
//! - anything else is taken as a raw image at byte 0.
//!
//! Every number comes from the file and is checked against its length; a container whose
//! claimed layout does not fit, or that holds no SquashFS superblock where it says, is an error
//! saying what was found.
//!
//! ```no_run
//! use squashd_core::container::locate;
//! use squashd_core::source::FileSource;
//! let source = FileSource::open("lolcow.sif".as_ref())?;
//! let found = locate(&source, None)?;
//! println!("{} at byte {}", found.container.name(), found.offset);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod appimage;
mod gpt;
mod sif;

pub use gpt::{GptLayout, GptPartition};
pub use sif::{FsType, PartType, SifPartition};

use crate::source::Source;

/// What holds the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Container {
    /// A SquashFS image as it is.
    Raw,
    /// A type-2 AppImage: an ELF runtime with the image after it.
    AppImage,
    /// An Apptainer (Singularity) SIF file: the image is one of its partitions.
    Sif,
    /// A GPT disk image (a Discoverable Disk Image): the image is one of its partitions.
    Gpt,
}

impl Container {
    /// How the container is called in messages and `squashd info`.
    pub fn name(self) -> &'static str {
        match self {
            Container::Raw => "raw SquashFS image",
            Container::AppImage => "AppImage (type 2)",
            Container::Sif => "Apptainer SIF",
            Container::Gpt => "GPT disk image",
        }
    }
}

/// Where the image was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// What holds it.
    pub container: Container,
    /// Its byte offset in the file.
    pub offset: u64,
    /// For a SIF file, the descriptor id of the partition that holds it.
    pub partition: Option<u32>,
    /// For a SIF file, every partition its descriptor table lists (any file system), in table
    /// order; empty for other containers.
    pub partitions: Vec<SifPartition>,
    /// For a GPT disk image, its partitions, the one chosen and its verity partitions.
    pub gpt: Option<GptLayout>,
}

/// Why no image could be located in a container.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ContainerError {
    /// The file could not be read.
    #[error("cannot read it: {0}")]
    Io(#[from] std::io::Error),
    /// The container's layout is impossible.
    #[error("{container}: {what}")]
    Malformed {
        /// What kind of container it looked like.
        container: &'static str,
        /// What was wrong.
        what: String,
    },
    /// The container is sound, but what it holds cannot be served (an encrypted partition,
    /// another file system, a partition id it does not have).
    #[error("{container}: {what}")]
    Unsupported {
        /// What kind of container it is.
        container: &'static str,
        /// What it holds, and why that is refused.
        what: String,
    },
    /// A SIF file whose partitions leave the choice open (no primary system partition, or
    /// several): the caller must name one by its descriptor id.
    #[error("{container}: {what}")]
    NoChoice {
        /// What kind of container it is.
        container: &'static str,
        /// What it holds, its candidates listed.
        what: String,
    },
    /// A partition was asked for in a file that is not a SIF file or a GPT disk image.
    #[error("a partition was asked for, but this is a {0}, not a SIF file or a disk image")]
    NotSif(&'static str),
}

/// The SquashFS superblock's magic, `hsqs`.
const SQUASHFS_MAGIC: &[u8; 4] = b"hsqs";

/// Finds the image in `source`: the container and the image's byte offset. `partition` chooses
/// a SIF file's partition by its descriptor id (default: the primary system partition), or a
/// GPT disk image's by its number (default: its root, else its /usr partition holding
/// SquashFS); for any other file it is an error.
pub fn locate(source: &dyn Source, partition: Option<u32>) -> Result<Located, ContainerError> {
    let len = source.len()?;
    let mut head = [0u8; 64];
    let mut found = Located {
        container: Container::Raw,
        offset: 0,
        partition: None,
        partitions: Vec::new(),
        gpt: None,
    };
    if len >= head.len() as u64 {
        source.read_exact_at(&mut head, 0)?;
        if head.starts_with(SQUASHFS_MAGIC) {
            // A raw image, whatever its later bytes look like.
        } else if appimage::is_appimage(&head) {
            found.container = Container::AppImage;
            found.offset = appimage::image_start(source, &head, len)?;
        } else if sif::is_sif(&head) {
            let (offset, chosen, partitions) = sif::locate(source, len, partition)?;
            found = Located {
                container: Container::Sif,
                offset,
                partition: Some(chosen),
                partitions,
                gpt: None,
            };
        } else if let Some(sector) = gpt::sector_size(source, len)? {
            let layout = gpt::locate(source, len, sector, partition)?;
            found = Located {
                container: Container::Gpt,
                offset: layout.chosen.offset,
                partition: Some(layout.chosen.number),
                partitions: Vec::new(),
                gpt: Some(layout),
            };
        }
    }
    if partition.is_some() && !matches!(found.container, Container::Sif | Container::Gpt) {
        return Err(ContainerError::NotSif(found.container.name()));
    }
    Ok(found)
}

/// Whether `source` (of `len` bytes) holds the SquashFS magic at `offset`.
fn has_magic(source: &dyn Source, offset: u64, len: u64) -> Result<bool, ContainerError> {
    if offset.checked_add(4).is_none_or(|end| end > len) {
        return Ok(false);
    }
    let mut magic = [0u8; 4];
    source.read_exact_at(&mut magic, offset)?;
    Ok(&magic == SQUASHFS_MAGIC)
}

fn malformed(container: Container, what: String) -> ContainerError {
    ContainerError::Malformed {
        container: container.name(),
        what,
    }
}

/// Bytes in memory as a [`Source`], for the container parsers' tests.
#[cfg(test)]
pub(crate) struct Bytes(pub(crate) Vec<u8>);

#[cfg(test)]
impl Source for Bytes {
    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> std::io::Result<()> {
        let start = usize::try_from(pos).map_err(std::io::Error::other)?;
        let src = start
            .checked_add(buf.len())
            .and_then(|end| self.0.get(start..end))
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn len(&self) -> std::io::Result<u64> {
        Ok(self.0.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_images_and_short_files_start_at_zero() {
        let found = locate(&Bytes(vec![0; 10]), None).unwrap();
        assert_eq!((found.container, found.offset), (Container::Raw, 0));
        let mut raw = vec![0; 200];
        raw[..4].copy_from_slice(b"hsqs");
        let found = locate(&Bytes(raw), None).unwrap();
        assert_eq!((found.container, found.offset), (Container::Raw, 0));
        assert!(found.partitions.is_empty() && found.partition.is_none());
    }

    #[test]
    fn a_partition_of_a_file_that_is_no_sif_is_an_error() {
        let mut raw = vec![0; 200];
        raw[..4].copy_from_slice(b"hsqs");
        let e = locate(&Bytes(raw), Some(1)).unwrap_err().to_string();
        assert!(e.contains("raw SquashFS image, not a SIF file"), "{e}");
    }
}
