//! Decompression of metadata and data blocks, one codec per SquashFS compressor.
//!
//! Every decoder writes into a caller-sized buffer and fails if the block would decompress to
//! more than that: a hostile block cannot make it allocate. Codecs with reusable state (zstd,
//! libdeflate) keep one context per thread, so concurrent readers never share one.

use crate::format::superblock::Compressor;
use std::cell::RefCell;

/// Why a block could not be decompressed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
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
        Compressor::Gzip => GZIP.with(|d| {
            d.borrow_mut()
                .zlib_decompress(input, output)
                .map_err(|e| match e {
                    libdeflater::DecompressionError::InsufficientSpace => too_large,
                    other => corrupt(other.to_string()),
                })
        }),
        Compressor::Zstd => ZSTD.with(|d| {
            let mut d = d.borrow_mut();
            let d = match d.as_mut() {
                Some(d) => d,
                None => {
                    d.insert(zstd::bulk::Decompressor::new().map_err(|e| corrupt(e.to_string()))?)
                }
            };
            d.decompress_to_buffer(input, output).map_err(|e| {
                let msg = e.to_string();
                if msg.contains("Destination buffer is too small") {
                    too_large
                } else {
                    corrupt(msg)
                }
            })
        }),
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

/// Memory limit for one xz/lzma decoder: enough for any dictionary mksquashfs writes (its
/// largest block size, 1 MiB, bounds the useful dictionary), refusing absurd ones.
const XZ_MEMLIMIT: u64 = 64 << 20;

thread_local! {
    static GZIP: RefCell<libdeflater::Decompressor> = RefCell::new(libdeflater::Decompressor::new());
    static ZSTD: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
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
