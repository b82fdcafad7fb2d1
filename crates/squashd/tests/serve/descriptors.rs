//! The daemon's descriptor table, grown once before its threads start to what its configured
//! images will hold: growing it later, while threads share it, stalls every thread that opens
//! a file for an RCU grace period per doubling (bench/results/2026-11-27-verity-s7.md).

use super::*;

/// The size of `pid`'s descriptor table (`FDSize` in /proc/PID/status).
fn descriptor_table_size(pid: i32) -> usize {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("FDSize:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no FDSize in /proc/{pid}/status:\n{status}"))
}

/// 40 entries whose image is not SquashFS: their attaches fail at once, with no mount, but the
/// table is sized for them before (64, and 6 for each: 304, a table of 512; a daemon that
/// does not reserve holds a table of 256 here, grown by its own few descriptors).
#[test]
fn the_descriptor_table_is_sized_for_the_configured_images_before_threads_start() {
    let scratch = Scratch::new();
    let image = scratch.path().join("not-squashfs.img");
    fs::write(&image, vec![0x5a; 8192]).unwrap();
    let config: String = (0..40)
        .map(|i| image_entry(&image, &scratch.path().join(format!("mnt/{i}")), ""))
        .collect();
    let mut daemon = Daemon::start(scratch.path(), "descriptors", &config);
    daemon.wait_ready(Duration::from_secs(30));
    assert!(
        daemon.stderr().contains("0 of 40 images attached"),
        "{}",
        daemon.stderr()
    );
    let size = descriptor_table_size(daemon.pid());
    assert!(size >= 64 + 40 * 6, "a descriptor table of {size}");
    daemon.terminate();
}
