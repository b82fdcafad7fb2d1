//! The kernel path's blob holds no page cache of its own: a random pass over a file larger
//! than the data budget leaves the blob's cached pages within that budget (none at all, by
//! design: EROFS reads it with direct I/O and keeps the data once, in its own page cache), as
//! cachestat(2) on the blob file sees it and as `status` reports it.
//!
//! Not fincore(1): util-linux 2.38's maps the file, and mapping a FUSE file opened with
//! FOPEN_DIRECT_IO drops its page cache first, so it would read zero whatever the blob held.

use super::*;
use std::os::unix::fs::FileExt;

/// The data budget of the mount: an eighth of the file read.
const BUDGET: u64 = 4 << 20;

/// The file read at random: 32 MiB in 256 blocks of 128 KiB.
const FILE: usize = 32 << 20;

#[test]
fn a_random_pass_past_the_data_budget_leaves_the_blob_within_it() {
    if !testkit::can_mount_erofs() {
        testkit::skip("the kernel path: no EROFS (or not root)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    let mut rng = fastrand::Rng::with_seed(2024);
    let data: Vec<u8> = (0..FILE).map(|_| b"acgt"[rng.usize(..4)]).collect();
    fs::write(src.join("big"), &data).unwrap();
    let image = dir.path().join("i.sqfs");
    // Level 1: the default (15) takes most of a minute for this file on a busy machine.
    testkit::mksquashfs(
        &src,
        &image,
        &["-comp", "zstd", "-Xcompression-level", "1", "-b", "128K"],
    );
    let mnt = dir.path().join("mnt");
    let socket = dir.path().join("control.sock");
    let _mounted = mount(
        &image,
        &mnt,
        &format!(
            "kernel,data_cache={}MiB,control={}",
            BUDGET >> 20,
            socket.display()
        ),
    );
    let status = status_json(&socket);
    assert_eq!(status["images"][0]["engine"], "kernel", "{status}");

    // 2,000 random 4 KiB reads touch almost all of the 256 blocks: 32 MiB decompressed,
    // eight times the budget.
    let file = fs::File::open(mnt.join("big")).unwrap();
    rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::Random).unwrap();
    let mut buf = vec![0u8; 4096];
    for _ in 0..2000 {
        let at = rng.usize(..FILE / 4096) * 4096;
        file.read_exact_at(&mut buf, at as u64).unwrap();
        assert!(buf == data[at..at + 4096], "bytes at {at} differ");
    }

    let pid = daemons_of(&mnt)[0];
    let blob_dir = PathBuf::from(format!("/run/squashd/mount-{pid}"));
    let blob = fs::read_dir(&blob_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "blob"))
        .unwrap_or_else(|| panic!("no blob in {}", blob_dir.display()));
    let blob_cached =
        squashd_kernel::page_cache::cached_bytes(&fs::File::open(&blob).unwrap()).unwrap();
    let file_cached = squashd_kernel::page_cache::cached_bytes(&file).unwrap();
    // The pass was larger than the budget, and its data is cached where readers find it.
    assert!(
        file_cached > 2 * BUDGET,
        "the random pass left only {file_cached} bytes of the file cached"
    );
    // Slack: none. The blob is never cached, so any page of it is a change of design.
    assert!(
        blob_cached <= BUDGET,
        "the blob holds {blob_cached} bytes of page cache, over the {BUDGET}-byte data budget"
    );
    assert_eq!(
        blob_cached, 0,
        "the blob holds page cache: {blob_cached} bytes"
    );
    let status = status_json(&socket);
    let translation = &status["images"][0]["translation"];
    assert_eq!(
        translation["blob_cached_bytes"].as_u64(),
        Some(blob_cached),
        "status: {translation}"
    );
    assert!(translation["fills"].as_u64().unwrap() > 0, "{translation}");
    drop(file);
    testkit::umount(&mnt);
    wait_for_no_daemon(&mnt);
}
