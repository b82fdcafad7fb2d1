//! What attaching a verified image costs in checks, counted (the counters are exact, where
//! times on a shared machine are not): the image's open and the attach probe read a few
//! metadata blocks, so only their data blocks are hashed, and only the hash blocks above them
//! read; nothing is checked ahead of the reads that need it.

use super::verity::{have_veritysetup, veritysetup_format};
use super::*;

/// An image of 200 small files and one of 8 MiB (2048 data blocks of the tree, two levels of
/// hash blocks), with its tree and root hash beside it.
fn big_verified_image(dir: &Path) -> PathBuf {
    fs::create_dir_all(dir).unwrap();
    let mut rng = fastrand::Rng::with_seed(7);
    let big: Vec<u8> = (0..8 << 20).map(|_| rng.u8(..)).collect();
    let small: Vec<(String, Vec<u8>)> = (0..200)
        .map(|i| (format!("f{i:03}"), vec![i as u8; 100 + i]))
        .collect();
    let mut files: Vec<(&str, &[u8])> = small
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_slice()))
        .collect();
    files.push(("big.bin", &big));
    let image = testkit::image_of_files(dir, &files, &[]);
    let tree = PathBuf::from(format!("{}.verity", image.display()));
    let root = veritysetup_format(&image, &tree);
    fs::write(format!("{}.roothash", image.display()), root).unwrap();
    image
}

#[test]
fn attaching_a_verified_image_checks_only_what_its_open_and_probe_read() {
    if !testkit::can_mount() || !have_veritysetup() {
        return;
    }
    let scratch = Scratch::new();
    let image = big_verified_image(&scratch.path().join("img"));
    let mnt = scratch.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mut daemon = Daemon::start(
        scratch.path(),
        "verity-costs",
        &image_entry(&image, &mnt, "verity=require"),
    );
    daemon.wait_ready(Duration::from_secs(30));
    let status = daemon.image_status(&mnt);
    let verity = &status["verity"];
    let data_blocks = verity["data_blocks"].as_u64().unwrap();
    let verified = verity["verified_blocks"].as_u64().unwrap();
    let loads = verity["hash_block_loads"].as_u64().unwrap();
    assert!(data_blocks > 2048, "{status}");
    // The superblock's block, the tables' and the root directory's at the end: a handful of
    // the image's blocks, and the tree's top block with one block below it per place read.
    assert!(
        verified <= 6,
        "{verified} of {data_blocks} blocks checked: {status}"
    );
    assert!(loads <= 3, "{loads} hash blocks read: {status}");
    eprintln!("attach: {verified} of {data_blocks} data blocks checked, {loads} hash blocks read");
    // Reading big.bin checks its blocks, and no more than the image has.
    let bytes = fs::read(mnt.join("big.bin")).unwrap();
    assert_eq!(bytes.len(), 8 << 20);
    let status = daemon.image_status(&mnt);
    let after = status["verity"]["verified_blocks"].as_u64().unwrap();
    assert!(after >= 2048 && after <= data_blocks, "{status}");
    // A sequential read's hash blocks come by the kernel's read-ahead of the tree, not one
    // hint (and one read of a single block) each: 16 bottom hash blocks check big.bin, and a
    // hint each was given before (2026-11-27-verity-s8.md).
    let hints = status["verity"]["hash_hints"].as_u64().unwrap();
    assert!(
        hints <= 4,
        "{hints} hints for one sequential read: {status}"
    );
    // Each data block hashed once, but where two reads checked one block at once: a block
    // across the edge of two of the file's 64 blocks, read ahead side by side.
    let hashes = status["verity"]["data_block_hashes"].as_u64().unwrap();
    assert!(
        hashes >= after && hashes <= after + 64,
        "{hashes} hashes for {after} blocks: {status}"
    );
    eprintln!("big.bin read: {hints} hints, {hashes} hashes of {after} blocks checked");
    daemon.terminate();
}
