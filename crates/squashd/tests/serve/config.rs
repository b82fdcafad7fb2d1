//! What the config file and SIGHUP bring: SIF partitions from the config and by attach, and
//! a reload that attaches and detaches the difference.

use super::*;

/// A SIF file (written by testkit::sif) holding two images: a config entry serves its primary
/// system partition, an attach with `partition=2` the other.
#[test]
fn sif_partitions_are_served_from_the_config_and_by_attach() {
    use testkit::sif::{self, Object};
    if !testkit::can_mount() {
        return;
    }
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 2);
    let [a, b] = [&images[0], &images[1]];
    let partition = |name: &str, kind: i32, image: &Path| {
        Object::partition(name, sif::FS_SQUASHFS, kind, fs::read(image).unwrap())
    };
    let file = scratch.path().join("two.sif");
    let built = sif::build(&[
        partition("a", sif::PART_PRIMSYS, &a.1),
        partition("b", sif::PART_DATA, &b.1),
    ]);
    fs::write(&file, built.bytes).unwrap();
    let daemon = Daemon::ready(scratch.path(), "sif", &image_entry(&file, &a.2, ""));
    assert_same_tree(&a.0, &a.2);
    let attached = daemon.request(
        json!({"op": "attach", "image": file, "mountpoint": b.2, "options": ["partition=2"]}),
    );
    assert_eq!(attached["result"], "ok", "{attached}");
    assert_same_tree(&b.0, &b.2);
    daemon.terminate();
}

#[test]
fn sighup_reload_attaches_and_detaches_the_difference() {
    if !testkit::can_mount() {
        return;
    }
    let scratch = Scratch::new();
    let images = build_images(scratch.path(), 4);
    let [a, b, c, d] = [&images[0], &images[1], &images[2], &images[3]];
    let config = image_entry(&a.1, &a.2, "") + &image_entry(&b.1, &b.2, "");
    let mut daemon = Daemon::ready(scratch.path(), "reload", &config);
    let b_id = mount_id(&b.2).expect("B mounted");
    let b_data = fs::read(b.0.join("d/data.bin")).unwrap();
    let b_file = fs::File::open(b.2.join("d/data.bin")).unwrap();
    let mut head = vec![0; 1000];
    b_file.read_exact_at(&mut head, 0).unwrap();
    assert_eq!(head, b_data[..1000]);
    // D is attached at run time: the config does not know it, and a reload leaves it.
    assert_eq!(daemon.attach(&d.1, &d.2)["result"], "ok");

    let config = image_entry(&b.1, &b.2, "") + &image_entry(&c.1, &c.2, "");
    fs::write(
        daemon.config_path(),
        format!(
            "socket = {:?}\n{config}",
            daemon.socket.display().to_string()
        ),
    )
    .unwrap();
    daemon.signal(libc::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(20);
    while mount_id(&a.2).is_some() || mount_id(&c.2).is_none() {
        assert!(
            Instant::now() < deadline,
            "reload did not converge:\n{}",
            daemon.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_same_tree(&c.0, &c.2);
    assert_eq!(mount_id(&b.2), Some(b_id), "B was remounted");
    // The descriptor opened before the reload reads the rest of B through the same mount.
    let mut rest = vec![0; b_data.len() - 1000];
    b_file.read_exact_at(&mut rest, 1000).unwrap();
    assert_eq!(rest, b_data[1000..]);
    assert!(mount_id(&d.2).is_some(), "the run-time attach was dropped");
    let status = daemon.status();
    let mut listed: Vec<&str> = status["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["mountpoint"].as_str().unwrap())
        .collect();
    listed.sort();
    let mut want: Vec<String> = [b, c, d]
        .iter()
        .map(|x| x.2.display().to_string())
        .collect();
    want.sort();
    assert_eq!(listed, want);
    assert!(daemon.is_running());
    // SIGTERM with a file still open on B: the busy mount is detached too.
    daemon.terminate();
    drop(b_file);
}
