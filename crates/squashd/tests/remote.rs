//! Remote images: the real binary reading images from a real nginx (Range, ETag), from an
//! in-process server that injects faults, and from a real S3-compatible server (s3s-fs) with
//! credentials; results compared with unsquashfs and the kernel's squashfs mount of a local
//! copy. Servers listen on 127.0.0.1 only and stop when the test ends. Tests that need a server,
//! root or /dev/fuse print why they skip.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use testkit::http::{FaultServer, Nginx};
use testkit::{Built, TreeOptions};

const SQUASHD: &str = env!("CARGO_BIN_EXE_squashd");

fn squashd(args: &[&str]) -> Output {
    Command::new(SQUASHD)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn is_mounted(mnt: &Path) -> bool {
    let needle = format!(" {} ", mnt.display());
    fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.contains(&needle))
}

/// A `squashd serve` of the test's: stopped (SIGTERM, which detaches its images) and waited for
/// when dropped, even when the test fails on the way.
struct Daemon(std::process::Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

/// Unmounts lazily on drop whatever is still mounted at its path.
struct MountGuard(PathBuf);

impl Drop for MountGuard {
    fn drop(&mut self) {
        if is_mounted(&self.0) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// A small image with one multi-block file (`big`, 12 MiB of noise that does not compress) and
/// a few small ones, compressed with gzip in 128 KiB blocks: its data spans several fetch units.
fn data_image(dir: &Path) -> (PathBuf, Vec<u8>) {
    let src = dir.join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    let mut rng = fastrand::Rng::with_seed(7);
    // Larger than the 8 MiB tail an open fetches beside the first unit (without a disk
    // cache): most of big is still fetched when it is read.
    let big: Vec<u8> = (0..12 << 20).map(|_| rng.u8(..)).collect();
    fs::write(src.join("big"), &big).unwrap();
    for i in 0..20 {
        fs::write(
            src.join("d").join(format!("f{i}")),
            format!("file {i}\n").repeat(i + 1),
        )
        .unwrap();
    }
    let image = dir.join("data.sqfs");
    testkit::mksquashfs(&src, &image, &["-comp", "gzip", "-noappend"]);
    (image, big)
}

/// The fixture tree's zstd image, served by nginx: the tree, the image, the server and the
/// image's URL; None (the skip printed) when nginx cannot serve.
fn fixture_over_http() -> Option<(Built, PathBuf, Nginx, String)> {
    let built = Built::new(&TreeOptions::default());
    let image = built.image("zstd", &["-comp", "zstd"]);
    let nginx = match Nginx::serve(image.parent().unwrap()) {
        Ok(n) => n,
        Err(why) => {
            testkit::skip(&format!("nginx cannot serve: {why}"));
            return None;
        }
    };
    let url = nginx.url("zstd.sqfs");
    Some((built, image, nginx, url))
}

/// [`data_image`] in a fresh directory, served by a [`FaultServer`] with no fault planned: the
/// directory, the image, its big file's bytes and the server.
fn served_data_image() -> (tempfile::TempDir, PathBuf, Vec<u8>, FaultServer) {
    let dir = tempfile::tempdir().unwrap();
    let (image, big) = data_image(dir.path());
    let server = FaultServer::start("/data.sqfs", fs::read(&image).unwrap());
    (dir, image, big, server)
}

#[test]
fn offline_tools_over_http_match_unsquashfs() {
    if !testkit::have_squashfs_tools() {
        return;
    }
    let Some((built, image, _nginx, url)) = fixture_over_http() else {
        return;
    };
    let reference = built.extract(&image);
    let dest = built.scratch("extract-over-http");
    let out = squashd(&["extract", &url, "-d", dest.to_str().unwrap()]);
    assert!(out.status.success(), "extract over HTTP: {}", stderr(&out));
    testkit::assert_records_eq(
        &testkit::walk_disk(&reference),
        &testkit::walk_disk(&dest),
        "squashd extract over HTTP against unsquashfs -d",
    );
    let out = squashd(&["info", &url]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&url));
}

#[test]
fn a_mount_over_http_matches_the_kernels_squashfs_of_a_local_copy() {
    if !testkit::can_mount() {
        return;
    }
    let Some((built, image, nginx, url)) = fixture_over_http() else {
        return;
    };
    let (reference, kernel) = built.reference(&image, "zstd");
    let expected = testkit::walk_disk(&reference);
    let mut engines = vec!["fuse"];
    if testkit::can_mount_erofs() {
        engines.push("kernel");
    } else {
        testkit::skip("the kernel path over HTTP: this kernel cannot mount EROFS from files");
    }
    for engine in engines {
        let mnt = built.scratch(&format!("mnt-http-{engine}"));
        fs::create_dir_all(&mnt).unwrap();
        let socket = built.scratch(&format!("{engine}.sock"));
        let opts = format!("{engine},allow_other,control={}", socket.display());
        let out = squashd(&["mount", &url, mnt.to_str().unwrap(), "-o", &opts]);
        assert!(out.status.success(), "mount over HTTP: {}", stderr(&out));
        let _guard = MountGuard(mnt.clone());
        testkit::assert_records_eq(
            &expected,
            &testkit::walk_disk(&mnt),
            &format!("{engine} mount over HTTP against the kernel's squashfs"),
        );
        let out = squashd(&["status", "--socket", socket.to_str().unwrap(), "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let remote = &status["images"][0]["remote"];
        // The open: the first unit and the tail at once (the tail holds all of this image).
        assert!(remote["requests"].as_u64().unwrap() >= 2, "{status}");
        assert!(remote["bytes_fetched"].as_u64().unwrap() > 0, "{status}");
        assert_eq!(status["images"][0]["image"], url.as_str());
        let log = nginx.access_log();
        assert!(
            !log.lines().any(|l| l.contains("\"HEAD ")),
            "the size and ETag come with the first ranged GET, not from a HEAD:\n{log}"
        );
        testkit::umount(&mnt);
    }
    if let Some(k) = kernel {
        testkit::detach(&k);
    }
}

/// `squashd cat URL /big` with the server's fault plan as `arrange` leaves it: the output, and
/// whether it succeeded.
fn cat_big(server: &FaultServer) -> Output {
    squashd(&["cat", &server.url(), "/big"])
}

#[test]
fn faults_give_retries_or_a_clear_error_never_wrong_bytes() {
    if !testkit::have_squashfs_tools() {
        return;
    }
    let (_dir, _image, big, server) = served_data_image();

    let out = cat_big(&server);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout == big, "plain read");

    // A connection reset mid-body, and a body cut short by a clean close: tried again.
    server.cut_after(1000, 2);
    let out = cat_big(&server);
    assert!(out.status.success(), "after cuts: {}", stderr(&out));
    assert!(out.stdout == big, "after cuts");
    assert_eq!(server.stats().cuts, 2);
    server.clear_faults();
    server.truncate_after(5000, 2);
    let out = cat_big(&server);
    assert!(out.status.success(), "after truncations: {}", stderr(&out));
    assert!(out.stdout == big, "after truncations");
    server.clear_faults();

    // A burst of 503s: tried again; more than the retries allow: a one-line error naming the
    // image and the status, and no byte that is not the file's.
    server.fail_next(3, 503);
    let out = cat_big(&server);
    assert!(out.status.success(), "after 3 x 503: {}", stderr(&out));
    assert!(out.stdout == big);
    server.fail_next(1000, 503);
    let out = cat_big(&server);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains(&server.url()) && err.contains("503"), "{err}");
    assert!(big.starts_with(&out.stdout), "only the file's own bytes");
    server.clear_faults();

    // A slow server (a delay under the time-outs) is waited for.
    server.set_delay(Duration::from_millis(300));
    let out = cat_big(&server);
    assert!(out.status.success(), "slow server: {}", stderr(&out));
    assert!(out.stdout == big);
    server.set_delay(Duration::ZERO);

    // A server that ignores Range is refused with a clear error.
    server.ignore_range(true);
    let out = cat_big(&server);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("ignores HTTP range requests"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn an_object_replaced_under_a_daemon_gives_eio_and_its_other_images_keep_serving() {
    if !testkit::can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (image, big) = data_image(dir.path());
    let bytes = fs::read(&image).unwrap();
    let server = FaultServer::start("/data.sqfs", bytes.clone());
    let steady = FaultServer::start("/data.sqfs", bytes.clone());
    let (changing_mnt, steady_mnt) = (dir.path().join("changing"), dir.path().join("steady"));
    fs::create_dir_all(&changing_mnt).unwrap();
    fs::create_dir_all(&steady_mnt).unwrap();
    let _guards = (
        MountGuard(changing_mnt.clone()),
        MountGuard(steady_mnt.clone()),
    );
    let socket = dir.path().join("serve.sock");
    let config = dir.path().join("serve.toml");
    fs::write(
        &config,
        format!(
            "socket = {socket:?}\n\
             [[image]]\npath = {:?}\nmountpoint = {changing_mnt:?}\noptions = \"fuse\"\n\
             [[image]]\npath = {:?}\nmountpoint = {steady_mnt:?}\noptions = \"fuse\"\n",
            server.url(),
            steady.url()
        ),
    )
    .unwrap();
    let mut daemon = Daemon(
        Command::new(SQUASHD)
            .args(["serve", "-c"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(is_mounted(&changing_mnt) && is_mounted(&steady_mnt)) {
        assert!(Instant::now() < deadline, "the daemon did not mount both");
        assert!(daemon.0.try_wait().unwrap().is_none(), "the daemon exited");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Only the first fetch unit and the image's last 8 MiB (its metadata and the end of big)
    // have been fetched: a listing needs nothing more. The rest of big is fetched after the
    // object changes.
    assert_eq!(fs::read_dir(changing_mnt.join("d")).unwrap().count(), 20);
    let mut changed = bytes.clone();
    let last = changed.len() - 1;
    changed[last] ^= 1;
    server.replace(changed);
    let read = fs::read(changing_mnt.join("big"));
    let errno = read.as_ref().err().and_then(|e| e.raw_os_error());
    assert_eq!(
        errno,
        Some(libc::EIO),
        "a read after the change: {:?}",
        read.as_ref().map(|bytes| bytes.len())
    );
    assert!(
        fs::read(steady_mnt.join("big")).unwrap() == big,
        "the other image"
    );
    let out = squashd(&["status", "--socket", socket.to_str().unwrap(), "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let changing = status["images"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["mountpoint"] == changing_mnt.to_str().unwrap())
        .unwrap();
    let health = changing["health"].as_str().unwrap();
    assert!(health.contains("changed since it was opened"), "{health}");
    let steady_status = status["images"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["mountpoint"] == steady_mnt.to_str().unwrap())
        .unwrap();
    assert_eq!(steady_status["health"], "ok");
}

#[test]
fn s3_images_are_read_with_the_environments_credentials() {
    if !testkit::have_squashfs_tools() {
        return;
    }
    let s3 = match testkit::s3::S3Server::start() {
        Ok(s) => s,
        Err(why) => return testkit::skip(&format!("no S3 server: {why}")),
    };
    let dir = tempfile::tempdir().unwrap();
    let (image, big) = data_image(dir.path());
    s3.put_file("images", "dir/data.sqfs", &image).unwrap();
    let run = |secret: &str| {
        Command::new(SQUASHD)
            .args(["cat", "s3://images/dir/data.sqfs", "/big"])
            .env("AWS_ACCESS_KEY_ID", s3.access_key())
            .env("AWS_SECRET_ACCESS_KEY", secret)
            .env("AWS_REGION", s3.region())
            .env("AWS_ENDPOINT_URL", s3.endpoint())
            .env("HOME", dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(s3.secret_key());
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout == big);
    let out = run("not-the-secret");
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("s3://images/dir/data.sqfs") && err.contains("403"),
        "{err}"
    );
    assert!(
        !err.contains("not-the-secret"),
        "the secret is never shown: {err}"
    );

    // The same from the shared credentials file, as AWS's tools read it.
    let aws = dir.path().join(".aws");
    fs::create_dir_all(&aws).unwrap();
    fs::write(
        aws.join("credentials"),
        format!(
            "[default]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
            s3.access_key(),
            s3.secret_key()
        ),
    )
    .unwrap();
    fs::write(
        aws.join("config"),
        format!(
            "[default]\nregion = {}\nendpoint_url = {}\n",
            s3.region(),
            s3.endpoint()
        ),
    )
    .unwrap();
    let out = Command::new(SQUASHD)
        .args(["cat", "s3://images/dir/data.sqfs", "/big"])
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_ENDPOINT_URL")
        .env("HOME", dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "from ~/.aws: {}", stderr(&out));
    assert!(out.stdout == big);
}

#[test]
fn a_trace_of_one_mount_prefetches_the_next() {
    if !testkit::can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (image, big) = data_image(dir.path());
    let image_len = fs::metadata(&image).unwrap().len();
    let server = FaultServer::start("/data.sqfs", fs::read(&image).unwrap());
    let mnt = dir.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let _guard = MountGuard(mnt.clone());
    let trace = dir.path().join("trace");
    let socket = dir.path().join("mount.sock");
    let mount = |opts: &str| {
        let out = squashd(&["mount", &server.url(), mnt.to_str().unwrap(), "-o", opts]);
        assert!(out.status.success(), "mount -o {opts}: {}", stderr(&out));
    };
    let unmount = |wait_for_trace: bool| {
        testkit::umount(&mnt);
        let deadline = Instant::now() + Duration::from_secs(10);
        while (wait_for_trace && fs::metadata(&trace).is_err()) || socket.exists() {
            assert!(Instant::now() < deadline, "the mount did not end");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    // 64 KiB fetch units: big spans many, and read-ahead of a sequential reader is off for
    // lack of one (the file is read through the page cache in one go by fs::read).
    mount(&format!("fuse,fetch_unit=64KiB,trace={}", trace.display()));
    assert!(fs::read(mnt.join("big")).unwrap() == big);
    unmount(true);
    let text = fs::read_to_string(&trace).unwrap();
    let traced: u64 = text
        .lines()
        .filter_map(|l| l.strip_prefix('@'))
        .map(|r| r.split_once('+').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert!(traced >= big.len() as u64, "the trace covers big:\n{text}");

    // The next mount fetches what the trace names before anyone reads it.
    server.reset_stats();
    let disk_cache = dir.path().join("disk-cache");
    mount(&format!(
        "fuse,fetch_unit=64KiB,prefetch={},control={},disk_cache={},disk_cache_size=1MiB",
        trace.display(),
        socket.display(),
        disk_cache.display()
    ));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = squashd(&["status", "--socket", socket.to_str().unwrap(), "--json"]);
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        // The trace named every unit of this small image: all of it is fetched, most ahead.
        let remote = &status["images"][0]["remote"];
        let fetched = remote["bytes_fetched"].as_u64().unwrap();
        if fetched >= image_len && remote["units_prefetched"].as_u64().unwrap() > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "not prefetched: {status}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let gets_before = server.stats().gets;
    assert!(fs::read(mnt.join("big")).unwrap() == big);
    assert_eq!(
        server.stats().gets,
        gets_before,
        "reading what was prefetched asks the server nothing more"
    );
    // The disk cache, smaller than what was fetched, kept within its budget; status says so.
    let out = squashd(&["status", "--socket", socket.to_str().unwrap(), "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cache = &status["disk_caches"][0];
    assert_eq!(cache["dir"], disk_cache.to_str().unwrap(), "{status}");
    assert_eq!(cache["budget_bytes"], 1 << 20);
    let used = cache["used_bytes"].as_u64().unwrap();
    assert!(used > 0 && used <= 1 << 20, "{status}");
    assert!(cache["evictions"].as_u64().unwrap() > 0, "{status}");
    assert!(bytes_under(&disk_cache) <= 1 << 20);
    unmount(false);
}

/// Bytes of the files under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in fs::read_dir(&d).unwrap().flatten() {
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                pending.push(entry.path());
            } else {
                total += meta.len();
            }
        }
    }
    total
}

/// Entry files of the disk cache (not its lock or temporary files).
fn entries_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in fs::read_dir(&d).unwrap().flatten() {
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                pending.push(entry.path());
            } else if meta.len() > 4096 {
                found.push(entry.path());
            }
        }
    }
    found
}

#[test]
fn a_warm_disk_cache_answers_a_later_run_and_stays_in_its_budget() {
    if !testkit::have_squashfs_tools() {
        return;
    }
    let (dir, _image, big, server) = served_data_image();
    let cache = dir.path().join("cache");
    let cat = |budget: &str| {
        let out = squashd(&[
            "cat",
            &server.url(),
            "/big",
            "--disk-cache",
            cache.to_str().unwrap(),
            "--disk-cache-size",
            budget,
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(out.stdout == big, "the file's bytes");
    };
    cat("64MiB");
    let cold = server.stats();
    assert!(cold.gets > 0);
    cat("64MiB");
    let warm = server.stats();
    assert_eq!(
        warm.gets,
        cold.gets + 1,
        "a warm run asks only for the size and ETag (and the first unit with them)"
    );
    assert_eq!(warm.heads, 0);

    // A damaged entry is found out by its checksum and fetched again: one GET, right bytes.
    // Not the first unit's: it comes with the open whatever the cache holds. (An entry's
    // unit index is the little-endian u64 after its 8-byte magic.)
    let entries: Vec<PathBuf> = entries_under(&cache)
        .into_iter()
        .filter(|e| fs::read(e).unwrap()[8..16] != 0u64.to_le_bytes())
        .collect();
    assert!(!entries.is_empty());
    let victim = &entries[entries.len() / 2];
    let mut bytes = fs::read(victim).unwrap();
    let unit = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    fs::write(victim, bytes).unwrap();
    cat("64MiB");
    // The open's GET of the first unit, then the damaged unit again, and nothing else. The
    // reader and read-ahead can both come upon the damaged entry and fetch it (rarely: seen
    // once in CI), so the damaged unit may come twice; no other unit may.
    let after = server.stats();
    let fetched = &after.ranges[warm.ranges.len()..];
    let unit_start = unit << 20; // the default 1 MiB fetch unit
    assert!(
        (2..=3).contains(&fetched.len())
            && fetched[0].start == 0
            && fetched[1..].iter().all(|r| r.start == unit_start),
        "the open's GET, and the damaged unit {unit} again: {fetched:?}"
    );

    // A budget smaller than the data read: the cache stays within it.
    fs::remove_dir_all(&cache).unwrap();
    cat("2MiB");
    let used = bytes_under(&cache);
    assert!(
        used <= (2 << 20) + (1 << 20),
        "{used} bytes on disk for a 2 MiB budget"
    );
}

#[test]
fn a_sequential_reader_over_a_slow_link_has_each_unit_fetched_once() {
    if !testkit::can_mount() {
        return;
    }
    let (dir, image, big, server) = served_data_image();
    let image_len = fs::metadata(&image).unwrap().len();
    // Each answer waits 20 ms: the reader keeps catching up with read-ahead, whose units are
    // then on the way (it waits for them) or still queued (it takes them over).
    server.set_delay(Duration::from_millis(20));
    let mnt = dir.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let out = squashd(&[
        "mount",
        &server.url(),
        mnt.to_str().unwrap(),
        "-o",
        "fuse,fetch_unit=64KiB",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let _guard = MountGuard(mnt.clone());
    let mut file = fs::File::open(mnt.join("big")).unwrap();
    let mut read = Vec::new();
    let mut chunk = vec![0u8; 128 << 10];
    loop {
        let n = std::io::Read::read(&mut file, &mut chunk).unwrap();
        if n == 0 {
            break;
        }
        read.extend_from_slice(&chunk[..n]);
    }
    assert!(read == big, "the file's bytes");
    let ranges = server.stats().ranges;
    let unit = 64u64 << 10;
    let mut times: std::collections::BTreeMap<u64, u32> = std::collections::BTreeMap::new();
    for (i, r) in ranges.iter().enumerate() {
        // The open asks for the object's last 8 MiB beside its first unit, from wherever that
        // starts: of that range, only whole units are kept.
        let is_tail = i < 2 && r.start > 0 && r.end == image_len;
        let first = if is_tail {
            r.start.div_ceil(unit)
        } else {
            r.start / unit
        };
        for u in first..r.end.div_ceil(unit) {
            *times.entry(u).or_default() += 1;
        }
    }
    let twice: Vec<_> = times.iter().filter(|(_, &n)| n > 1).collect();
    let fetched: u64 = ranges.iter().map(|r| r.end - r.start).sum();
    assert!(
        twice.is_empty(),
        "units fetched more than once (unit: times): {twice:?}; {fetched} bytes fetched for a \
         {image_len}-byte image in {} requests",
        ranges.len()
    );
}

#[test]
fn an_open_fetches_the_images_tail_beside_its_start_unless_told_not_to() {
    if !testkit::have_squashfs_tools() {
        return;
    }
    let (dir, image, _big, server) = served_data_image();
    let image_len = fs::metadata(&image).unwrap().len();
    let url = server.url();
    let ls = |extra: &[&str]| {
        server.reset_stats();
        let mut args = vec!["ls", url.as_str(), "/d"];
        args.extend_from_slice(extra);
        let out = squashd(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 20);
        server.stats().ranges
    };
    // The first unit and the last 8 MiB at once; the metadata is in that tail: nothing more.
    let tail = image_len - (8 << 20)..image_len;
    let ranges = ls(&[]);
    assert_eq!(ranges.len(), 2, "{ranges:?}");
    assert!(
        ranges.contains(&(0..1 << 20)) && ranges.contains(&tail),
        "{ranges:?}"
    );
    // With a disk cache, no tail: the first unit, then the metadata region alone.
    let cache = dir.path().join("cache");
    let ranges = ls(&["--disk-cache", cache.to_str().unwrap()]);
    assert_eq!(ranges.len(), 2, "{ranges:?}");
    assert_eq!(ranges[0], 0..1 << 20);
    assert!(
        ranges[1].end == image_len && ranges[1].start > tail.start,
        "{ranges:?}"
    );
    // open_tail=0 on a mount: no tail either.
    if !testkit::can_mount() {
        return;
    }
    let mnt = dir.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    server.reset_stats();
    let out = squashd(&[
        "mount",
        &url,
        mnt.to_str().unwrap(),
        "-o",
        "fuse,open_tail=0",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let _guard = MountGuard(mnt.clone());
    assert_eq!(fs::read_dir(mnt.join("d")).unwrap().count(), 20);
    let ranges = server.stats().ranges;
    assert!(!ranges.contains(&tail), "{ranges:?}");
    assert_eq!(ranges.len(), 2, "{ranges:?}");
}

#[test]
fn a_remote_mount_over_the_ring_keeps_a_thread_per_entry() {
    // A read of a remote image may wait for the network: its ring must keep a thread per entry
    // (two per CPU), so that a waiting read holds up no other request of its CPU, where a local
    // image's grows one thread per CPU holding sixteen entries.
    if !testkit::can_mount() {
        return;
    }
    let ring = match testkit::uring::RingOn::take() {
        Ok(ring) => ring,
        Err(reason) => return testkit::skip(&reason),
    };
    let (dir, _image, big, server) = served_data_image();
    let mnt = dir.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let socket = dir.path().join("ring.sock");
    let opts = format!("uring=on,control={}", socket.display());
    let out = squashd(&["mount", &server.url(), mnt.to_str().unwrap(), "-o", &opts]);
    assert!(out.status.success(), "mount over HTTP: {}", stderr(&out));
    let _guard = MountGuard(mnt.clone());
    // Past the idle start: 400 lookups of names the image does not have, one request each.
    for k in 0..400 {
        assert!(fs::symlink_metadata(mnt.join(format!("nope-{k}"))).is_err());
    }
    assert_eq!(fs::read(mnt.join("big")).unwrap(), big);
    let cpus = testkit::uring::possible_cpus();
    let grown = (1 + u64::from(squashd_fuse::server::RING_QUEUE_DEPTH)) * cpus;
    let deadline = Instant::now() + Duration::from_secs(10);
    let entries = loop {
        let out = squashd(&["status", "--socket", socket.to_str().unwrap(), "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let image = &status["images"][0];
        assert_eq!(image["transport"], "io-uring", "{status}");
        let entries = image["ring_entries"].as_u64().unwrap();
        if entries >= grown || Instant::now() > deadline {
            break entries;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(entries, grown, "ring entries of the remote mount");
    testkit::umount(&mnt);
    drop(ring);
}
