//! A user's verity files are read through the descriptors the daemon opened with the user's
//! rights (`/proc/self/fd/N`); the errors about them name them as the user did.

use super::verity::{
    attach_as, have_veritysetup, user_daemon, user_mountpoint, verity_image, USER,
};
use super::*;

/// That `err` is one line naming `path`, and no descriptor of the daemon's.
fn names(err: &str, path: &Path) {
    assert!(err.contains(path.to_str().unwrap()), "{err}");
    assert!(!err.contains("/proc/self/fd"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn errors_about_a_users_verity_files_name_them_as_given() {
    if !testkit::can_mount() || !have_veritysetup() {
        return;
    }
    let scratch = Scratch::new();
    let (image, tree, root, _, _) = verity_image(&scratch.path().join("img"), 40, false);
    let mnt = user_mountpoint(&scratch);
    // Files the user may read that are not what they claim to be.
    let garbage = scratch.path().join("not-a-tree");
    fs::write(&garbage, vec![0x5a; 8192]).unwrap();
    let sig = scratch.path().join("not-a-signature.p7s");
    fs::write(&sig, b"not a signature").unwrap();
    let mut daemon = user_daemon(&scratch, "verity-names");
    let sock = daemon.socket.clone();

    // verity_data= that holds no verity superblock.
    let given = format!(
        "verity=require,verity_data={},roothash={root}",
        garbage.display()
    );
    let (ok, err) = attach_as(USER, &sock, &image, &mnt, &given);
    assert!(!ok, "attached with a tree that is not one");
    assert!(err.contains("superblock"), "{err}");
    names(&err, &garbage);

    // roothash_sig= that is no PKCS#7 signature, where a signature is required.
    use std::os::unix::fs::PermissionsExt;
    let readable = scratch.path().join("tree-readable");
    fs::copy(&tree, &readable).unwrap();
    fs::set_permissions(&readable, fs::Permissions::from_mode(0o644)).unwrap();
    let given = format!(
        "verity=signed,verity_data={},roothash={root},roothash_sig={}",
        readable.display(),
        sig.display()
    );
    let (ok, err) = attach_as(USER, &sock, &image, &mnt, &given);
    assert!(!ok, "attached with a signature that is not one");
    names(&err, &sig);

    // A tree found beside the image, broken likewise.
    let beside = PathBuf::from(format!("{}.verity", image.display()));
    fs::copy(&garbage, &beside).unwrap();
    let (ok, err) = attach_as(USER, &sock, &image, &mnt, &format!("roothash={root}"));
    assert!(!ok, "attached with a tree beside it that is not one");
    names(&err, &beside);
    assert!(mount_type(&mnt).is_none());
    assert!(daemon.is_running());
    daemon.terminate();
}
