//! Decompression of metadata and data blocks, one codec per SquashFS compressor.
//!
//! Every decoder writes into a caller-sized buffer and fails if the block would decompress to
//! more than that: a hostile block cannot make it allocate. Codecs with reusable state (zstd,
//! libdeflate) take a context from a small shared pool and put it back: no block allocates a
//! context, no two readers share one at a time, and memory follows the number of cores rather
//! than the number of threads (a daemon serving dozens of images has many more threads than
//! cores; see `bench/results/notes-from-core-comments.md`).

use crate::format::superblock::Compressor;
use std::sync::Mutex;
use zstd::zstd_safe::{self, DCtx};

/// Why a block could not be decompressed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecompressError {
    /// The block decompresses to more bytes than a block of its kind may hold.
    #[error("{codec} block decompresses to more than {limit} bytes")]
    TooLarge {
        /// Codec name.
        codec: &'static str,
        /// The limit.
        limit: usize,
    },
    /// The compressed stream is damaged.
    #[error("{codec} stream is corrupt: {detail}")]
    Corrupt {
        /// Codec name.
        codec: &'static str,
        /// What the codec said.
        detail: String,
    },
}

/// Decompresses `input` into `output`, returning the number of bytes produced. `output.len()` is
/// the most the block may decompress to.
pub fn decompress(
    compressor: Compressor,
    input: &[u8],
    output: &mut [u8],
) -> Result<usize, DecompressError> {
    let codec = compressor.name();
    let corrupt = |detail: String| DecompressError::Corrupt { codec, detail };
    let too_large = DecompressError::TooLarge {
        codec,
        limit: output.len(),
    };
    match compressor {
        Compressor::Gzip => {
            let mut d = GZIP.take().unwrap_or_default();
            let result = d.zlib_decompress(input, output).map_err(|e| match e {
                libdeflater::DecompressionError::InsufficientSpace => too_large,
                other => corrupt(other.to_string()),
            });
            GZIP.give(d);
            result
        }
        Compressor::Zstd => {
            let mut d = match ZSTD.take() {
                Some(d) => d,
                None => DCtx::try_create()
                    .ok_or_else(|| corrupt("cannot allocate a decompression context".into()))?,
            };
            // zstd tells "the block is larger than the buffer" by its error code; its message is
            // for people and may change.
            let result = d.decompress(output, input).map_err(|code| {
                if code == ZSTD_DST_TOO_SMALL {
                    too_large
                } else {
                    corrupt(zstd_safe::get_error_name(code).to_string())
                }
            });
            ZSTD.give(d);
            result
        }
        Compressor::Lz4 => lz4_flex::block::decompress_into(input, output).map_err(|e| match e {
            lz4_flex::block::DecompressError::OutputTooSmall { .. } => too_large,
            other => corrupt(other.to_string()),
        }),
        Compressor::Lzo => lzo::decompress_into(input, output).map_err(|e| match e {
            lzo::Error::OutputOverrun => too_large,
            other => corrupt(format!("{other:?}")),
        }),
        Compressor::Xz => {
            let stream = liblzma::stream::Stream::new_stream_decoder(XZ_MEMLIMIT, 0)
                .map_err(|e| corrupt(e.to_string()))?;
            run_lzma(stream, input, output, codec)
        }
        Compressor::Lzma => {
            let stream = liblzma::stream::Stream::new_lzma_decoder(XZ_MEMLIMIT)
                .map_err(|e| corrupt(e.to_string()))?;
            run_lzma(stream, input, output, codec)
        }
    }
}

/// Memory limit for one xz/lzma decoder. liblzma allocates the dictionary a stream's header
/// asks for, so a few hostile bytes could cost tens of MiB per block. mksquashfs never writes a
/// dictionary larger than the block size (at most 1 MiB), and the kernel refuses larger ones:
/// 1 MiB plus the decoder's own state fits in 2 MiB.
const XZ_MEMLIMIT: u64 = 2 << 20;

static GZIP: ContextPool<libdeflater::Decompressor> = ContextPool::new();
static ZSTD: ContextPool<DCtx<'static>> = ContextPool::new();

/// The error zstd returns when the output buffer is too small (`ZSTD_error_dstSize_tooSmall`):
/// its functions return error codes negated into a `size_t`.
const ZSTD_DST_TOO_SMALL: usize =
    (zstd_safe::zstd_sys::ZSTD_ErrorCode::ZSTD_error_dstSize_tooSmall as usize).wrapping_neg();

/// Idle decompression contexts. The lock is held for a push or a pop, never while decompressing.
struct ContextPool<T> {
    idle: Mutex<Vec<T>>,
}

impl<T> ContextPool<T> {
    const fn new() -> Self {
        ContextPool {
            idle: Mutex::new(Vec::new()),
        }
    }

    /// An idle context, if there is one.
    fn take(&self) -> Option<T> {
        self.idle.lock().ok()?.pop()
    }

    /// Returns a context; beyond a few per core, it is dropped.
    fn give(&self, context: T) {
        let keep = crate::cores() * 2;
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < keep {
                idle.push(context);
            }
        }
    }
}

fn run_lzma(
    mut stream: liblzma::stream::Stream,
    input: &[u8],
    output: &mut [u8],
    codec: &'static str,
) -> Result<usize, DecompressError> {
    use liblzma::stream::{Action, Status};
    let status =
        stream
            .process(input, output, Action::Finish)
            .map_err(|e| DecompressError::Corrupt {
                codec,
                detail: e.to_string(),
            })?;
    let produced = stream.total_out() as usize;
    match status {
        Status::StreamEnd => Ok(produced),
        _ if produced == output.len() => {
            // Output full but the stream did not end: it holds more than the block may.
            let mut probe = [0u8; 1];
            let more = stream.process(
                &input[stream.total_in() as usize..],
                &mut probe,
                Action::Finish,
            );
            match more {
                Ok(Status::StreamEnd) if stream.total_out() as usize == produced => Ok(produced),
                _ => Err(DecompressError::TooLarge {
                    codec,
                    limit: output.len(),
                }),
            }
        }
        _ => Err(DecompressError::Corrupt {
            codec,
            detail: "stream ends before its end marker".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zstd_block_larger_than_its_buffer_is_too_large_not_corrupt() {
        let data = vec![7u8; 8192];
        let packed = zstd::bulk::compress(&data, 3).unwrap();
        let mut small = vec![0u8; 4096];
        assert_eq!(
            decompress(Compressor::Zstd, &packed, &mut small),
            Err(DecompressError::TooLarge {
                codec: "zstd",
                limit: 4096
            })
        );
        let mut exact = vec![0u8; 8192];
        assert_eq!(decompress(Compressor::Zstd, &packed, &mut exact), Ok(8192));
        assert_eq!(exact, data);
        let err = decompress(Compressor::Zstd, &packed[..packed.len() / 2], &mut exact);
        assert!(
            matches!(err, Err(DecompressError::Corrupt { codec: "zstd", .. })),
            "{err:?}"
        );
    }
}
