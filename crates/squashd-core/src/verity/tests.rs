//! The tree against cryptsetup's published test vectors (tests/verity-compat-test: an 8 MiB
//! data device of zeros) and the verifying source against damaged data and trees.

use super::*;
use crate::source::{MemorySource, Source};
use std::sync::Arc;

const SALT: &str = "e48da609055204e89ae53b655ca2216dd983cf3cb829f34f63a297d106d53e2d";

/// (block size, root hash, salt, format, hash) as `check_root_hash` lists them.
const VECTORS: &[(u32, &str, &str, u32, &str)] = &[
    (
        512,
        "9de18652fe74edfb9b805aaed72ae2aa48f94333f1ba5c452ac33b1c39325174",
        SALT,
        1,
        "sha256",
    ),
    (
        1024,
        "54d92778750495d1f80832b486ebd007617d746271511bbf0e295e143da2b3df",
        SALT,
        1,
        "sha256",
    ),
    (
        4096,
        "e522df0f97da4febb882ac40f30b37dc0b444bf6df418929463fa25280f09d5c",
        SALT,
        1,
        "sha256",
    ),
    (
        4096,
        "cbbf4ebd004ef65e29b935bb635a39cf754d677f3fa10b0126da725bbdf10f7d",
        SALT,
        0,
        "sha256",
    ),
    (
        4096,
        "ef29c902d87350f1da4bfa536e16cebc162a909bf89abe448b81ec500d4fb9bf",
        "-",
        1,
        "sha256",
    ),
    (
        1024,
        "d0e9163ca8844aaa2e88fe5265a8c5d9ee494a99",
        SALT,
        1,
        "sha1",
    ),
    (
        1024,
        "73509e8e868be6b8ac939817a98a3d35121413b2",
        "dadada",
        1,
        "sha1",
    ),
];

const DATA_LEN: usize = 8 << 20;

fn params_of(&(block, _, salt, format, hash): &(u32, &str, &str, u32, &str)) -> TreeParams {
    TreeParams {
        algorithm: HashAlgorithm::from_name(hash).unwrap(),
        hash_type: if format == 0 {
            HashType::ChromeOs
        } else {
            HashType::Normal
        },
        data_block_size: block,
        hash_block_size: block,
        data_blocks: (DATA_LEN / block as usize) as u64,
        salt: if salt == "-" {
            Vec::new()
        } else {
            from_hex(salt).unwrap()
        },
    }
}

fn open(
    data: Vec<u8>,
    data_start: u64,
    tree: Vec<u8>,
    location: &TreeLocation,
) -> Result<VeritySource, VerityError> {
    open_with(data, data_start, tree, location, small_caches())
}

/// [`open`] with the caches given.
fn open_with(
    data: Vec<u8>,
    data_start: u64,
    tree: Vec<u8>,
    location: &TreeLocation,
    caches: Arc<crate::Caches>,
) -> Result<VeritySource, VerityError> {
    VeritySource::new(
        "test.img".into(),
        Arc::new(MemorySource::new(data)),
        data_start,
        Arc::new(MemorySource::new(tree)),
        location,
        caches,
    )
}

/// Caches whose metadata tier holds 64 KiB: a tree's blocks are evicted and read again.
fn small_caches() -> Arc<crate::Caches> {
    Arc::new(crate::Caches::new(&crate::CacheBudgets::new(
        1 << 16,
        1 << 16,
    )))
}

#[test]
fn roots_match_cryptsetups_vectors_with_and_without_superblock() {
    let data = vec![0u8; DATA_LEN];
    for vector in VECTORS {
        let params = params_of(vector);
        for superblock in [true, false] {
            let (tree, root) = build_tree(&params, &data, 0, superblock).unwrap();
            assert_eq!(
                to_hex(root.as_bytes()),
                vector.1,
                "{vector:?} superblock {superblock}"
            );
            if superblock {
                let raw: &[u8; SUPERBLOCK_LEN] = tree[..SUPERBLOCK_LEN].try_into().unwrap();
                assert_eq!(parse_superblock(raw).unwrap(), params);
            }
            let location = TreeLocation {
                params: params.clone(),
                hash_offset: 0,
                superblock,
                root_hash: root.as_bytes().to_vec(),
            };
            let source = open(data.clone(), 0, tree, &location).unwrap();
            let mut scratch = Vec::new();
            let mut bad = Vec::new();
            source
                .verify_blocks(0, u64::MAX, &mut scratch, &mut |b, _| bad.push(b))
                .unwrap();
            assert!(bad.is_empty());
            assert_eq!(source.stats().verified_blocks, params.data_blocks);
        }
    }
}

#[test]
fn a_tree_appended_at_a_hash_offset_reads_like_a_separate_one() {
    // veritysetup format --hash-offset=8388608 --data-blocks=N IMG IMG: one file.
    let vector = &VECTORS[2];
    let params = params_of(vector);
    let (tree, root) = build_tree(&params, &vec![0u8; DATA_LEN], DATA_LEN as u64, true).unwrap();
    assert_eq!(to_hex(root.as_bytes()), vector.1);
    let file: Arc<dyn Source> = Arc::new(MemorySource::new(tree));
    let location = read_tree_location(
        file.as_ref(),
        DATA_LEN as u64,
        root.as_bytes().to_vec(),
        &VerityOptions::default(),
        0,
    )
    .unwrap();
    let source = VeritySource::new(
        "one".into(),
        file.clone(),
        0,
        file,
        &location,
        small_caches(),
    )
    .unwrap();
    let mut buf = vec![1u8; 10_000];
    source.read_exact_at(&mut buf, 12_345).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
    assert!(
        source.read_exact_at(&mut buf, DATA_LEN as u64).is_err(),
        "past the data"
    );
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 4096) as u8).collect()
}

fn patterned() -> (Vec<u8>, Vec<u8>, TreeLocation) {
    // 300 hashed blocks and one more data block past them.
    patterned_tree(300, 300 * 4096 + 4096)
}

/// `data_len` bytes of pattern, a salted tree over its first `blocks` blocks (with its
/// superblock, at offset 0 of its own file) and where it lies.
fn patterned_tree(blocks: u64, data_len: usize) -> (Vec<u8>, Vec<u8>, TreeLocation) {
    let data = pattern(data_len);
    let (tree, location) = tree_with(TreeParams::new(blocks, b"pepper".to_vec()), &data);
    (data, tree, location)
}

/// A tree of `params` over `data` (with its superblock, at offset 0 of its own file) and
/// where it lies.
fn tree_with(params: TreeParams, data: &[u8]) -> (Vec<u8>, TreeLocation) {
    let (tree, root) = build_tree(&params, data, 0, true).unwrap();
    let location = TreeLocation {
        params,
        hash_offset: 0,
        superblock: true,
        root_hash: root.as_bytes().to_vec(),
    };
    (tree, location)
}

#[test]
fn a_flipped_data_byte_fails_its_block_alone_and_is_counted() {
    let (mut data, tree, location) = patterned();
    data[200 * 4096 + 17] ^= 1;
    let source = open(data.clone(), 0, tree, &location).unwrap();
    let mut buf = vec![0u8; 100];
    let e = source
        .read_exact_at(&mut buf, 200 * 4096 + 4000)
        .unwrap_err();
    assert!(
        e.to_string().contains("data block 200 (at byte 819200)"),
        "{e}"
    );
    // Twice: a bad block is never marked good.
    assert!(source.read_exact_at(&mut buf, 200 * 4096).is_err());
    assert_eq!(source.stats().failures, 2);
    // Its neighbours read.
    source.read_exact_at(&mut buf, 199 * 4096 + 3996).unwrap();
    assert_eq!(buf[..], data[199 * 4096 + 3996..][..100]);
    source.read_exact_at(&mut buf, 201 * 4096).unwrap();
    let mut bad = Vec::new();
    source
        .verify_blocks(0, 300, &mut Vec::new(), &mut |b, e| {
            bad.push((b, e.to_string()))
        })
        .unwrap();
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].0, 200);
    assert!(bad[0].1.contains("data block 200"), "{}", bad[0].1);
}

#[test]
fn a_wrong_root_hash_refuses_to_open_and_a_damaged_tree_fails_its_blocks() {
    let (data, tree, mut location) = patterned();
    let good = location.root_hash.clone();
    location.root_hash[3] ^= 0x40;
    let e = open(data.clone(), 0, tree.clone(), &location).unwrap_err();
    assert!(e.is_root_mismatch(), "{e}");
    assert!(e.to_string().contains("root hash does not match"), "{e}");
    location.root_hash = good;
    // Level 0 of a 300-block tree: hash blocks 2, 3, 4 (the top block is 1); 3 covers data
    // blocks 128 to 255.
    let mut damaged = tree.clone();
    damaged[3 * 4096 + 5] ^= 1;
    let source = open(data.clone(), 0, damaged, &location).unwrap();
    let mut buf = vec![0u8; 4096];
    source.read_exact_at(&mut buf, 0).unwrap();
    let e = source.read_exact_at(&mut buf, 200 * 4096).unwrap_err();
    assert!(e.to_string().contains("hash block 3"), "{e}");
    // A damaged superblock is refused when the tree is located.
    let mut bad_superblock = tree;
    bad_superblock[64] = 3; // data block size 3
    let e = read_tree_location(
        &MemorySource::new(bad_superblock),
        0,
        location.root_hash.clone(),
        &VerityOptions::default(),
        0,
    )
    .unwrap_err();
    assert!(e.to_string().contains("not a power of two"), "{e}");
}

#[test]
fn the_data_may_start_inside_a_larger_file() {
    let (data, tree, location) = patterned();
    let mut file = vec![0xeeu8; 8192];
    file.extend_from_slice(&data);
    let source = open(file, 8192, tree, &location).unwrap();
    let mut buf = vec![0u8; 9000];
    source.read_exact_at(&mut buf, 4000).unwrap();
    assert_eq!(buf[..], data[4000..13000]);
    assert_eq!(source.len().unwrap(), 300 * 4096);
}

#[test]
fn hostile_parameters_are_errors_not_panics() {
    let (data, tree, location) = patterned();
    for (data_blocks, block) in [
        (u64::MAX, 4096),
        (1 << 60, 1 << 20),
        (1, 512),
        (u64::MAX / 512, 512),
    ] {
        let mut hostile = location.clone();
        hostile.params.data_blocks = data_blocks;
        hostile.params.data_block_size = block;
        hostile.params.hash_block_size = block;
        let _ = Geometry::new(&hostile.params, 1);
        assert!(open(data.clone(), 0, tree.clone(), &hostile).is_err() || data_blocks == 1);
    }
    let mut short_root = location.clone();
    short_root.root_hash.truncate(5);
    assert!(open(data.clone(), 0, tree.clone(), &short_root).is_err());
    assert!(
        open(data.clone(), 0, tree[..8192].to_vec(), &location).is_err(),
        "tree cut short"
    );
}

#[test]
fn a_wrong_root_hash_of_a_one_block_image_refuses_to_open() {
    let data = pattern(4096);
    let params = TreeParams::new(1, b"pepper".to_vec());
    let (tree, root) = build_tree(&params, &data, 0, true).unwrap();
    let mut location = TreeLocation {
        params,
        hash_offset: 0,
        superblock: true,
        root_hash: root.as_bytes().to_vec(),
    };
    let source = open(data.clone(), 0, tree.clone(), &location).unwrap();
    assert_eq!(source.stats().verified_blocks, 1);
    location.root_hash[0] ^= 1;
    let e = open(data, 0, tree, &location).unwrap_err();
    assert!(e.is_root_mismatch(), "{e}");
    assert!(e.to_string().contains("root hash does not match"), "{e}");
}

#[test]
fn hash_blocks_and_the_bitmap_stay_within_the_metadata_budget() {
    // 8192 data blocks: 64 hash blocks (256 KiB) at level 0, four times the budget.
    let blocks = 8192u64;
    let (data, tree, location) = patterned_tree(blocks, blocks as usize * 4096);
    let caches = small_caches();
    let budget = caches.budgets().metadata_bytes;
    let source = open_with(data.clone(), 0, tree, &location, caches.clone()).unwrap();
    // Every block, read twice in strides that leave each hash block before coming back.
    let mut buf = vec![0u8; 4096];
    for round in 0..2 {
        for stride in 0..4 {
            for block in (stride..blocks).step_by(4) {
                let pos = block * 4096;
                source.read_exact_at(&mut buf, pos).unwrap();
                assert!(buf[..] == data[pos as usize..][..4096], "block {block}");
            }
        }
        let stats = source.stats();
        assert_eq!(stats.verified_blocks, blocks, "round {round}");
        assert_eq!(stats.bitmap_bytes, blocks / 8);
        assert!(
            stats.hash_cache_bytes > 0 && stats.hash_cache_bytes + stats.bitmap_bytes <= budget,
            "{stats:?}"
        );
        let metadata = caches.stats().metadata;
        assert!(metadata.resident_bytes <= budget, "{metadata:?}");
    }
    // The first round loaded more hash blocks than fit, each once per stride: evicted ones
    // were read again (the second round, all verified, loaded none).
    assert!(source.stats().hash_block_loads > 64, "{:?}", source.stats());
    let mut bad = Vec::new();
    source
        .verify_blocks(0, blocks, &mut Vec::new(), &mut |b, _| bad.push(b))
        .unwrap();
    assert!(bad.is_empty());
    drop(source);
    assert_eq!(caches.stats().metadata.resident_bytes, 0, "freed at close");
}

#[test]
fn with_no_metadata_cache_a_check_reads_one_hash_block_not_the_path_to_the_root() {
    // 512-byte blocks, 16 digests to a hash block: 512 data blocks make three levels of 32,
    // 2 and 1 hash blocks.
    let blocks = 512u64;
    let data = pattern(blocks as usize * 512);
    let params = TreeParams {
        data_block_size: 512,
        hash_block_size: 512,
        ..TreeParams::new(blocks, b"pepper".to_vec())
    };
    let (tree, location) = tree_with(params, &data);
    // metadata_cache=0: no hash block of the bottom level is kept between checks.
    let caches = Arc::new(crate::Caches::new(&crate::CacheBudgets::new(0, 0)));
    let source = open_with(data.clone(), 0, tree, &location, caches.clone()).unwrap();
    assert_eq!(source.stats().hash_block_loads, 1, "the top block, at open");
    // One data block under each bottom hash block, twice over.
    let mut buf = [0u8; 512];
    for round in 0..2 {
        for block in (0..blocks).step_by(16) {
            let pos = block * 512 + 512 * round;
            source.read_exact_at(&mut buf, pos).unwrap();
            assert!(buf[..] == data[pos as usize..][..512], "block {block}");
        }
    }
    // Each check read its bottom hash block; the two blocks above them were read once.
    let stats = source.stats();
    assert_eq!(stats.verified_blocks, 64, "{stats:?}");
    assert_eq!(stats.hash_block_loads, 1 + 2 + 64, "{stats:?}");
    // What is kept: the three upper blocks, counted as the image's hash blocks.
    assert_eq!(stats.hash_cache_bytes, 3 * 512, "{stats:?}");
    drop(source);
    let metadata = caches.stats().metadata;
    assert_eq!(metadata.resident_bytes, 0, "{metadata:?}");
}
