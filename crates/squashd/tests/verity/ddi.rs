//! Discoverable Disk Images made by the real `systemd-repart` (Format=squashfs, Verity=data,
//! hash and signature, VerityMatchKey=): read without an offset, listed as `unsquashfs -lls -o`
//! lists their root partition, verified with the root hash of their `-verity-sig` partition
//! or the one given, and failing at a flipped byte of the partition.

use super::*;

/// A DDI of `built`'s tree in `name` (a signature partition when `signed`): its path, the
/// root hash systemd-repart printed and the root partition's offset. None (SKIPPED printed)
/// where systemd-repart cannot run (not installed; not root: it formats through a loop device).
fn repart(built: &Built, name: &str, signed: bool) -> Option<(PathBuf, String, u64)> {
    if !testkit::have_tool("systemd-repart") {
        testkit::skip("systemd-repart not installed (apt install systemd-repart)");
        return None;
    }
    if !testkit::is_root() {
        testkit::skip("systemd-repart formats through a loop device: needs root");
        return None;
    }
    let defs = built.scratch(&format!("{name}.repart.d"));
    fs::create_dir_all(&defs).unwrap();
    let root = format!(
        "[Partition]\nType=root\nFormat=squashfs\nCopyFiles={}:/\nVerity=data\nVerityMatchKey=root\n",
        built.src.display()
    );
    fs::write(defs.join("10-root.conf"), root).unwrap();
    fs::write(
        defs.join("20-verity.conf"),
        "[Partition]\nType=root-verity\nVerity=hash\nVerityMatchKey=root\n",
    )
    .unwrap();
    let image = built.scratch(&format!("{name}.raw"));
    let mut command = Command::new("systemd-repart");
    command
        .arg(format!("--definitions={}", defs.display()))
        .args([
            "--empty=create",
            "--size=auto",
            "--dry-run=no",
            "--json=short",
        ]);
    if signed {
        fs::write(
            defs.join("30-sig.conf"),
            "[Partition]\nType=root-verity-sig\nVerity=signature\nVerityMatchKey=root\n",
        )
        .unwrap();
        let (key, cert) = (built.scratch("key.pem"), built.scratch("cert.crt"));
        self_signed_certificate(&key, &cert, "squashd verity test");
        command
            .arg(format!("--private-key={}", key.display()))
            .arg(format!("--certificate={}", cert.display()));
    }
    let out = command.arg(&image).output().unwrap();
    assert!(out.status.success(), "systemd-repart: {out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let parts = json.as_array().unwrap();
    let root_hash = parts
        .iter()
        .find_map(|p| p["roothash"].as_str())
        .unwrap()
        .to_string();
    let offset = parts
        .iter()
        .find(|p| {
            p["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("root-") && !t.contains("verity"))
        })
        .and_then(|p| p["offset"].as_u64())
        .unwrap();
    Some((image, root_hash, offset))
}

#[test]
fn a_signed_ddi_is_found_listed_and_verified_by_its_signature_partitions_root_hash() {
    if !testkit::have_squashfs_tools() {
        return;
    }
    let built = Built::new(&TreeOptions {
        huge_sparse: false,
        many_entries: 100,
    });
    let Some((image, root, offset)) = repart(&built, "signed", true) else {
        return;
    };
    // Its signature is checked against the trusted certificates: none trusted, it is refused
    // (unless its root hash is given, which trusts it as given).
    let empty = built.scratch("no-certs");
    fs::create_dir_all(&empty).unwrap();
    let untrusted = format!("--verity-opt=verity_certs={}", empty.display());
    let out = squashd(&[
        OsStr::new("info"),
        OsStr::new(&untrusted),
        image.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out.stderr).contains("no trusted certificate"),
        "{out:?}"
    );
    let given = format!("--roothash={root}");
    let out = squashd(&[
        OsStr::new("ls"),
        OsStr::new(&untrusted),
        OsStr::new(&given),
        image.as_os_str(),
    ]);
    assert!(out.status.success(), "{out:?}");
    // Another key's certificate does not verify it.
    let other = built.scratch("other-certs");
    fs::create_dir_all(&other).unwrap();
    let made = Command::new("openssl")
        .args([
            "req", "-new", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", "/CN=someone else", "-keyout"])
        .arg(built.scratch("other.pem"))
        .arg("-out")
        .arg(other.join("other.crt"))
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let wrong = format!("--verity-opt=verity_certs={}", other.display());
    let out = squashd(&[OsStr::new("ls"), OsStr::new(&wrong), image.as_os_str()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("does not verify"), "{out:?}");
    // Its own certificate trusted: signed, verified.
    let certs = built.scratch("certs");
    fs::create_dir_all(&certs).unwrap();
    fs::copy(built.scratch("cert.crt"), certs.join("test.crt")).unwrap();
    let trusted = format!("--verity-opt=verity_certs={}", certs.display());
    let info = squashd(&[
        OsStr::new("info"),
        OsStr::new("--verity=signed"),
        OsStr::new(&trusted),
        image.as_os_str(),
    ]);
    assert!(info.status.success(), "{info:?}");
    let info = text(&info.stdout);
    for expected in [
        "GPT disk image",
        "root-x86-64-verity-sig",
        &format!("root hash {root} from the image's -verity-sig partition"),
        "signed by CN=squashd verity test",
    ] {
        assert!(info.contains(expected), "{expected}: {info}");
    }
    let out = squashd(&[
        OsStr::new("verify"),
        OsStr::new(&trusted),
        image.as_os_str(),
    ]);
    assert!(out.status.success(), "{out:?}");
    // Listed as unsquashfs lists the root partition at its offset.
    let ours = squashd(&[
        OsStr::new("ls"),
        OsStr::new("-lR"),
        OsStr::new(&trusted),
        image.as_os_str(),
    ]);
    assert!(ours.status.success(), "{ours:?}");
    let theirs = testkit::unsquashfs(&[
        OsStr::new("-lls"),
        OsStr::new("-o"),
        OsStr::new(&offset.to_string()),
        image.as_os_str(),
    ]);
    assert_eq!(text(&ours.stdout), text(&theirs.stdout));
    // A flipped byte of the root partition: the block is named, the exit status is 1.
    flip(&image, offset + 5000);
    let out = squashd(&[
        OsStr::new("verify"),
        OsStr::new(&trusted),
        image.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("data block 9 "), "{out:?}"); // 512-byte blocks
}

#[test]
fn an_unsigned_ddi_needs_its_root_hash_given_or_beside_it() {
    if !testkit::have_squashfs_tools() {
        return;
    }
    let built = Built::new(&TreeOptions {
        huge_sparse: false,
        many_entries: 10,
    });
    let Some((image, root, _)) = repart(&built, "plain", false) else {
        return;
    };
    // auto: read unverified; require: refused in one line.
    assert!(squashd(&[OsStr::new("ls"), image.as_os_str()])
        .status
        .success());
    let out = squashd(&[
        OsStr::new("ls"),
        OsStr::new("--verity=require"),
        image.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("no root hash"), "{out:?}");
    // Given, or in IMAGE.roothash (plain.raw: plain.roothash, as systemd names it).
    let hash = format!("--roothash={root}");
    let out = squashd(&[OsStr::new("verify"), OsStr::new(&hash), image.as_os_str()]);
    assert!(out.status.success(), "{out:?}");
    fs::write(built.scratch("plain.roothash"), &root).unwrap();
    let out = squashd(&[OsStr::new("verify"), image.as_os_str()]);
    assert!(out.status.success(), "{out:?}");
    // A wrong one refuses the image.
    fs::write(built.scratch("plain.roothash"), "ab".repeat(32)).unwrap();
    let out = squashd(&[OsStr::new("ls"), image.as_os_str()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out.stderr).contains("root hash does not match"),
        "{out:?}"
    );
}
