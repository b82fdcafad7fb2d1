//! Images checked against dm-verity trees made by the real `veritysetup format`
//! (cryptsetup-bin): a tree beside the image with or without its superblock, a tree appended at
//! a hash offset, other hashes and block sizes. Each must pass `squashd verify` exactly when
//! `veritysetup verify` passes, list as `unsquashfs -lls` lists, and fail, block by block, when
//! a byte of its data, metadata, superblock or tree is flipped; a wrong root hash refuses it.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use testkit::{Built, TreeOptions};

#[path = "verity/ddi.rs"]
mod ddi;
#[path = "verity/mount.rs"]
mod mount;
#[path = "verity/remote.rs"]
mod remote;

const SQUASHD: &str = env!("CARGO_BIN_EXE_squashd");

fn squashd<S: AsRef<OsStr>>(args: &[S]) -> Output {
    Command::new(SQUASHD)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn have_veritysetup() -> bool {
    if testkit::have_tool("veritysetup") {
        return true;
    }
    testkit::skip("veritysetup not installed (apt install cryptsetup-bin; scripts/setup.sh does)");
    false
}

/// `veritysetup format ARGS`: the root hash it printed.
fn format(args: &[&OsStr]) -> String {
    let out = Command::new("veritysetup")
        .arg("format")
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "veritysetup format {args:?}: {out:?}");
    text(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("Root hash:"))
        .map(|h| h.trim().to_string())
        .expect("a root hash")
}

/// Whether `veritysetup verify ARGS` passes.
fn veritysetup_verify(args: &[&OsStr]) -> bool {
    Command::new("veritysetup")
        .arg("verify")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

fn fixture() -> Option<(Built, PathBuf)> {
    if !testkit::have_squashfs_tools() || !have_veritysetup() {
        return None;
    }
    let built = Built::new(&TreeOptions {
        huge_sparse: false,
        many_entries: 300,
    });
    let image = built.image("zstd", &["-comp", "zstd"]);
    Some((built, image))
}

fn copy(built: &Built, image: &Path, name: &str) -> PathBuf {
    let copy = built.scratch(name);
    fs::copy(image, &copy).unwrap();
    copy
}

fn flip(path: &Path, at: u64) {
    let mut bytes = fs::read(path).unwrap();
    bytes[at as usize] ^= 0x5a;
    fs::write(path, bytes).unwrap();
}

/// A new RSA key at `key` and a self-signed certificate for it at `cert`, for the common name
/// `common_name`: a signer that tests can make trusted or leave untrusted.
fn self_signed_certificate(key: &Path, cert: &Path, common_name: &str) {
    let made = Command::new("openssl")
        .args([
            "req", "-new", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .arg("-subj")
        .arg(format!("/CN={common_name}"))
        .arg("-keyout")
        .arg(key)
        .arg("-out")
        .arg(cert)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
}

fn assert_lists_like_unsquashfs(image: &Path, extra: &[&OsStr]) {
    let mut args = vec![OsStr::new("ls"), OsStr::new("-lR")];
    args.extend_from_slice(extra);
    args.push(image.as_os_str());
    let ours = squashd(&args);
    assert!(ours.status.success(), "{ours:?}");
    let theirs = testkit::unsquashfs(&[OsStr::new("-lls"), image.as_os_str()]);
    assert_eq!(
        text(&ours.stdout),
        text(&theirs.stdout),
        "{}",
        image.display()
    );
}

#[test]
fn sidecar_trees_verify_list_and_catch_every_flipped_byte() {
    let Some((built, image)) = fixture() else {
        return;
    };
    let tree = PathBuf::from(format!("{}.verity", image.display()));
    let root = format(&[image.as_os_str(), tree.as_os_str()]);
    fs::write(format!("{}.roothash", image.display()), format!("{root}\n")).unwrap();
    // Found beside the image: verified, and read as unsquashfs reads it.
    let out = squashd(&[OsStr::new("verify"), image.as_os_str()]);
    assert!(out.status.success(), "{out:?}");
    assert!(text(&out.stdout).contains(&root), "{out:?}");
    assert_lists_like_unsquashfs(&image, &[OsStr::new("--verity=require")]);

    let len = fs::metadata(&image).unwrap().len();
    let superblock = testkit::raw::u64_at(&fs::File::open(&image).unwrap(), 64); // inode table
                                                                                 // (where, what): a byte of the superblock, of the inode table, of file data near the start.
    for (at, what) in [
        (28, "superblock"),
        (superblock + 10, "metadata"),
        (8192 + 100, "data"),
    ] {
        assert!(at < len);
        let bad = copy(&built, &image, &format!("bad-{what}.sqfs"));
        fs::copy(&tree, format!("{}.verity", bad.display())).unwrap();
        fs::write(format!("{}.roothash", bad.display()), &root).unwrap();
        flip(&bad, at);
        let block = at / 4096;
        let out = squashd(&[OsStr::new("verify"), bad.as_os_str()]);
        assert_eq!(out.status.code(), Some(1), "{what}: {out:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!("data block {block} ")),
            "{what}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
        let bad_tree = PathBuf::from(format!("{}.verity", bad.display()));
        assert!(!veritysetup_verify(&[
            bad.as_os_str(),
            bad_tree.as_os_str(),
            OsStr::new(&root)
        ]));
        // Reading what needs that block fails with one line naming the image and the block;
        // without verity it "works".
        let ls = squashd(&[OsStr::new("ls"), OsStr::new("-lR"), bad.as_os_str()]);
        if what != "data" {
            assert_eq!(ls.status.code(), Some(1), "{what}: {ls:?}");
            assert!(
                text(&ls.stderr).contains(&format!("data block {block} ")),
                "{ls:?}"
            );
        }
        let off = squashd(&[
            OsStr::new("info"),
            OsStr::new("--verity=off"),
            bad.as_os_str(),
        ]);
        assert_eq!(
            off.status.success(),
            what != "superblock",
            "{what}: {off:?}"
        );
    }

    // A flipped byte of the tree: that tree block's data blocks fail.
    let bad = copy(&built, &image, "bad-tree.sqfs");
    let bad_tree = PathBuf::from(format!("{}.verity", bad.display()));
    fs::copy(&tree, &bad_tree).unwrap();
    fs::write(format!("{}.roothash", bad.display()), &root).unwrap();
    let tree_len = fs::metadata(&bad_tree).unwrap().len();
    flip(&bad_tree, tree_len - 4096 + 5); // the last block of the bottom level
    let out = squashd(&[OsStr::new("verify"), bad.as_os_str()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("hash block"), "{out:?}");
    assert!(!veritysetup_verify(&[
        bad.as_os_str(),
        bad_tree.as_os_str(),
        OsStr::new(&root)
    ]));

    // A wrong root hash: refused at open, one line.
    let mut wrong = root.clone().into_bytes();
    wrong[0] = if wrong[0] == b'0' { b'1' } else { b'0' };
    let wrong = String::from_utf8(wrong).unwrap();
    let out = squashd(&[
        OsStr::new("ls"),
        OsStr::new("--roothash"),
        OsStr::new(&wrong),
        image.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = text(&out.stderr);
    assert!(
        err.contains("root hash does not match") && err.contains(&wrong),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn trees_without_superblock_at_a_hash_offset_and_of_other_hashes() {
    let Some((built, image)) = fixture() else {
        return;
    };
    let salt = "5a17";
    // --no-superblock, sha512, 1024-byte blocks: its parameters are given.
    let tree = built.scratch("nosb.verity");
    let root = format(&[
        OsStr::new("--no-superblock"),
        OsStr::new("--hash=sha512"),
        OsStr::new("--data-block-size=1024"),
        OsStr::new("--hash-block-size=1024"),
        OsStr::new(&format!("--salt={salt}")),
        image.as_os_str(),
        tree.as_os_str(),
    ]);
    let opts = [
        "--verity-opt=verity_superblock=no",
        "--verity-opt=verity_hash=sha512",
        "--verity-opt=verity_block_size=1024",
        &format!("--verity-opt=verity_salt={salt}"),
    ];
    let mut args: Vec<&OsStr> = vec![OsStr::new("verify")];
    args.extend(opts.iter().map(OsStr::new));
    let data = format!("--verity-data={}", tree.display());
    let hash = format!("--roothash={root}");
    args.extend([OsStr::new(&data), OsStr::new(&hash), image.as_os_str()]);
    let out = squashd(&args);
    assert!(out.status.success(), "{out:?}");
    assert!(text(&out.stdout).contains("sha512"), "{out:?}");

    // sha1 with a superblock, found beside the image through --verity-data.
    let tree = built.scratch("sha1.verity");
    let root = format(&[
        OsStr::new("--hash=sha1"),
        image.as_os_str(),
        tree.as_os_str(),
    ]);
    let data = format!("--verity-data={}", tree.display());
    let hash = format!("--roothash={root}");
    assert_lists_like_unsquashfs(&image, &[OsStr::new(&data), OsStr::new(&hash)]);

    // The tree appended to the image at a hash offset (one file, as systemd supports).
    let appended = copy(&built, &image, "appended.sqfs");
    let len = fs::metadata(&appended).unwrap().len();
    assert_eq!(len % 4096, 0, "mksquashfs pads to 4 KiB");
    let root = format(&[
        OsStr::new(&format!("--hash-offset={len}")),
        OsStr::new(&format!("--data-blocks={}", len / 4096)),
        appended.as_os_str(),
        appended.as_os_str(),
    ]);
    assert!(fs::metadata(&appended).unwrap().len() > len);
    let offset = format!("--verity-hash-offset={len}");
    let hash = format!("--roothash={root}");
    let out = squashd(&[
        OsStr::new("verify"),
        OsStr::new(&offset),
        OsStr::new(&hash),
        appended.as_os_str(),
    ]);
    assert!(out.status.success(), "{out:?}");
    assert_lists_like_unsquashfs(&appended, &[OsStr::new(&offset), OsStr::new(&hash)]);
}

#[test]
fn discovery_follows_systemd_and_require_refuses_what_is_missing() {
    let Some((built, image)) = fixture() else {
        return;
    };
    // Nothing beside it: auto reads it, require refuses in one line.
    let plain = copy(&built, &image, "plain.raw");
    assert!(squashd(&[OsStr::new("info"), plain.as_os_str()])
        .status
        .success());
    let out = squashd(&[
        OsStr::new("info"),
        OsStr::new("--verity=require"),
        plain.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("verity=require"), "{out:?}");
    // IMAGE.raw is looked up as IMAGE.verity, and its root hash in the user.verity.roothash
    // xattr.
    let tree = built.scratch("plain.verity");
    let root = format(&[plain.as_os_str(), tree.as_os_str()]);
    let out = squashd(&[OsStr::new("info"), plain.as_os_str()]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a tree without a root hash: {out:?}"
    );
    assert!(text(&out.stderr).contains("no root hash"), "{out:?}");
    let set = Command::new("setfattr")
        .args(["-n", "user.verity.roothash", "-v", &root])
        .arg(&plain)
        .status();
    if !set.is_ok_and(|s| s.success()) {
        testkit::skip("setfattr cannot set a user xattr here");
        return;
    }
    let out = squashd(&[OsStr::new("verify"), plain.as_os_str()]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text(&out.stdout).contains("user.verity.roothash"),
        "{out:?}"
    );
}

#[test]
fn a_signed_sidecar_root_hash_is_checked_against_the_trusted_certificates() {
    let Some((built, image)) = fixture() else {
        return;
    };
    let signed = copy(&built, &image, "signed.sqfs");
    let tree = PathBuf::from(format!("{}.verity", signed.display()));
    let root = format(&[signed.as_os_str(), tree.as_os_str()]);
    fs::write(format!("{}.roothash", signed.display()), &root).unwrap();
    let certs = built.scratch("certs");
    fs::create_dir_all(&certs).unwrap();
    let (key, cert) = (built.scratch("key.pem"), certs.join("signer.crt"));
    self_signed_certificate(&key, &cert, "sidecar signer");
    // As systemd-repart and the kernel take it: a detached PKCS#7 over the hex root hash.
    let sign = |hash: &str, out: &Path| {
        let input = built.scratch("hash.txt");
        fs::write(&input, hash).unwrap();
        let done = Command::new("openssl")
            .args([
                "smime", "-sign", "-nocerts", "-noattr", "-binary", "-outform", "der",
            ])
            .arg("-in")
            .arg(&input)
            .arg("-inkey")
            .arg(&key)
            .arg("-signer")
            .arg(&cert)
            .arg("-out")
            .arg(out)
            .output()
            .unwrap();
        assert!(done.status.success(), "{done:?}");
    };
    let p7s = PathBuf::from(format!("{}.roothash.p7s", signed.display()));
    sign(&root, &p7s);
    let trusted = format!("--verity-opt=verity_certs={}", certs.display());
    let args = |mode: &str| {
        vec![
            OsStr::new("info").to_owned(),
            OsStr::new(mode).to_owned(),
            OsStr::new(&trusted).to_owned(),
            signed.clone().into_os_string(),
        ]
    };
    let out = squashd(&args("--verity=signed"));
    assert!(out.status.success(), "{out:?}");
    assert!(
        text(&out.stdout).contains("signed by CN=sidecar signer"),
        "{out:?}"
    );
    // A signature of another hash is refused, in every mode but off.
    sign(&"0".repeat(64), &p7s);
    for mode in ["--verity=auto", "--verity=require", "--verity=signed"] {
        let out = squashd(&args(mode));
        assert_eq!(out.status.code(), Some(1), "{mode}: {out:?}");
        assert!(
            text(&out.stderr).contains("does not verify"),
            "{mode}: {out:?}"
        );
    }
    // verity=signed refuses an unsigned root hash.
    fs::remove_file(&p7s).unwrap();
    let out = squashd(&args("--verity=signed"));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("has no signature"), "{out:?}");
    assert!(squashd(&args("--verity=require")).status.success());
}
