//! `squashd info`: where the image was found (the container, the offset, a SIF file's
//! partitions) and the superblock, as `unsquashfs -s` shows it, in `key: value` lines, or with
//! `--json` as one JSON object holding the same fields for scripts.

use super::display::full_stamp;
use crate::verity::Verified;
use serde::Serialize;
use squashd_core::container::{Located, SifPartition};
use squashd_core::format::superblock::NO_TABLE;
use squashd_core::{Flags, Image};
use std::io::{self, Write};

/// Arguments of `squashd info`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    image: super::ImageArgs,
    /// Print one JSON object (numbers as numbers, absent tables as null) instead of text.
    #[arg(long)]
    json: bool,
}

/// Everything `info` shows, gathered once so that the text and the JSON cannot disagree.
#[derive(Serialize)]
struct Info {
    image: String,
    /// What holds the image: a raw image, an AppImage, a SIF file, or an offset the caller gave.
    container: String,
    offset: u64,
    /// For a SIF file, the descriptor id of the partition read.
    partition: Option<u32>,
    /// For a SIF file, every partition it lists; empty for other files.
    partitions: Vec<Partition>,
    /// For a GPT disk image, every partition it lists; empty for other files.
    disk_partitions: Vec<DiskPartition>,
    /// How the image is verified: its tree and root hash; `None` when it is not.
    verity: Option<Verity>,
    format: String,
    compressor: String,
    /// The options block, `None` when the image records none (compressor defaults).
    compressor_options: Option<Options>,
    block_size: u32,
    image_size: u64,
    created: String,
    created_unix: u32,
    inodes: u32,
    fragments: u32,
    ids: u16,
    export_table: bool,
    xattr_table: bool,
    fragment_table: bool,
    flags: Vec<String>,
    /// Per kind of content: whether it is stored compressed.
    compressed: Storage,
    root_inode: RootInode,
    /// Image positions of the tables; `None` for an absent one.
    tables: Tables,
}

/// The compressor's options in the order the options block holds them: a JSON object whose
/// keys keep that order (a map type would sort them).
struct Options(Vec<(String, String)>);

impl Serialize for Options {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

/// One partition of a SIF file.
#[derive(Serialize)]
struct Partition {
    id: u32,
    name: String,
    file_system: String,
    /// What it is for: primary system, system, data, overlay.
    kind: String,
    arch: String,
    offset: u64,
    size: u64,
}

impl Partition {
    fn of(p: &SifPartition) -> Self {
        Partition {
            id: p.id,
            name: p.name.clone(),
            file_system: p.fs.name(),
            kind: p.kind.name(),
            arch: p.arch.to_string(),
            offset: p.offset,
            size: p.size,
        }
    }
}

/// One partition of a GPT disk image.
#[derive(Serialize)]
struct DiskPartition {
    number: u32,
    /// Its type's name in the Discoverable Partitions Specification, else its type GUID.
    kind: String,
    uuid: String,
    name: String,
    offset: u64,
    size: u64,
}

/// The tree an image is checked against.
#[derive(Serialize)]
struct Verity {
    hash: String,
    data_block_size: u32,
    hash_block_size: u32,
    data_blocks: u64,
    root_hash: String,
    root_hash_from: String,
    /// The trusted certificate that signed the root hash, if it was signed.
    signed_by: Option<String>,
}

#[derive(Serialize)]
struct Storage {
    inodes: bool,
    data: bool,
    fragments: bool,
    xattrs: bool,
    ids: bool,
}

#[derive(Serialize)]
struct RootInode {
    block: u64,
    offset: u16,
}

#[derive(Serialize)]
struct Tables {
    inode: Option<u64>,
    directory: Option<u64>,
    fragment: Option<u64>,
    export: Option<u64>,
    id: Option<u64>,
    xattr_id: Option<u64>,
}

impl Info {
    fn of(image: &Image, located: Option<&Located>, verified: Option<&Verified>) -> Self {
        let sb = image.superblock();
        let position = |start: u64| (start != NO_TABLE).then_some(start);
        let compressed = |flag: Flags| !sb.flags.contains(flag);
        Info {
            image: image.name().to_string(),
            container: located
                .map_or("at the offset given", |l| l.container.name())
                .into(),
            // Where the image starts in its file (a verified image's offset counts from the
            // start of the data its tree covers).
            offset: located.map_or(image.offset(), |l| l.offset),
            partition: located.and_then(|l| l.partition),
            partitions: located.map_or(Vec::new(), |l| {
                l.partitions.iter().map(Partition::of).collect()
            }),
            disk_partitions: located
                .and_then(|l| l.gpt.as_ref())
                .map_or(Vec::new(), |gpt| {
                    gpt.partitions
                        .iter()
                        .map(|p| DiskPartition {
                            number: p.number,
                            kind: p.kind.map_or_else(|| p.type_guid.clone(), str::to_string),
                            uuid: p.uuid.clone(),
                            name: p.name.clone(),
                            offset: p.offset,
                            size: p.size,
                        })
                        .collect()
                }),
            verity: verified.map(|v| {
                let params = v.source.params();
                Verity {
                    hash: params.algorithm.name().to_string(),
                    data_block_size: params.data_block_size,
                    hash_block_size: params.hash_block_size,
                    data_blocks: params.data_blocks,
                    root_hash: v.root_hash.clone(),
                    root_hash_from: v.root_hash_from.to_string(),
                    signed_by: v.signed_by.clone(),
                }
            }),
            format: format!("SquashFS {}.{}", sb.version_major, sb.version_minor),
            compressor: sb.compressor.name().to_string(),
            compressor_options: image.compressor_options().map(|o| Options(o.describe())),
            block_size: sb.block_size,
            image_size: sb.bytes_used,
            created: full_stamp(sb.modification_time),
            created_unix: sb.modification_time,
            inodes: sb.inode_count,
            fragments: sb.fragment_count,
            ids: sb.id_count,
            export_table: sb.has_export_table(),
            xattr_table: sb.has_xattrs(),
            fragment_table: sb.has_fragments(),
            flags: sb.flags.names().iter().map(|n| n.to_string()).collect(),
            compressed: Storage {
                inodes: compressed(Flags::UNCOMPRESSED_INODES),
                data: compressed(Flags::UNCOMPRESSED_DATA),
                fragments: compressed(Flags::UNCOMPRESSED_FRAGMENTS),
                xattrs: compressed(Flags::UNCOMPRESSED_XATTRS),
                ids: compressed(Flags::UNCOMPRESSED_IDS),
            },
            root_inode: RootInode {
                block: sb.root_inode.block,
                offset: sb.root_inode.offset,
            },
            tables: Tables {
                inode: position(sb.inode_table_start),
                directory: position(sb.directory_table_start),
                // Without fragments the field still holds a position (where the table would
                // start), but there is no table there.
                fragment: position(sb.fragment_table_start).filter(|_| sb.has_fragments()),
                export: position(sb.export_table_start),
                id: position(sb.id_table_start),
                xattr_id: position(sb.xattr_id_table_start),
            },
        }
    }

    fn text(&self) -> String {
        let mut o = String::new();
        let mut line = |k: &str, v: String| o.push_str(&format!("{:<24}{v}\n", format!("{k}:")));
        line("image", self.image.clone());
        line("container", self.container.clone());
        line("offset", self.offset.to_string());
        if let Some(id) = self.partition {
            line("partition", id.to_string());
        }
        if !self.partitions.is_empty() {
            line("partitions", self.partitions.len().to_string());
        }
        for p in &self.partitions {
            line(
                &format!("  id {}", p.id),
                format!(
                    "{}, {}, {}, {} bytes at byte {}, {:?}",
                    p.file_system, p.kind, p.arch, p.size, p.offset, p.name
                ),
            );
        }
        if !self.disk_partitions.is_empty() {
            line("partitions", self.disk_partitions.len().to_string());
        }
        for p in &self.disk_partitions {
            line(
                &format!("  {}", p.number),
                format!(
                    "{}, {} bytes at byte {}, {:?}, uuid {}",
                    p.kind, p.size, p.offset, p.name, p.uuid
                ),
            );
        }
        match &self.verity {
            Some(v) => line(
                "verity",
                format!(
                    "{} over {} blocks of {} bytes (hash blocks of {}), root hash {} from {}{}",
                    v.hash,
                    v.data_blocks,
                    v.data_block_size,
                    v.hash_block_size,
                    v.root_hash,
                    v.root_hash_from,
                    v.signed_by
                        .as_ref()
                        .map_or_else(|| ", unsigned".to_string(), |s| format!(", signed by {s}"))
                ),
            ),
            None => line("verity", "none (not checked)".into()),
        }
        line("format", self.format.clone());
        line("compressor", self.compressor.clone());
        match &self.compressor_options {
            Some(options) => {
                for (key, value) in &options.0 {
                    line(&format!("  {key}"), value.clone());
                }
            }
            None => line("  options", "none recorded (compressor defaults)".into()),
        }
        line(
            "block size",
            format!("{} ({} KiB)", self.block_size, self.block_size / 1024),
        );
        let size = self.image_size as f64;
        line(
            "image size",
            format!(
                "{} bytes ({:.2} KiB / {:.2} MiB)",
                self.image_size,
                size / 1024.0,
                size / (1024.0 * 1024.0)
            ),
        );
        line(
            "created",
            format!("{} ({})", self.created, self.created_unix),
        );
        line("inodes", self.inodes.to_string());
        line("fragments", self.fragments.to_string());
        line("ids", self.ids.to_string());
        line("export table", present(self.export_table));
        line("xattr table", present(self.xattr_table));
        line("fragment table", present(self.fragment_table));
        line(
            "flags",
            if self.flags.is_empty() {
                "none".to_string()
            } else {
                self.flags.join(" ")
            },
        );
        let c = &self.compressed;
        let word = |b: bool| if b { "compressed" } else { "uncompressed" };
        line(
            "storage",
            format!(
                "inodes {}, data {}, fragments {}, xattrs {}, ids {}",
                word(c.inodes),
                word(c.data),
                word(c.fragments),
                word(c.xattrs),
                word(c.ids),
            ),
        );
        line(
            "root inode",
            format!(
                "block {} offset {}",
                self.root_inode.block, self.root_inode.offset
            ),
        );
        let position = |p: Option<u64>| p.map_or("absent".to_string(), |p| p.to_string());
        let t = &self.tables;
        line("inode table at", position(t.inode));
        line("directory table at", position(t.directory));
        line("fragment table at", position(t.fragment));
        line("export table at", position(t.export));
        line("id table at", position(t.id));
        line("xattr id table at", position(t.xattr_id));
        o
    }
}

/// Runs `squashd info`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let (image, located, verified) = args.image.open_verified()?;
    let info = Info::of(&image, located.as_ref(), verified.as_ref());
    let text = if args.json {
        let mut json = serde_json::to_string_pretty(&info)?;
        json.push('\n');
        json
    } else {
        info.text()
    };
    let mut out = io::stdout().lock();
    super::tree::stdout_result(out.write_all(text.as_bytes()).and_then(|()| out.flush()))
}

fn present(b: bool) -> String {
    if b { "present" } else { "absent" }.to_string()
}
