//! `squashd stat`: one inode, as stat(1) shows a file.

use super::display::{full_stamp, kind_name, mode_string, path_bytes, OwnerNames};
use squashd_core::FileKind;
use std::ffi::OsString;
use std::io::{self, Write};

/// Arguments of `squashd stat`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    image: super::ImageArgs,
    /// Path in the image ("/" or "" for the root). Symlinks are not followed.
    path: OsString,
}

/// Runs `squashd stat`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let image = args.image.open()?;
    let path = path_bytes(&args.path);
    let inode = image.resolve_path(path)?;
    let owners = OwnerNames::default();
    let mut o = Vec::new();
    o.extend_from_slice(b"  File: ");
    o.extend_from_slice(path);
    if let Some(target) = inode.symlink_target() {
        o.extend_from_slice(b" -> ");
        o.extend_from_slice(target);
    }
    o.push(b'\n');
    let _ = writeln!(
        o,
        "  Size: {:<15} Blocks: {:<10} IO Block: {:<6} {}",
        inode.size,
        inode.blocks_512(),
        image.superblock().block_size,
        kind_name(inode.kind)
    );
    let device = match inode.kind {
        FileKind::BlockDevice | FileKind::CharDevice => {
            let (major, minor) = inode.device();
            format!(" Device type: {major},{minor}")
        }
        _ => String::new(),
    };
    let _ = writeln!(
        o,
        "Inode: {:<14} Links: {}{device}",
        inode.number, inode.nlink
    );
    let name_or_dash = |n: Option<String>| n.unwrap_or_else(|| "UNKNOWN".into());
    let _ = writeln!(
        o,
        "Access: ({:04o}/{})  Uid: ({:>5}/{:>8})   Gid: ({:>5}/{:>8})",
        inode.permissions,
        String::from_utf8_lossy(&mode_string(inode.kind, inode.permissions)),
        inode.uid,
        name_or_dash(owners.user(inode.uid)),
        inode.gid,
        name_or_dash(owners.group(inode.gid)),
    );
    let _ = writeln!(o, "Modify: {}", full_stamp(inode.mtime));
    if inode.kind == FileKind::File && inode.sparse_bytes() > 0 {
        let _ = writeln!(o, "Sparse: {} bytes of holes", inode.sparse_bytes());
    }
    let xattrs = image.xattrs(&inode)?;
    if !xattrs.is_empty() {
        o.extend_from_slice(b"Xattrs:");
        for x in &xattrs {
            o.push(b' ');
            o.extend_from_slice(&x.name);
        }
        o.push(b'\n');
    }
    let mut out = io::stdout().lock();
    super::tree::stdout_result(out.write_all(&o).and_then(|()| out.flush()))
}
