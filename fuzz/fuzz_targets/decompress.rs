//! Every codec on arbitrary input, into an output buffer of a chosen size: the decoders must
//! return an error (never panic or write past the buffer) on any stream.

#![no_main]

use libfuzzer_sys::fuzz_target;
use squashd_core::compress::decompress;
use squashd_core::Compressor;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, input)) = data.split_first() else {
        return;
    };
    let compressor = match selector % 6 {
        0 => Compressor::Gzip,
        1 => Compressor::Lzma,
        2 => Compressor::Lzo,
        3 => Compressor::Xz,
        4 => Compressor::Lz4,
        _ => Compressor::Zstd,
    };
    // Output sizes of a metadata block and of small and large data blocks.
    let limit = [8192usize, 4096, 131_072, 1 << 20][(selector as usize / 6) % 4];
    let mut out = vec![0u8; limit];
    if let Ok(n) = decompress(compressor, input, &mut out) {
        assert!(n <= limit, "{compressor:?} reported {n} bytes into a {limit}-byte buffer");
    }
});
