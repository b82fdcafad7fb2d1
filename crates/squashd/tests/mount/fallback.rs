//! The mount funnel's fallback rule on a lone `squashd mount`: when squashd chose the kernel
//! path and it fails, the image is mounted through FUSE with one line saying why; with
//! `-o kernel` the mount fails. Two real failures: an image the translation refuses (a symlink
//! target of 4096 bytes or more, which mksquashfs stores and EROFS cannot), and an EROFS mount
//! the kernel refuses (in a user namespace, where FUSE may be mounted and EROFS may not).

use super::*;

#[path = "../support/fallback.rs"]
mod support;

use support::{in_user_namespace, kernel_path_possible, untranslatable_image};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn an_image_the_translation_refuses_is_mounted_through_fuse_unless_kernel_was_asked_for() {
    if !kernel_path_possible() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let image = untranslatable_image(dir.path());
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();

    let out = squashd_mount(&image, &mnt, "allow_other");
    let _guard = MountGuard(mnt.clone());
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(
        said.contains("FUSE, not the kernel path") && said.contains("cannot translate"),
        "{said}"
    );
    assert_eq!(said.lines().count(), 1, "not one line: {said}");
    assert_eq!(fs::read_to_string(mnt.join("a")).unwrap(), "hello\n");
    assert_eq!(fs_type(&mnt).as_deref(), Some("fuse.squashd"));
    testkit::umount(&mnt);

    let out = squashd_mount(&image, &mnt, "allow_other,kernel");
    assert!(!out.status.success(), "mounted with -o kernel");
    assert!(
        stderr(&out).contains("cannot translate"),
        "{}",
        stderr(&out)
    );
    assert!(!is_mounted(&mnt));
}

#[test]
fn an_erofs_mount_the_kernel_refuses_falls_back_to_fuse_in_both_modes() {
    if !kernel_path_possible() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("a"), "hello\n").unwrap();
    let out = Command::new("mksquashfs")
        .arg(&src)
        .arg(dir.path().join("ok.sqfs"))
        .args(["-noappend", "-quiet", "-no-progress"])
        .output()
        .unwrap();
    assert!(out.status.success(), "mksquashfs: {out:?}");
    // Each step prints `name=value` lines for the assertions below.
    let script = r#"
        here=$(pwd)
        fstype() { grep " $here/$1 " /proc/self/mountinfo | sed 's/.* - \([^ ]*\) .*/\1/'; }
        mkdir bg fg kernel
        "$SQUASHD" mount -o allow_other ok.sqfs bg 2>bg.err; echo "bg.rc=$?"
        echo "bg.type=$(fstype bg)"; echo "bg.a=$(cat bg/a)"
        umount bg
        "$SQUASHD" mount -f -o allow_other ok.sqfs fg 2>fg.err & pid=$!
        for i in $(seq 300); do [ -n "$(fstype fg)" ] && break; sleep 0.1; done
        echo "fg.type=$(fstype fg)"; echo "fg.a=$(cat fg/a)"
        umount fg; wait $pid; echo "fg.rc=$?"
        "$SQUASHD" mount -o allow_other,kernel ok.sqfs kernel 2>kernel.err; echo "kernel.rc=$?"
        echo "kernel.type=$(fstype kernel)"
    "#;
    let Some(out) = in_user_namespace(dir.path(), script) else {
        return;
    };
    let said = String::from_utf8_lossy(&out.stdout);
    let context = format!("{said}\n{}", stderr(&out));
    for line in [
        "bg.rc=0",
        "bg.type=fuse.squashd",
        "bg.a=hello",
        "fg.type=fuse.squashd",
        "fg.a=hello",
        "fg.rc=0",
        "kernel.rc=1",
        "kernel.type=",
    ] {
        assert!(said.lines().any(|l| l == line), "{line} missing: {context}");
    }
    for mode in ["bg", "fg"] {
        let log = fs::read_to_string(dir.path().join(format!("{mode}.err"))).unwrap();
        let fell_back: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("FUSE, not the kernel path"))
            .collect();
        assert_eq!(fell_back.len(), 1, "{mode}: {log}");
        assert!(fell_back[0].contains("cannot mount EROFS"), "{mode}: {log}");
    }
    let log = fs::read_to_string(dir.path().join("kernel.err")).unwrap();
    assert!(log.contains("cannot mount EROFS"), "{log}");
    assert!(!log.contains("FUSE, not the kernel path"), "{log}");
}
