//! `squashd info`: the superblock, as `unsquashfs -s` shows it, in `key: value` lines.

use super::display::full_stamp;
use squashd_core::format::superblock::NO_TABLE;
use squashd_core::Flags;
use std::io::{self, Write};

/// Arguments of `squashd info`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    image: super::ImageArgs,
}

/// Runs `squashd info`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let image = args.image.open()?;
    let sb = image.superblock();
    let mut o = String::new();
    let mut line = |k: &str, v: String| o.push_str(&format!("{:<24}{v}\n", format!("{k}:")));
    line("image", image.name().to_string());
    line("offset", image.offset().to_string());
    line(
        "format",
        format!("SquashFS {}.{}", sb.version_major, sb.version_minor),
    );
    line("compressor", sb.compressor.name().to_string());
    match image.compressor_options() {
        Some(options) => {
            for (key, value) in options.describe() {
                line(&format!("  {key}"), value);
            }
        }
        None => line("  options", "none recorded (compressor defaults)".into()),
    }
    line(
        "block size",
        format!("{} ({} KiB)", sb.block_size, sb.block_size / 1024),
    );
    line(
        "image size",
        format!(
            "{} bytes ({:.2} KiB / {:.2} MiB)",
            sb.bytes_used,
            sb.bytes_used as f64 / 1024.0,
            sb.bytes_used as f64 / (1024.0 * 1024.0)
        ),
    );
    line(
        "created",
        format!(
            "{} ({})",
            full_stamp(sb.modification_time),
            sb.modification_time
        ),
    );
    line("inodes", sb.inode_count.to_string());
    line("fragments", sb.fragment_count.to_string());
    line("ids", sb.id_count.to_string());
    line("export table", yes_no(sb.has_export_table()));
    line("xattr table", yes_no(sb.has_xattrs()));
    line("fragment table", yes_no(sb.has_fragments()));
    let names = sb.flags.names();
    line(
        "flags",
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(" ")
        },
    );
    let compressed = |flag: u16| {
        if sb.flags.has(flag) {
            "uncompressed"
        } else {
            "compressed"
        }
    };
    line(
        "storage",
        format!(
            "inodes {}, data {}, fragments {}, xattrs {}, ids {}",
            compressed(Flags::UNCOMPRESSED_INODES),
            compressed(Flags::UNCOMPRESSED_DATA),
            compressed(Flags::UNCOMPRESSED_FRAGMENTS),
            compressed(Flags::UNCOMPRESSED_XATTRS),
            compressed(Flags::UNCOMPRESSED_IDS),
        ),
    );
    line(
        "root inode",
        format!(
            "block {} offset {}",
            sb.root_inode.block, sb.root_inode.offset
        ),
    );
    let position = |start: u64| {
        if start == NO_TABLE {
            "absent".to_string()
        } else {
            start.to_string()
        }
    };
    line("inode table at", position(sb.inode_table_start));
    line("directory table at", position(sb.directory_table_start));
    line("fragment table at", position(sb.fragment_table_start));
    line("export table at", position(sb.export_table_start));
    line("id table at", position(sb.id_table_start));
    line("xattr id table at", position(sb.xattr_id_table_start));
    let mut out = io::stdout().lock();
    super::tree::stdout_result(out.write_all(o.as_bytes()).and_then(|()| out.flush()))
}

fn yes_no(b: bool) -> String {
    if b { "present" } else { "absent" }.to_string()
}
