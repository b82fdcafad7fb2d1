//! Remote images verified as local ones are: `URL.verity` and `URL.roothash` served by nginx
//! beside the image are fetched like it (`URL.verity?QUERY` for an address with a query); a
//! damaged image on the server fails its block.

use super::*;
use testkit::http::Nginx;

#[test]
fn a_served_image_is_verified_by_the_tree_and_root_hash_beside_it() {
    let Some((built, image)) = fixture() else {
        return;
    };
    let dir = built.scratch("served");
    fs::create_dir_all(&dir).unwrap();
    let served = dir.join("img.sqfs");
    fs::copy(&image, &served).unwrap();
    let tree = dir.join("img.sqfs.verity");
    let root = format(&[served.as_os_str(), tree.as_os_str()]);
    fs::write(dir.join("img.sqfs.roothash"), format!("{root}\n")).unwrap();
    let bad = dir.join("bad.sqfs");
    fs::copy(&image, &bad).unwrap();
    flip(&bad, 8192 + 100);
    fs::copy(&tree, dir.join("bad.sqfs.verity")).unwrap();
    fs::write(dir.join("bad.sqfs.roothash"), &root).unwrap();
    fs::copy(&image, dir.join("plain.sqfs")).unwrap();
    let nginx = match Nginx::serve(&dir) {
        Ok(n) => n,
        Err(why) => {
            testkit::skip(&format!("nginx cannot serve: {why}"));
            return;
        }
    };
    let url = nginx.url("img.sqfs");
    let out = squashd(&["verify", &url]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text(&out.stdout).contains(&format!("{url}.roothash")),
        "{out:?}"
    );
    // An address with a query (a token, a signature): the sidecars are the path's,
    // `img.sqfs.roothash?QUERY`, not `img.sqfs?QUERY.roothash` (which nginx answers with the
    // image itself, its query ignored).
    let with_query = format!("{url}?token=abc.def");
    let out = squashd(&["verify", "--verity=require", &with_query]);
    assert!(out.status.success(), "{out:?}");
    assert!(text(&out.stdout).contains("img.sqfs.roothash?"), "{out:?}");
    let ours = squashd(&["ls", "-lR", "--verity=require", &url]);
    assert!(ours.status.success(), "{ours:?}");
    let theirs = testkit::unsquashfs(&[OsStr::new("-lls"), image.as_os_str()]);
    assert_eq!(
        text(&ours.stdout).replace(&url, "IMG"),
        text(&theirs.stdout).replace(&image.display().to_string(), "IMG")
    );
    let out = squashd(&["verify", &nginx.url("bad.sqfs")]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("data block 2 "), "{out:?}");
    // Nothing beside it: read unverified in auto, refused with require.
    let plain = nginx.url("plain.sqfs");
    assert!(squashd(&["info", &plain]).status.success());
    let out = squashd(&["info", "--verity=require", &plain]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("no root hash"), "{out:?}");
}
