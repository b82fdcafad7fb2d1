//! Names from users and images in the daemon's log and in the `status` table (README, "Who may
//! do what": quoting): a mount point or image whose name holds a newline or a terminal escape
//! sequence is shown escaped, so it cannot forge a log line or drive the reader's terminal;
//! `status --json` keeps the exact name.

use super::*;

/// A name that tries both: a newline followed by a forged log line, and a colour escape.
const FORGED: &str = "m\nsquashd serve: detached everything\x1b[31mred";

/// Panics if `text` (named `what`) has a raw ESC byte or a line forged by [`FORGED`].
fn assert_no_forgery(text: &str, what: &str) {
    assert!(!text.contains('\x1b'), "a raw ESC in {what}: {text:?}");
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("squashd serve: detached everything")),
        "a forged line in {what}: {text:?}"
    );
}

#[test]
fn names_with_newlines_and_escapes_are_quoted_in_the_log_and_status() {
    if !testkit::can_mount() {
        return;
    }
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 1);
    let mnt = scratch.path().join(FORGED);
    fs::create_dir(&mnt).unwrap();
    let img = scratch.path().join("img\x1b]0;title\x07.sqfs");
    fs::copy(&images[0].1, &img).unwrap();
    let daemon = Daemon::ready(scratch.path(), "quoting", "");
    let attached = daemon.attach(&img, &mnt);
    assert_eq!(attached["result"], "ok", "{attached}");
    assert_same_tree(&images[0].0, &mnt);

    // The JSON report is exact: serde escapes what JSON must.
    let json = squashd_as(0, &daemon.socket, &["status", "--json"]);
    assert!(json.status.success(), "{json:?}");
    let report: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["images"][0]["mountpoint"], mnt.to_str().unwrap());
    assert_eq!(report["images"][0]["image"], img.to_str().unwrap());

    // The table shows both names escaped, each on the one line of its image.
    let table = squashd_as(0, &daemon.socket, &["status"]);
    assert!(table.status.success(), "{table:?}");
    let table = String::from_utf8(table.stdout).unwrap();
    assert_no_forgery(&table, "the status table");
    let row = table
        .lines()
        .find(|l| l.contains("detached everything"))
        .unwrap_or_else(|| panic!("no row for the image: {table}"));
    assert!(
        row.contains(r"m\nsquashd serve: detached everything\u{1b}[31mred")
            && row.contains(r"img\u{1b}]0;title\u{7}.sqfs"),
        "{row}"
    );

    let detached = daemon.detach(&mnt);
    assert_eq!(detached["result"], "ok", "{detached}");
    // The answers to attach and detach are printed by the client on a terminal too.
    assert_no_forgery(attached["message"].as_str().unwrap(), "the attach answer");
    assert_no_forgery(detached["message"].as_str().unwrap(), "the detach answer");
    let log = daemon.stderr();
    assert_no_forgery(&log, "the log");
    assert!(
        log.lines().any(|l| l.starts_with("squashd serve: attached")
            && l.contains(r"\nsquashd serve: detached everything\u{1b}[31mred")),
        "{log}"
    );
    daemon.terminate();
}
