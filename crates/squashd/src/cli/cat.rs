//! `squashd cat`: file contents to standard output, decompressed a few blocks ahead on other
//! cores and written in large pieces.

use super::display::{path_bytes, shown};
use super::tree::stdout_result;
use super::{report_error, AlreadyReported};
use rayon::prelude::*;
use squashd_core::{FileKind, Image};
use std::ffi::OsString;
use std::io::{self, BufWriter, Write};

/// Arguments of `squashd cat`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
A path that is missing or not a regular file is reported on stderr and skipped; the exit status \
is then 1. Symlinks are not followed.")]
pub struct Args {
    #[command(flatten)]
    image: super::ImageArgs,
    /// Regular files in the image, written one after the other.
    #[arg(required = true)]
    paths: Vec<OsString>,
}

/// Runs `squashd cat`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let image = args.image.open()?;
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(1 << 20, stdout.lock());
    let mut failed = false;
    for path in &args.paths {
        match cat_one(&image, path_bytes(path), &mut out) {
            Ok(()) => {}
            Err(CatError::Output(e)) => return stdout_result(Err(e)),
            Err(CatError::Image(e)) => {
                report_error(&e);
                failed = true;
            }
        }
    }
    stdout_result(out.flush())?;
    if failed {
        return Err(AlreadyReported.into());
    }
    Ok(())
}

enum CatError {
    /// Writing standard output failed: stop.
    Output(io::Error),
    /// This path could not be read: report it and go on.
    Image(anyhow::Error),
}

impl From<squashd_core::Error> for CatError {
    fn from(e: squashd_core::Error) -> Self {
        CatError::Image(e.into())
    }
}

fn cat_one(image: &Image, path: &[u8], out: &mut impl Write) -> Result<(), CatError> {
    let inode = image.resolve_path(path)?;
    let what = match inode.kind {
        FileKind::File => None,
        FileKind::Directory => Some("is a directory"),
        _ => Some("not a regular file"),
    };
    if let Some(what) = what {
        return Err(CatError::Image(anyhow::anyhow!(
            "{}: {}: {what}",
            image.name(),
            shown(path)
        )));
    }
    let reader = image.open_file(&inode)?;
    let count = reader.chunk_count();
    // Blocks decompressed ahead, in parallel, while earlier ones are written.
    let batch = (rayon::current_num_threads() as u64 * 4).max(4);
    let zeros = vec![0u8; reader.block_size() as usize];
    let mut first = 0;
    while first < count {
        let end = (first + batch).min(count);
        let chunks = (first..end)
            .into_par_iter()
            .map(|i| reader.chunk(i))
            .collect::<Result<Vec<_>, _>>()?;
        for chunk in &chunks {
            let bytes = if chunk.is_hole() {
                &zeros[..chunk.len()]
            } else {
                chunk.bytes()
            };
            out.write_all(bytes).map_err(CatError::Output)?;
        }
        first = end;
    }
    Ok(())
}
