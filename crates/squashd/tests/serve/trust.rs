//! The trust boundary of the control socket: who may connect, and what a user named in
//! allow_uids may attach and detach.

use super::*;

fn socket_mode(socket: &Path) -> u32 {
    fs::metadata(socket).unwrap().permissions().mode() & 0o7777
}

#[test]
fn control_socket_is_root_only_unless_allowed() {
    if !testkit::can_mount() {
        return;
    }
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 2);
    let closed = Daemon::ready(
        scratch.path(),
        "closed",
        &image_entry(&images[0].1, &images[0].2, ""),
    );
    assert_eq!(socket_mode(&closed.socket), 0o600);
    let root = squashd_as(0, &closed.socket, &["status", "--json"]);
    assert!(root.status.success(), "{root:?}");
    let listed: Value = serde_json::from_slice(&root.stdout).unwrap();
    assert_eq!(listed["images"].as_array().unwrap().len(), 1);
    let nobody = squashd_as(65534, &closed.socket, &["status"]);
    assert!(!nobody.status.success());
    let err = String::from_utf8_lossy(&nobody.stderr);
    assert!(err.contains("ermission denied"), "{err}");
    let img = images[1].1.to_str().unwrap();
    let mnt = images[1].2.to_str().unwrap();
    let attach = squashd_as(65534, &closed.socket, &["attach", img, mnt]);
    assert!(!attach.status.success());
    assert_eq!(mount_id(&images[1].2), None);
    closed.terminate();

    // allow_uids: the socket opens to all (0666) and the peer check decides.
    let open = Daemon::ready(
        scratch.path(),
        "open",
        &format!(
            "allow_uids = [65534]\n{}",
            image_entry(&images[0].1, &images[0].2, "")
        ),
    );
    assert_eq!(socket_mode(&open.socket), 0o666);
    let allowed = squashd_as(65534, &open.socket, &["status", "--json"]);
    assert!(allowed.status.success(), "{allowed:?}");
    // A user is shown only the images they attached: none yet.
    let listed: Value = serde_json::from_slice(&allowed.stdout).unwrap();
    assert_eq!(listed["images"].as_array().unwrap().len(), 0);
    // A user attaches onto a directory of their own (the boundary itself is tested in
    // users_get_what_fusermount_would_give_them_and_no_more).
    chown(&images[1].2, 65534);
    let allowed = squashd_as(65534, &open.socket, &["attach", img, mnt]);
    assert!(allowed.status.success(), "{allowed:?}");
    assert!(mount_id(&images[1].2).is_some());
    let other = squashd_as(65533, &open.socket, &["detach", mnt]);
    assert!(!other.status.success());
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(err.contains("permission denied: uid 65533"), "{err}");
    assert!(
        mount_id(&images[1].2).is_some(),
        "a refused detach detached"
    );
    open.terminate();
    // A signal-terminated client would show here rather than as a refusal.
    assert!(other.status.signal().is_none());
}

/// The trust boundary of the control socket (README, "Who may do what"): a user named in
/// allow_uids attaches only images they can read themselves, only onto directories they own,
/// always nosuid,nodev, without the options that reach beyond their mount, and detaches only
/// what they attached; every refusal names its reason and changes nothing. Root may do
/// anything.
#[test]
fn users_get_what_fusermount_would_give_them_and_no_more() {
    if !testkit::can_mount() {
        return;
    }
    if !testkit::have_tool("python3") {
        eprintln!("SKIPPED: python3 is needed to send a hand-made request");
        return;
    }
    const USER: u32 = 65534;
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 3);
    let (src0, img0, root_mnt) = &images[0];
    let (src1, img1, _) = &images[1];
    let private = scratch.path().join("img/private.sqfs");
    fs::copy(img1, &private).unwrap();
    fs::set_permissions(&private, fs::Permissions::from_mode(0o600)).unwrap();
    let own = scratch.path().join("mnt/own");
    let roots = scratch.path().join("mnt/roots");
    fs::create_dir_all(&own).unwrap();
    fs::create_dir_all(&roots).unwrap();
    chown(&own, USER);
    let sneaky = scratch.path().join("mnt/sneaky");
    std::os::unix::fs::symlink(&roots, &sneaky).unwrap();
    let daemon = Daemon::ready(
        scratch.path(),
        "boundary",
        &format!("allow_uids = [{USER}]\n{}", image_entry(img0, root_mnt, "")),
    );
    let sock = daemon.socket.clone();
    let count = |d: &Daemon| d.status()["images"].as_array().unwrap().len();
    let refused = |args: &[&str], why: &str, unchanged: &Path| {
        let out = squashd_as(USER, &sock, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{args:?} was not refused: {out:?}"
        );
        assert!(err.contains(why), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: not one line: {err}");
        assert_eq!(mount_id(unchanged), None, "{args:?} mounted something");
    };
    let s = |p: &Path| p.to_str().unwrap().to_string();

    // An image the user cannot read: the client cannot open it, and a hand-made request that
    // names the path without passing the file is refused by the daemon.
    refused(
        &["attach", &s(&private), &s(&own)],
        "Permission denied",
        &own,
    );
    let answer = raw_request_as(
        USER,
        &sock,
        &json!({"op": "attach", "image": private, "mountpoint": own, "options": []}),
    );
    assert_eq!(answer["result"], "error", "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("must pass the image as an open file"),
        "{answer}"
    );
    assert_eq!(mount_id(&own), None);
    // A remote image: the daemon would fetch it with its own network access and credentials.
    refused(
        &["attach", "http://127.0.0.1:9/image.sqfs", &s(&own)],
        "may not attach a remote image",
        &own,
    );
    // Directories that are not the user's, directly or through a symlink of theirs.
    refused(
        &["attach", &s(img1), &s(&roots)],
        "belongs to uid 0",
        &roots,
    );
    refused(
        &["attach", &s(img1), &s(&sneaky)],
        "belongs to uid 0",
        &roots,
    );
    // Options that reach beyond the user's own mount.
    for option in [
        "suid",
        "dev",
        "data_cache=1GiB",
        "threads=64",
        "control=/tmp/x",
    ] {
        let key = option.split('=').next().unwrap();
        refused(
            &["attach", &s(img1), &s(&own), "-o", option],
            &format!("may not use the option \"{key}\""),
            &own,
        );
    }
    let user_allow_other = fs::read_to_string("/etc/fuse.conf")
        .is_ok_and(|t| t.lines().any(|l| l.trim() == "user_allow_other"));
    if !user_allow_other {
        refused(
            &["attach", &s(img1), &s(&own), "-o", "allow_other"],
            "user_allow_other",
            &own,
        );
    }
    // Someone else's mount.
    refused(&["detach", &s(root_mnt)], "did not attach", &own);
    assert!(mount_id(root_mnt).is_some(), "a refused detach detached");
    assert_eq!(count(&daemon), 1, "a refused request changed the daemon");

    // What is allowed works, and is always nosuid,nodev.
    let out = squashd_as(
        USER,
        &sock,
        &["attach", &s(img1), &s(&own), "-o", "noatime"],
    );
    assert!(out.status.success(), "{out:?}");
    let options = mount_options(&own).expect("not mounted");
    for flag in ["nosuid", "nodev", "ro"] {
        assert!(
            options.split(',').any(|o| o == flag),
            "{flag} missing: {options}"
        );
    }
    // As the user: their mount is theirs to read (and root's comparison would be refused).
    access::assert_same_tree_as(USER, src1, &own);
    let entry = daemon.image_status(&own);
    assert_eq!(
        Path::new(entry["image"].as_str().unwrap()),
        img1.as_path(),
        "{entry}"
    );
    // Root may do anything, including detaching the user's mount and mounting anywhere.
    let out = squashd_as(
        0,
        &sock,
        &["attach", &s(img0), &s(&roots), "-o", "suid,dev"],
    );
    assert!(out.status.success(), "{out:?}");
    assert_same_tree(src0, &roots);
    let out = squashd_as(USER, &sock, &["detach", &s(&roots)]);
    assert!(
        !out.status.success() && mount_id(&roots).is_some(),
        "{out:?}"
    );
    let out = squashd_as(USER, &sock, &["detach", &s(&own)]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(mount_id(&own), None);
    let out = squashd_as(0, &sock, &["detach", &s(&roots)]);
    assert!(out.status.success(), "{out:?}");
    daemon.terminate();

    // The config narrows further: mount points under a prefix, and a cap on each user.
    let allowed = scratch.path().join("mnt/allowed");
    let (a, b) = (allowed.join("a"), allowed.join("b"));
    for d in [&allowed, &a, &b] {
        fs::create_dir_all(d).unwrap();
        chown(d, USER);
    }
    let narrow = Daemon::ready(
        scratch.path(),
        "narrow",
        &format!(
            "allow_uids = [{USER}]\nallow_mount_prefixes = [{:?}]\nmax_images_per_user = 1\n",
            s(&allowed)
        ),
    );
    let sock = narrow.socket.clone();
    let out = squashd_as(USER, &sock, &["attach", &s(img1), &s(&own)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("allow_mount_prefixes"),
        "{err}"
    );
    assert_eq!(mount_id(&own), None);
    let out = squashd_as(USER, &sock, &["attach", &s(img1), &s(&a)]);
    assert!(out.status.success(), "{out:?}");
    let out = squashd_as(USER, &sock, &["attach", &s(img1), &s(&b)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("max_images_per_user"),
        "{err}"
    );
    assert_eq!(mount_id(&b), None);
    narrow.terminate();
}
