//! The compressor options block that follows the superblock when the
//! `COMPRESSOR_OPTIONS` flag is set.

use super::superblock::Compressor;
use super::{ByteReader, FormatError};

/// Options the image was compressed with. Decompression does not need them; they are shown by
/// `info` and checked for sanity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompressorOptions {
    /// gzip (zlib) options.
    Gzip {
        /// Compression level 1..=9.
        level: u32,
        /// Window size 8..=15.
        window_size: u16,
        /// Bitmask of zlib strategies tried.
        strategies: u16,
    },
    /// xz options.
    Xz {
        /// Dictionary size in bytes.
        dictionary_size: u32,
        /// Bitmask of BCJ filters tried (x86, powerpc, ia64, arm, armthumb, sparc).
        filters: u32,
    },
    /// lz4 options.
    Lz4 {
        /// Format version (1 = legacy).
        version: u32,
        /// Flags (1 = high compression).
        flags: u32,
    },
    /// zstd options.
    Zstd {
        /// Compression level.
        level: u32,
    },
    /// lzo options.
    Lzo {
        /// Algorithm (0 = lzo1x_1 ... 4 = lzo1x_999).
        algorithm: u32,
        /// Compression level (for lzo1x_999).
        level: u32,
    },
}

impl CompressorOptions {
    /// Parses the decompressed body of the options block for `compressor`.
    pub fn parse(compressor: Compressor, buf: &[u8]) -> Result<Self, FormatError> {
        let mut r = ByteReader::new(buf);
        Ok(match compressor {
            Compressor::Gzip => CompressorOptions::Gzip {
                level: r.u32()?,
                window_size: r.u16()?,
                strategies: r.u16()?,
            },
            Compressor::Xz => CompressorOptions::Xz {
                dictionary_size: r.u32()?,
                filters: r.u32()?,
            },
            Compressor::Lz4 => CompressorOptions::Lz4 {
                version: r.u32()?,
                flags: r.u32()?,
            },
            Compressor::Zstd => CompressorOptions::Zstd { level: r.u32()? },
            Compressor::Lzo => CompressorOptions::Lzo {
                algorithm: r.u32()?,
                level: r.u32()?,
            },
            Compressor::Lzma => {
                return Err(FormatError::invalid(
                    "lzma images have no compressor options, yet the flag is set",
                ))
            }
        })
    }

    /// Human-readable `key value` pairs, in the order unsquashfs -s shows them.
    pub fn describe(&self) -> Vec<(String, String)> {
        fn kv(k: &str, v: impl ToString) -> (String, String) {
            (k.to_string(), v.to_string())
        }
        match *self {
            CompressorOptions::Gzip {
                level,
                window_size,
                strategies,
            } => {
                let names = [
                    (1u16, "default"),
                    (2, "filtered"),
                    (4, "huffman_only"),
                    (8, "run_length_encoded"),
                    (16, "fixed"),
                ];
                let s: Vec<&str> = names
                    .iter()
                    .filter(|(bit, _)| strategies & bit != 0)
                    .map(|(_, n)| *n)
                    .collect();
                vec![
                    kv("compression-level", level),
                    kv("window-size", window_size),
                    kv(
                        "strategies",
                        if s.is_empty() {
                            "none".into()
                        } else {
                            s.join(", ")
                        },
                    ),
                ]
            }
            CompressorOptions::Xz {
                dictionary_size,
                filters,
            } => {
                let names = [
                    (1u32, "x86"),
                    (2, "powerpc"),
                    (4, "ia64"),
                    (8, "arm"),
                    (16, "armthumb"),
                    (32, "sparc"),
                ];
                let f: Vec<&str> = names
                    .iter()
                    .filter(|(bit, _)| filters & bit != 0)
                    .map(|(_, n)| *n)
                    .collect();
                vec![
                    kv("dictionary-size", dictionary_size),
                    kv(
                        "filters",
                        if f.is_empty() {
                            "none".into()
                        } else {
                            f.join(", ")
                        },
                    ),
                ]
            }
            CompressorOptions::Lz4 { version, flags } => vec![
                kv("version", version),
                kv("high-compression", flags & 1 != 0),
            ],
            CompressorOptions::Zstd { level } => vec![kv("compression-level", level)],
            CompressorOptions::Lzo { algorithm, level } => {
                let names = [
                    "lzo1x_1",
                    "lzo1x_1_11",
                    "lzo1x_1_12",
                    "lzo1x_1_15",
                    "lzo1x_999",
                ];
                let alg = names
                    .get(algorithm as usize)
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| format!("unknown ({algorithm})"));
                vec![kv("algorithm", alg), kv("compression-level", level)]
            }
        }
    }
}
