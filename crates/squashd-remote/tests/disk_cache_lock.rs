//! The lock of a disk cache directory. A test binary of its own: it starts a process, and a fork
//! holds a copy of every descriptor of the test process until its exec, so the lock of a cache
//! that another test of the same process drops and reopens at that moment would look held.

use squashd_remote::disk_cache::{DiskCache, DiskCacheError};

#[test]
fn a_second_open_of_the_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cache = DiskCache::open(dir.path(), 1 << 20).unwrap();
    let err = DiskCache::open(dir.path(), 1 << 20).unwrap_err();
    assert!(matches!(err, DiskCacheError::InUse { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains(&dir.path().display().to_string()) && message.contains("in use"),
        "{message}"
    );
    assert!(
        message.contains("another cache directory"),
        "says what to do: {message}"
    );

    // The lock is the kernel's flock, so another process sees it too (util-linux's flock(1)).
    let lock = dir.path().join("lock");
    match std::process::Command::new("flock")
        .arg("-n")
        .arg(&lock)
        .arg("true")
        .status()
    {
        Ok(status) => assert_eq!(
            status.code(),
            Some(1),
            "flock(1) got the lock while the cache holds it"
        ),
        Err(error) => {
            println!("skipped the check from another process: cannot run flock(1): {error}")
        }
    }
    drop(cache);
    DiskCache::open(dir.path(), 1 << 20).expect("the lock goes with the cache");
}
