//! `squashd verify IMAGE`: every data block of the image checked against its dm-verity hash
//! tree, on all cores, as `veritysetup verify` does (which checks on one). The first bad block
//! is printed and the exit status is 1; 0 when every block is good.

use super::ImageArgs;
use crate::cli::AlreadyReported;
use anyhow::anyhow;
use indicatif::{ProgressBar, ProgressStyle};
use squashd_core::verity::{VerityError, VerityMode};
use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Arguments of `squashd verify`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    image: ImageArgs,
    /// Threads checking blocks [default: the cores this process may use].
    #[arg(long, short = 'j', value_name = "N")]
    jobs: Option<usize>,
}

/// Data blocks one thread takes at a time: 1 MiB of 4 KiB blocks.
const CHUNK_BLOCKS: u64 = 256;

/// Checks the image; exit status 1 (an error already printed) when a block is bad.
pub fn run(args: Args) -> anyhow::Result<()> {
    let mut options = args.image.verity.options()?;
    if options.mode == VerityMode::Off {
        return Err(anyhow!(super::UsageError(
            "verify: --verity=off leaves nothing to verify".into()
        )));
    }
    // There is no image to verify without a tree.
    options.mode = VerityMode::Require;
    let remote = crate::remote::RemoteSettings {
        disk_cache_dir: args.image.disk_cache.clone(),
        disk_cache_bytes: args.image.disk_cache_size,
        ..Default::default()
    };
    let opened = crate::remote::open(
        &args.image.image,
        args.image.offset,
        args.image.partition,
        &remote,
    )?;
    let name = opened.name.clone();
    // Hash blocks are checked once each here, but kept within the metadata budget as a mount's.
    let caches = crate::verity::image_caches(&mut args.image.open_options());
    let (_, verified) = crate::verity::verify_opened(opened, &args.image.image, &options, &caches)?;
    let verified = verified.ok_or_else(|| anyhow!("{name}: no hash tree to verify it with"))?;
    let params = verified.source.params().clone();
    let blocks = params.data_blocks;
    let threads = args
        .jobs
        .unwrap_or_else(squashd_core::cores)
        .clamp(1, 256)
        .min(blocks.div_ceil(CHUNK_BLOCKS) as usize);
    let bar = if std::io::stderr().is_terminal() {
        let bar = super::progress::add(ProgressBar::new(params.data_len()));
        if let Ok(style) = ProgressStyle::with_template(
            "{wide_bar} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
        ) {
            bar.set_style(style);
        }
        Some(bar)
    } else {
        None
    };
    let next_chunk = AtomicU64::new(0);
    let first_bad: Mutex<Option<(u64, VerityError)>> = Mutex::new(None);
    let bad_blocks = AtomicU64::new(0);
    let started = Instant::now();
    let result = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut scratch = Vec::new();
                    loop {
                        let chunk = next_chunk.fetch_add(1, Ordering::Relaxed);
                        let first = chunk * CHUNK_BLOCKS;
                        if first >= blocks {
                            break;
                        }
                        let count = CHUNK_BLOCKS.min(blocks - first);
                        verified.source.verify_blocks(
                            first,
                            count,
                            &mut scratch,
                            &mut |block, e| {
                                bad_blocks.fetch_add(1, Ordering::Relaxed);
                                let mut slot = first_bad.lock().unwrap_or_else(|p| p.into_inner());
                                if slot.as_ref().is_none_or(|(b, _)| block < *b) {
                                    *slot = Some((block, e));
                                }
                            },
                        )?;
                        if let Some(bar) = &bar {
                            bar.inc(count * u64::from(params.data_block_size));
                        }
                    }
                    Ok::<(), VerityError>(())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join().unwrap_or_else(|_| {
                    Err(VerityError::Params("a checking thread panicked".into()))
                })
            })
            .collect::<Result<Vec<()>, _>>()
    });
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    result.map_err(|e| anyhow!("{name}: {e}"))?;
    let elapsed = started.elapsed();
    if let Some((_, e)) = first_bad.into_inner().unwrap_or_else(|p| p.into_inner()) {
        eprintln!(
            "squashd: {name}: {e}; {} bad data block(s) of {blocks}",
            bad_blocks.load(Ordering::Relaxed)
        );
        return Err(anyhow!(AlreadyReported));
    }
    println!(
        "{name}: {blocks} blocks of {} bytes verified ({} root hash {} from {}) in {:.2} s",
        params.data_block_size,
        params.algorithm.name(),
        verified.root_hash,
        verified.root_hash_from,
        elapsed.as_secs_f64()
    );
    Ok(())
}
