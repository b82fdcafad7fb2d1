//! `squashd xattr`: the extended attributes of one path, as `getfattr -d -m -` shows them.

use super::display::{path_bytes, shown};
use super::tree::stdout_result;
use std::ffi::OsString;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;

/// Arguments of `squashd xattr`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Prints one `name=value` line per attribute. Values made of printable ASCII are shown quoted, \
others in hex as 0x..., as `getfattr -d -m -` shows them. With --name, only that attribute's raw \
value is written, with no newline.")]
pub struct Args {
    #[command(flatten)]
    image: super::ImageArgs,
    /// Path in the image. Symlinks are not followed.
    path: OsString,
    /// Print only the raw value of this attribute (full name, e.g. user.comment).
    #[arg(short = 'n', long, value_name = "NAME")]
    name: Option<OsString>,
    /// Show every value in hex (like getfattr -e hex).
    #[arg(long = "hex")]
    hex: bool,
}

/// Runs `squashd xattr`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let image = args.image.open()?;
    let path = path_bytes(&args.path);
    let inode = image.resolve_path(path)?;
    let xattrs = image.xattrs(&inode)?;
    let mut o = Vec::new();
    if let Some(name) = &args.name {
        let x = xattrs
            .iter()
            .find(|x| x.name == name.as_bytes())
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "{}: {}: no attribute {}",
                    image.name(),
                    shown(path),
                    shown(name.as_bytes())
                )
            })?;
        o.extend_from_slice(&x.value);
    } else {
        for x in &xattrs {
            o.extend_from_slice(&x.name);
            o.push(b'=');
            push_value(&mut o, &x.value, args.hex);
            o.push(b'\n');
        }
    }
    let mut out = io::stdout().lock();
    stdout_result(out.write_all(&o).and_then(|()| out.flush()))
}

/// Appends `value` quoted when it is printable text (a trailing NUL, common in C-made values,
/// allowed), else as hex.
fn push_value(out: &mut Vec<u8>, value: &[u8], force_hex: bool) {
    let text = value.strip_suffix(b"\0").unwrap_or(value);
    let printable = text
        .iter()
        .all(|&b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\');
    if printable && !force_hex && !value.is_empty() {
        out.push(b'"');
        out.extend_from_slice(text);
        out.push(b'"');
    } else if value.is_empty() {
        out.extend_from_slice(if force_hex { b"0x" } else { b"\"\"" });
    } else {
        out.extend_from_slice(b"0x");
        for b in value {
            out.extend_from_slice(format!("{b:02x}").as_bytes());
        }
    }
}
