//! What a blob keeps per file: nothing until a file is read, and then only for the files read
//! lately. A blob of usr has 130k files; state made for each at the mount held 53 MiB whether
//! any was read or not. The image is made by the real mksquashfs, and every file's bytes read
//! through the blob are checked against what was written. No mount: runs without root.

use squashd_core::{Image, OpenOptions};
use squashd_kernel::{translate, Blob, KernelMountOptions, BLOB_BLOCK};
use std::collections::BTreeSet;

/// Files in the image: more than a blob keeps open.
const FILES: usize = Blob::OPEN_FILES + 100;

/// File `i`'s bytes: its name, repeated to a length of its own (1 to 3 blocks of 4 KiB, so
/// files end mid-block and the blob has padding).
fn contents(i: usize) -> Vec<u8> {
    let line = format!("file {i:05}\n").into_bytes();
    let len = 4096 + i * 37 % 8192;
    line.iter().copied().cycle().take(len).collect()
}

#[test]
fn a_blob_keeps_state_only_for_files_read_lately() {
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = (0..FILES).map(|i| format!("f{i:05}")).collect();
    let data: Vec<Vec<u8>> = (0..FILES).map(contents).collect();
    let files: Vec<(&str, &[u8])> = names
        .iter()
        .zip(&data)
        .map(|(n, d)| (n.as_str(), d.as_slice()))
        .collect();
    let path = testkit::image_of_files(dir.path(), &files, &["-comp", "zstd"]);
    let image = Image::open(&path, &OpenOptions::default()).unwrap();
    let options = KernelMountOptions::default();
    let t = translate(&image, &options).unwrap();
    let blob = Blob::new(image, t.layout, options.read_ahead);
    assert_eq!(blob.layout().files().len(), FILES);
    assert_eq!(blob.open_files(), 0, "state made before any read");

    // Every file read whole through the blob, at the place the translation gave it.
    let mut read = BTreeSet::new();
    for file in blob.layout().files() {
        let mut buf = vec![0u8; file.size as usize];
        let got = blob
            .read_at(file.start_block * BLOB_BLOCK, &mut buf)
            .unwrap();
        assert_eq!(got.len, buf.len());
        read.insert(buf);
        assert!(
            blob.open_files() <= Blob::OPEN_FILES,
            "{} files open",
            blob.open_files()
        );
    }
    assert_eq!(read, data.into_iter().collect(), "the blob's files differ");
    assert!(
        blob.open_files() >= Blob::OPEN_FILES / 2,
        "only {} files open after reading {FILES}: the files read lately are dropped too soon",
        blob.open_files()
    );
}
