//! Images inside other files, found without an offset: Apptainer SIF files in [`sif`]; a type-2
//! AppImage is built here from the published layout (a real ELF from the system, marked `AI\x02`
//! at byte 8, the image appended where the ELF ends). `squashd ls -lR` of it must print what
//! `unsquashfs -lls -o OFFSET` prints, a mount must show what the kernel's squashfs shows at that
//! offset, an explicit offset still wins, and a damaged container is one line of error, never a
//! panic.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use testkit::{Built, TreeOptions};

#[path = "containers/sif.rs"]
mod sif;

const SQUASHD: &str = env!("CARGO_BIN_EXE_squashd");

fn squashd(args: &[&OsStr]) -> Output {
    Command::new(SQUASHD)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// An ELF executable of this system to play the AppImage runtime.
fn runtime() -> Option<Vec<u8>> {
    ["/bin/true", "/usr/bin/true"]
        .iter()
        .find_map(|p| fs::read(p).ok())
        .filter(|elf| elf.starts_with(b"\x7fELF"))
}

/// `runtime` marked as a type-2 AppImage, with `image` appended: returns the file's path and
/// where the image starts (the ELF's own length: its section header table ends it).
fn appimage(dir: &Path, runtime: &[u8], image: &Path) -> (PathBuf, u64) {
    let mut bytes = runtime.to_vec();
    bytes[8..11].copy_from_slice(b"AI\x02");
    let offset = bytes.len() as u64;
    bytes.extend(fs::read(image).unwrap());
    let path = dir.join("app.AppImage");
    fs::write(&path, bytes).unwrap();
    (path, offset)
}

#[test]
fn an_appimage_is_read_without_an_offset() {
    if !testkit::have_squashfs_tools() {
        return;
    }
    let Some(elf) = runtime() else {
        eprintln!("SKIPPED: no ELF executable at /bin/true to build an AppImage from");
        return;
    };
    let built = Built::new(&TreeOptions {
        huge_sparse: false,
        many_entries: 40,
    });
    let image = built.image("zstd", &["-comp", "zstd"]);
    let (app, offset) = appimage(built.dir.path(), &elf, &image);
    let ours = squashd(&[OsStr::new("ls"), OsStr::new("-lR"), app.as_os_str()]);
    assert!(ours.status.success(), "{ours:?}");
    let offset_text = offset.to_string();
    let theirs = testkit::unsquashfs(&[
        OsStr::new("-lls"),
        OsStr::new("-o"),
        OsStr::new(&offset_text),
        app.as_os_str(),
    ]);
    assert!(theirs.status.success(), "{theirs:?}");
    assert_eq!(
        String::from_utf8_lossy(&ours.stdout),
        String::from_utf8_lossy(&theirs.stdout),
        "squashd ls -lR of the AppImage against unsquashfs -lls -o {offset}"
    );
    // info names the container and the offset it found.
    let info = squashd(&[OsStr::new("info"), app.as_os_str()]);
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(
        info.lines()
            .any(|l| l.starts_with("container:") && l.contains("AppImage"))
            && info
                .lines()
                .any(|l| l.starts_with("offset:") && l.ends_with(&format!(" {offset}"))),
        "{info}"
    );
    // An explicit offset wins: at 0 there is an ELF file, not an image.
    let at_zero = squashd(&[
        OsStr::new("ls"),
        OsStr::new("--offset"),
        OsStr::new("0"),
        app.as_os_str(),
    ]);
    assert_eq!(at_zero.status.code(), Some(1), "{at_zero:?}");

    if !testkit::can_mount() {
        return;
    }
    let (reference, kernel) = built.reference(&image, "app");
    let mnt = built.scratch("mnt-app");
    fs::create_dir_all(&mnt).unwrap();
    let out = squashd(&[OsStr::new("mount"), app.as_os_str(), mnt.as_os_str()]);
    assert!(out.status.success(), "{out:?}");
    let mounted = testkit::walk_disk(&mnt);
    let expected = testkit::walk_disk(&reference);
    testkit::umount(&mnt);
    if let Some(k) = kernel {
        testkit::detach(&k);
    }
    testkit::assert_records_eq(&expected, &mounted, "squashd mount of the AppImage");
}

#[test]
fn a_damaged_appimage_is_one_line_of_error() {
    let Some(elf) = runtime() else {
        eprintln!("SKIPPED: no ELF executable at /bin/true to build an AppImage from");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // No image after the ELF part.
    let mut bare = elf.clone();
    bare[8..11].copy_from_slice(b"AI\x02");
    bare.extend_from_slice(&[0u8; 4096]);
    // A section header table claimed far past the end of the file (64-bit ELF: e_shoff at 0x28).
    let mut far = bare.clone();
    if far[4] == 2 {
        far[0x28..0x30].copy_from_slice(&(u64::MAX - 16).to_le_bytes());
    } else {
        far[0x20..0x24].copy_from_slice(&u32::MAX.to_le_bytes());
    }
    for (name, bytes, why) in [
        ("bare.AppImage", bare, "no SquashFS image"),
        ("far.AppImage", far, "runs past"),
    ] {
        let path = dir.path().join(name);
        fs::write(&path, bytes).unwrap();
        let out = squashd(&[OsStr::new("info"), path.as_os_str()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {out:?}");
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(
            err.contains(name) && err.contains("AppImage") && err.contains(why),
            "{name}: {err}"
        );
    }
}
