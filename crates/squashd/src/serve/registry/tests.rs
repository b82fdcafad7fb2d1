//! The registry in-process, without a daemon, a socket or a mount: the control protocol's
//! answers (requests go through [`Controller::dispatch`], as the socket's do) and the checks
//! made before anything is mounted.

use super::*;
use crate::control::protocol::Request;
use squashd_core::CacheBudgets;

/// A registry with `limits`, its blob directory in a scratch directory (kept with it).
fn registry(limits: AccessLimits) -> (tempfile::TempDir, Registry) {
    let scratch = tempfile::tempdir().unwrap();
    let caches = Arc::new(Caches::new(&CacheBudgets::default()));
    let registry = Registry::new(caches, limits, scratch.path().join("blobs"));
    (scratch, registry)
}

/// A user other than root (and other than the daemon's own user), passing no image file.
fn user(uid: u32) -> Caller {
    Caller {
        uid,
        gid: uid,
        image: None,
    }
}

/// The message of an error answer; panics on any other answer.
fn refusal(response: Response) -> String {
    match response {
        Response::Error { message } => {
            assert!(!message.contains('\n'), "not one line: {message}");
            message
        }
        other => panic!("not refused: {other:?}"),
    }
}

fn attach(image: &str, mountpoint: &str, options: &[&str]) -> Request {
    Request::Attach {
        image: PathBuf::from(image),
        mountpoint: PathBuf::from(mountpoint),
        options: options.iter().map(|o| o.to_string()).collect(),
    }
}

#[test]
fn status_answers_with_the_images_each_caller_may_see() {
    let (_scratch, registry) = registry(AccessLimits::default());
    for caller in [Caller::daemon(), user(4242)] {
        match registry.dispatch(Request::Status, caller) {
            Response::Status(status) => {
                assert!(status.images.is_empty(), "{status:?}");
                assert_eq!(status.pid, std::process::id());
            }
            other => panic!("not a status: {other:?}"),
        }
    }
}

#[test]
fn a_wrong_option_is_refused_by_name_before_anything_is_opened() {
    let (_scratch, registry) = registry(AccessLimits::default());
    for (options, named) in [
        (&["bogus"][..], "\"bogus\""),
        (&["threads=many"], "threads"),
        (&["kernel", "fuse"], "kernel and fuse"),
        (&["offset=0", "partition=1"], "offset and partition"),
    ] {
        let request = attach("/nonexistent/a.sqfs", "/nonexistent/mnt", options);
        let message = refusal(registry.dispatch(request, Caller::daemon()));
        assert!(message.contains(named), "{options:?}: {message}");
    }
}

#[test]
fn a_user_passes_the_image_as_a_file_and_attaches_no_remote_image() {
    let (_scratch, registry) = registry(AccessLimits::default());
    let request = attach("/srv/a.sqfs", "/home/u/mnt", &[]);
    let message = refusal(registry.dispatch(request, user(4242)));
    assert!(
        message.contains("must pass the image as an open file"),
        "{message}"
    );
    let request = attach("https://example.com/a.sqfs", "/home/u/mnt", &[]);
    let message = refusal(registry.dispatch(request, user(4242)));
    assert!(
        message.contains("may not attach a remote image"),
        "{message}"
    );
    assert!(registry.mountpoints().is_empty());
}

#[test]
fn detach_needs_an_attached_image() {
    let (_scratch, registry) = registry(AccessLimits::default());
    let request = Request::Detach {
        mountpoint: PathBuf::from("/nonexistent/mnt"),
        lazy: false,
    };
    let message = refusal(registry.dispatch(request, Caller::daemon()));
    assert!(message.contains("no image is attached there"), "{message}");
}

#[test]
fn a_reservation_holds_its_mount_point_and_counts_against_its_user() {
    let limits = AccessLimits {
        max_images_per_user: 2,
        ..AccessLimits::default()
    };
    let (_scratch, registry) = registry(limits);
    let (a, b, c) = (Path::new("/m/a"), Path::new("/m/b"), Path::new("/m/c"));
    let first = registry.reserve(a, Some(7)).unwrap();
    let taken = registry.reserve(a, None).err().unwrap().to_string();
    assert!(taken.contains("already attached there"), "{taken}");
    let second = registry.reserve(b, Some(7)).unwrap();
    assert_eq!(registry.table().held_by(7), 2);
    let full = registry.reserve(c, Some(7)).err().unwrap().to_string();
    assert!(full.contains("already has 2 images"), "{full}");
    // Root and other users are not counted against uid 7.
    drop(registry.reserve(c, Some(8)).unwrap());
    drop(registry.reserve(c, None).unwrap());
    // A reservation dropped (an attach that failed) frees its place and its count.
    drop(first);
    assert_eq!(registry.table().held_by(7), 1);
    let third = registry.reserve(a, Some(7)).unwrap();
    drop((second, third));
    assert_eq!(registry.table().held_by(7), 0);
    assert!(registry.table().reserved.is_empty());
}
