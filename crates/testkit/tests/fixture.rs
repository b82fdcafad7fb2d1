//! The fixture tree survives a round trip through the reference tools: what unsquashfs extracts
//! from a mksquashfs image of the tree is the tree. This checks the fixture and the walker, so
//! that library tests can trust both.

use testkit::{assert_records_eq, walk_disk, Built, Kind, TreeOptions};

#[test]
fn fixture_round_trips_through_squashfs_tools() {
    if !testkit::have_squashfs_tools() {
        return;
    }
    let built = Built::new(&TreeOptions {
        many_entries: 500,
        ..TreeOptions::default()
    });
    let expected = walk_disk(&built.src);
    let image = built.image("default", &[]);
    let extracted = walk_disk(&built.extract(&image));
    assert_records_eq(&expected, &extracted, "unsquashfs -d of the default image");

    // The walker sees what the tree is meant to hold.
    let find = |p: &[u8]| expected.iter().find(|r| r.path == p).unwrap();
    assert_eq!(find(b"links/trio-a").nlink, 3);
    assert_eq!(
        find(b"links2/trio-c").link_leader.as_deref(),
        Some(&b"links/sub/trio-b"[..])
    );
    assert_eq!(find(b"symlinks/long").target.as_ref().unwrap().len(), 4000);
    assert_eq!(find(b"a").mtime, 4_000_000_000);
    assert_eq!(find(b"special/fifo").kind, Kind::Fifo);
    let large = &find(b"xattr/large").xattrs;
    let big = large.iter().find(|(n, _)| n == b"user.big").unwrap();
    assert!(big.1.len() >= 3800);
    if testkit::is_root() {
        assert_eq!(find(b"special/chr-136-70000").rdev, Some((136, 70000)));
        assert_eq!(find(b"perms/owned-big").gid, 4_000_000_000);
        assert_eq!(find(b"xattr/basic").xattrs.len(), 4);
    } else {
        testkit::skip("not root: no device nodes, owners or trusted/security xattrs checked");
    }
    let lls = testkit::unsquashfs_lls(&image);
    assert!(lls.lines().count() >= expected.len(), "{lls}");
}
