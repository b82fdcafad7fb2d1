//! A dm-verity hash device of arbitrary bytes: its superblock parsed, the tree it describes
//! opened over data of arbitrary bytes with a root hash taken from the input, and every byte
//! read through it: an error or the data's own bytes, never a panic, a hang or a large
//! allocation.

#![no_main]

use libfuzzer_sys::fuzz_target;
use squashd_core::source::{MemorySource, Source};
use squashd_core::verity::{read_tree_location, VerityOptions, VeritySource};
use squashd_core::{CacheBudgets, Caches};
use std::sync::Arc;

fuzz_target!(|input: &[u8]| {
    // [root hash: 32][data length: 2][data][hash device]
    if input.len() < 34 {
        return;
    }
    let root = input[..32].to_vec();
    let data_len = usize::from(u16::from_le_bytes([input[32], input[33]])).min(input.len() - 34);
    let data = input[34..34 + data_len].to_vec();
    let hash = MemorySource::new(input[34 + data_len..].to_vec());
    for superblock in [true, false] {
        let options = VerityOptions {
            superblock,
            block_size: 512,
            ..VerityOptions::default()
        };
        let Ok(location) =
            read_tree_location(&hash, 0, root.clone(), &options, data.len() as u64)
        else {
            continue;
        };
        let Ok(source) = VeritySource::new(
            "fuzz".into(),
            Arc::new(MemorySource::new(data.clone())),
            0,
            Arc::new(hash.clone()),
            &location,
            Arc::new(Caches::new(&CacheBudgets::new(1 << 16, 1 << 16))),
        ) else {
            continue;
        };
        let mut buf = vec![0u8; 700];
        for pos in (0..data.len() as u64).step_by(600) {
            let len = buf.len().min(data.len() - pos as usize);
            if source.read_exact_at(&mut buf[..len], pos).is_ok() {
                assert_eq!(&buf[..len], &data[pos as usize..pos as usize + len]);
            }
        }
        let _ = source.verify_blocks(0, 1 << 20, &mut Vec::new(), &mut |_, _| {});
    }
});
