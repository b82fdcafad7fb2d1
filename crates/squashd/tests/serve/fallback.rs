//! The mount funnel's fallback rule on the daemon's attach (its config and the control
//! socket), as on a lone mount (tests/mount/fallback.rs): when squashd chose the kernel path
//! and it fails, the image is attached through FUSE with one line saying why; with `kernel` in
//! its options the attach fails. The same two real failures: an image the translation refuses
//! (a 5000-byte symlink target), and an EROFS mount the kernel refuses (in a user namespace).

use super::*;

#[path = "../support/fallback.rs"]
mod lone;

fn count_lines(log: &str, needle: &str) -> usize {
    log.lines().filter(|l| l.contains(needle)).count()
}

#[test]
fn an_image_the_translation_refuses_is_attached_through_fuse_unless_kernel_was_asked_for() {
    if !lone::kernel_path_possible() {
        return;
    }
    let scratch = Scratch::new();
    let image = lone::untranslatable_image(scratch.path());
    let [auto, kernel, attached, attached_kernel] =
        ["auto", "kernel", "attached", "attached-kernel"].map(|n| scratch.path().join(n));
    for dir in [&auto, &kernel, &attached, &attached_kernel] {
        fs::create_dir(dir).unwrap();
    }
    let config = image_entry(&image, &auto, "allow_other")
        + &image_entry(&image, &kernel, "allow_other,kernel");
    let daemon = Daemon::ready(scratch.path(), "fallback", &config);
    assert_eq!(mount_type(&auto).as_deref(), Some("fuse.squashd"));
    assert_eq!(fs::read_to_string(auto.join("a")).unwrap(), "hello\n");
    assert_eq!(daemon.image_status(&auto)["engine"], "fuse");
    assert_eq!(mount_type(&kernel), None, "attached with kernel");
    let log = daemon.stderr();
    assert_eq!(count_lines(&log, "FUSE, not the kernel path"), 1, "{log}");
    assert_eq!(count_lines(&log, "cannot translate"), 2, "{log}");

    let request = |mnt: &Path, options: &[&str]| {
        daemon.request(
            json!({"op": "attach", "image": &image, "mountpoint": mnt, "options": options}),
        )
    };
    let answer = request(&attached, &["allow_other"]);
    assert_eq!(answer["result"], "ok", "{answer}");
    assert_eq!(mount_type(&attached).as_deref(), Some("fuse.squashd"));
    assert_eq!(fs::read_to_string(attached.join("a")).unwrap(), "hello\n");
    let answer = request(&attached_kernel, &["allow_other", "kernel"]);
    assert_eq!(answer["result"], "error", "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("cannot translate"),
        "{answer}"
    );
    assert_eq!(mount_type(&attached_kernel), None);
    let log = daemon.stderr();
    assert_eq!(count_lines(&log, "FUSE, not the kernel path"), 2, "{log}");
    daemon.terminate();
}

#[test]
fn an_erofs_mount_the_kernel_refuses_is_attached_through_fuse() {
    if !lone::kernel_path_possible() {
        return;
    }
    let scratch = Scratch::new();
    let src = scratch.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("a"), "hello\n").unwrap();
    let image = scratch.path().join("ok.sqfs");
    let out = Command::new("mksquashfs")
        .arg(&src)
        .arg(&image)
        .args(["-noappend", "-quiet", "-no-progress"])
        .output()
        .unwrap();
    assert!(out.status.success(), "mksquashfs: {out:?}");
    for dir in ["config", "config-kernel", "attached", "attached-kernel"] {
        fs::create_dir(scratch.path().join(dir)).unwrap();
    }
    let here = scratch.path();
    let config = format!("socket = {:?}\n", here.join("d.sock").display().to_string())
        + &image_entry(&image, &here.join("config"), "allow_other")
        + &image_entry(&image, &here.join("config-kernel"), "allow_other,kernel");
    fs::write(here.join("d.toml"), config).unwrap();
    // Each step prints `name=value` lines for the assertions below.
    let script = r#"
        here=$(pwd)
        fstype() { grep " $here/$1 " /proc/self/mountinfo | sed 's/.* - \([^ ]*\) .*/\1/'; }
        "$SQUASHD" serve -c d.toml 2>d.err & pid=$!
        for i in $(seq 300); do grep -q "images attached" d.err && break; sleep 0.1; done
        echo "config.type=$(fstype config)"; echo "config.a=$(cat config/a)"
        echo "config-kernel.type=$(fstype config-kernel)"
        "$SQUASHD" attach --socket d.sock ok.sqfs attached -o allow_other; echo "attached.rc=$?"
        echo "attached.type=$(fstype attached)"; echo "attached.a=$(cat attached/a)"
        "$SQUASHD" attach --socket d.sock ok.sqfs attached-kernel -o allow_other,kernel
        echo "attached-kernel.rc=$?"
        echo "attached-kernel.type=$(fstype attached-kernel)"
        "$SQUASHD" status --socket d.sock --json > status.json
        kill -TERM $pid; wait $pid; echo "serve.rc=$?"
    "#;
    let Some(out) = lone::in_user_namespace(here, script) else {
        return;
    };
    let said = String::from_utf8_lossy(&out.stdout);
    let log = fs::read_to_string(here.join("d.err")).unwrap_or_default();
    let context = format!("{said}\n{}\n{log}", String::from_utf8_lossy(&out.stderr));
    for line in [
        "config.type=fuse.squashd",
        "config.a=hello",
        "config-kernel.type=",
        "attached.rc=0",
        "attached.type=fuse.squashd",
        "attached.a=hello",
        "attached-kernel.rc=1",
        "attached-kernel.type=",
        "serve.rc=0",
    ] {
        assert!(said.lines().any(|l| l == line), "{line} missing: {context}");
    }
    let fell_back: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("FUSE, not the kernel path"))
        .collect();
    assert_eq!(fell_back.len(), 2, "{context}");
    assert!(
        fell_back.iter().all(|l| l.contains("cannot mount EROFS")),
        "{context}"
    );
    // The kernel-path attaches failed with the kernel's reason.
    assert_eq!(count_lines(&log, "cannot mount EROFS"), 4, "{context}");
    let status: Value =
        serde_json::from_str(&fs::read_to_string(here.join("status.json")).unwrap()).unwrap();
    let engines: Vec<&str> = status["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["engine"].as_str().unwrap())
        .collect();
    assert_eq!(engines, ["fuse", "fuse"], "{status}");
}
