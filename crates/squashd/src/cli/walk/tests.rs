//! The counters `walk` reports are deterministic; these tests hold them on an image the real
//! mksquashfs builds from a generated tree, and check the walk against that tree.

use super::*;
use crate::cli::ImageArgs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Writes a tree of 60 directories of 120 files each (plus symlinks and a nested level), big
/// enough for dozens of metadata blocks; returns it with its entry count and content bytes.
fn build_tree(root: &Path) -> (u64, u64) {
    let (mut entries, mut bytes) = (1u64, 0u64);
    for d in 0..60 {
        let dir = root.join(format!("dir-{d:03}"));
        let sub = dir.join("nested");
        std::fs::create_dir_all(&sub).unwrap();
        entries += 2;
        for f in 0..120 {
            let len = (d * 131 + f * 977) % 20_000;
            let content: Vec<u8> = (0..len).map(|i| (i * 7 + f) as u8).collect();
            let at = if f % 4 == 0 { &sub } else { &dir };
            std::fs::write(at.join(format!("file-with-a-longish-name-{f:04}")), content).unwrap();
            bytes += len as u64;
            entries += 1;
        }
        std::os::unix::fs::symlink("nested", dir.join("link")).unwrap();
        entries += 1;
    }
    (entries, bytes)
}

/// A gzip image of a fresh tree, or None (with the SKIPPED line) without mksquashfs.
fn image(tmp: &Path) -> Option<(PathBuf, u64, u64)> {
    let src = tmp.join("src");
    let (entries, bytes) = build_tree(&src);
    let image = tmp.join("walk.sqfs");
    let status = Command::new("mksquashfs")
        .arg(&src)
        .arg(&image)
        .args(["-comp", "gzip", "-noappend", "-quiet", "-no-progress"])
        .status();
    match status {
        Ok(s) if s.success() => Some((image, entries, bytes)),
        Ok(s) => panic!("mksquashfs failed: {s}"),
        Err(e) => {
            eprintln!("SKIPPED: mksquashfs cannot run ({e}); scripts/setup.sh installs it");
            None
        }
    }
}

fn args(image: &Path, metadata_cache: Option<u64>) -> ImageArgs {
    ImageArgs {
        image: image.to_path_buf(),
        offset: Some(0),
        partition: None,
        metadata_cache,
        data_cache: None,
        disk_cache: None,
        disk_cache_size: 0,
        verity: Default::default(),
    }
}

#[test]
fn sixteen_parallel_walks_decompress_each_metadata_block_once() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((image, entries, _)) = image(tmp.path()) else {
        return;
    };
    let reference = run_phase(&args(&image, Some(1 << 30)), "warm-up", 1, 1, false).unwrap();
    let distinct = reference.stats.metadata.loads;
    assert_eq!(reference.count.entries, entries);
    assert!(
        distinct > 10,
        "only {distinct} metadata blocks: the tree is too small"
    );

    let parallel = run_phase(&args(&image, None), "parallel", 16, 2, false).unwrap();
    let m = parallel.stats.metadata;
    assert_eq!(parallel.count.entries, entries);
    assert_eq!(parallel.count.files, 60 * 120);
    assert_eq!(m.loads, distinct, "a metadata block was decompressed twice");
    assert_eq!(m.entries, distinct);
    // Threads that wanted a block another thread was loading waited for it: counted as hits.
    assert_eq!(m.misses, distinct);
    assert!(m.hits > distinct * 16);
}

#[test]
fn a_budget_smaller_than_the_metadata_makes_repeated_walks_decompress_again() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((image, entries, _)) = image(tmp.path()) else {
        return;
    };
    let reference = run_phase(&args(&image, Some(1 << 30)), "warm-up", 1, 1, false).unwrap();
    let small = run_phase(&args(&image, Some(32 << 10)), "parallel", 1, 3, false).unwrap();
    assert_eq!(small.count.entries, entries);
    assert!(
        small.stats.metadata.loads > reference.stats.metadata.loads,
        "3 walks with a 32 KiB budget decompressed only {} blocks of {}",
        small.stats.metadata.loads,
        reference.stats.metadata.loads
    );
}

#[test]
fn reading_walks_read_every_byte_and_agree_across_threads() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((image, entries, bytes)) = image(tmp.path()) else {
        return;
    };
    let phase = run_phase(&args(&image, None), "parallel", 4, 1, true).unwrap();
    assert_eq!(phase.count.entries, entries);
    assert_eq!(phase.count.content_bytes, bytes);
    assert!(phase.stats.data.loads > 0);
    assert!(phase.stats.bytes_read > 0);
}

#[test]
fn json_output_has_the_keys_bench_reads_and_escapes_the_image_name() {
    let phase = |label, threads| Phase {
        label,
        threads,
        walks_per_thread: 2,
        wall: Duration::from_micros(1_500_250),
        count: WalkCount::default(),
        stats: ImageStats::default(),
    };
    let phases = [phase("serial", 1), phase("parallel", 4)];
    let report = Report {
        image: "a\"b\\c\n",
        read: false,
        warmup: None,
        phases: &phases,
        distinct: Some(8),
    };
    let json: serde_json::Value = serde_json::from_str(&report.json().unwrap()).unwrap();
    assert_eq!(json["image"], "a\"b\\c\n");
    assert_eq!(json["warmup"], serde_json::Value::Null);
    assert_eq!(json["speedup"], 1.0);
    let p = &json["phases"][1];
    assert_eq!(p["label"], "parallel");
    assert_eq!(p["threads"], 4);
    assert_eq!(p["walks_per_thread"], 2);
    assert_eq!(p["wall_seconds"], 1.50025);
    assert_eq!(p["distinct_metadata_blocks"], 8);
    assert_eq!(p["decompressions_per_metadata_block"], 0.0);
    assert_eq!(p["bytes_read"], 0);
    for key in ["loads", "hit_ratio", "wait_seconds"] {
        assert!(p["metadata"][key].is_number(), "metadata.{key}: {p}");
    }
}
