//! squashd's FUSE session, in-process: request bytes as the kernel writes them (laid out from
//! `include/uapi/linux/fuse.h`) go into the [`Dispatcher`], and the answer's bytes are checked
//! field by field against the source tree the image was built from (by the real mksquashfs).
//! No kernel, root or /dev/fuse is needed.

use squashd_core::{Image, OpenOptions};
use squashd_fuse::server::abi::{self, init_flags, opcode};
use squashd_fuse::server::Dispatcher;
use squashd_fuse::{FuseAdapter, MountConfig, SquashFs};
use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use testkit::{Built, TreeOptions};
use zerocopy::{FromBytes, IntoBytes};

const ROOT: u64 = 1;

struct Fixture {
    built: Built,
    dispatcher: Dispatcher<FuseAdapter>,
}

/// The fixture tree's image served by a dispatcher; `admitted`: the `allow_root` owner.
fn fixture(admitted: Option<u32>) -> Option<Fixture> {
    if !testkit::have_squashfs_tools() {
        testkit::skip("wire: no mksquashfs");
        return None;
    }
    let built = Built::new(&TreeOptions::default());
    let path = built.image("gzip", &["-comp", "gzip"]);
    let image = Image::open(&path, &OpenOptions::default()).unwrap();
    let fs = SquashFs::new(image, &MountConfig::default()).unwrap();
    let dispatcher = Dispatcher::new(FuseAdapter::new(fs, admitted));
    Some(Fixture { built, dispatcher })
}

/// A request: the header (its length filled in), then `args`.
fn request(op: u32, unique: u64, node: u64, uid: u32, args: &[u8]) -> Vec<u8> {
    let header = abi::InHeader {
        len: (squashd_fuse_uring::IN_HEADER_SIZE + args.len()) as u32,
        opcode: op,
        unique,
        nodeid: node,
        uid,
        gid: 0,
        pid: 1,
        total_extlen: 0,
    };
    [&header.to_bytes()[..], args].concat()
}

/// A NUL-terminated name.
fn name(n: &str) -> Vec<u8> {
    [n.as_bytes(), &[0]].concat()
}

fn read_in(fh: u64, offset: u64, size: u32) -> Vec<u8> {
    abi::ReadIn {
        fh,
        offset,
        size,
        read_flags: 0,
        lock_owner: 0,
        flags: 0,
        padding: 0,
    }
    .as_bytes()
    .to_vec()
}

/// Dispatches `bytes`; the answer's header (checked: length and unique) and body.
fn answer(d: &Dispatcher<FuseAdapter>, bytes: &[u8]) -> (i32, Vec<u8>) {
    let unique = abi::InHeader::parse(bytes).unwrap().unique;
    let reply = d.dispatch(bytes).expect("an answer");
    let all = reply.to_vec();
    reply.replied();
    let (header, body) = abi::OutHeader::read_from_prefix(&all).unwrap();
    assert_eq!(
        header.len as usize,
        all.len(),
        "the header's length is the answer's"
    );
    assert_eq!(header.unique, unique);
    (-header.error, body.to_vec())
}

/// INIT from a kernel offering `flags` (flags2 in the high half).
fn init(d: &Dispatcher<FuseAdapter>, flags: u64) -> abi::InitOut {
    let args = abi::InitIn {
        major: 7,
        minor: 45,
        max_readahead: 128 << 10,
        flags: flags as u32,
        flags2: (flags >> 32) as u32,
        unused: [0; 11],
    };
    let (errno, body) = answer(d, &request(opcode::INIT, 1, 0, 0, args.as_bytes()));
    assert_eq!(errno, 0);
    assert_eq!(body.len(), std::mem::size_of::<abi::InitOut>());
    abi::InitOut::read_from_bytes(&body).unwrap()
}

fn lookup(d: &Dispatcher<FuseAdapter>, parent: u64, n: &str) -> (i32, Option<abi::EntryOut>) {
    let (errno, body) = answer(d, &request(opcode::LOOKUP, 7, parent, 0, &name(n)));
    (errno, abi::EntryOut::read_from_bytes(&body).ok())
}

#[test]
fn init_grants_only_what_the_kernel_offers_and_no_opendir_follows() {
    let Some(f) = fixture(None) else { return };
    let offered = init_flags::ASYNC_READ
        | init_flags::DO_READDIRPLUS
        | init_flags::NO_OPENDIR_SUPPORT
        | init_flags::MAX_PAGES
        | init_flags::INIT_EXT
        | init_flags::OVER_IO_URING;
    let out = init(&f.dispatcher, offered);
    let granted = u64::from(out.flags) | (u64::from(out.flags2) << 32);
    assert_eq!((out.major, out.minor), (7, 40));
    assert_eq!(
        granted,
        offered & !init_flags::OVER_IO_URING,
        "asked for what it uses, among what was offered"
    );
    assert_eq!(f.dispatcher.agreed(), granted);
    assert!(out.max_readahead <= 128 << 10);
    assert!(out.max_pages >= 256, "reads of 1 MiB at least");
    assert!(out.max_write >= 4096);
    // The kernel agreed to send no OPENDIR: one that comes anyway is told ENOSYS.
    let open = abi::OpenIn {
        flags: 0,
        open_flags: 0,
    };
    let (errno, _) = answer(
        &f.dispatcher,
        &request(opcode::OPENDIR, 2, ROOT, 0, open.as_bytes()),
    );
    assert_eq!(errno, libc::ENOSYS);
}

#[test]
fn lookup_getattr_open_read_release_answer_the_source() {
    let Some(f) = fixture(None) else { return };
    init(&f.dispatcher, init_flags::INIT_EXT);
    let d = &f.dispatcher;
    let source = f.built.src.join("one/only");
    let meta = std::fs::metadata(&source).unwrap();
    let (errno, dir) = lookup(d, ROOT, "one");
    assert_eq!(errno, 0);
    let (errno, entry) = lookup(d, dir.unwrap().nodeid, "only");
    assert_eq!(errno, 0);
    let entry = entry.unwrap();
    assert_ne!(entry.nodeid, 0);
    assert_eq!(entry.attr.size, meta.len());
    assert_eq!(entry.attr.mode, meta.mode());
    assert!(entry.entry_valid >= 365 * 24 * 3600, "kept for ever");

    // A missing name: a negative entry (node 0), kept as long.
    let (errno, missing) = lookup(d, ROOT, "no-such-name");
    assert_eq!(errno, 0);
    let missing = missing.unwrap();
    assert_eq!(missing.nodeid, 0);
    assert!(missing.entry_valid >= 365 * 24 * 3600);

    let getattr = abi::GetattrIn {
        getattr_flags: 0,
        dummy: 0,
        fh: 0,
    };
    let (errno, body) = answer(d, &request(opcode::GETATTR, 3, ROOT, 0, getattr.as_bytes()));
    assert_eq!(errno, 0);
    let attr = abi::AttrOut::read_from_bytes(&body).unwrap();
    assert_eq!(attr.attr.mode & libc::S_IFMT, libc::S_IFDIR);
    assert_eq!(attr.attr.ino, ROOT);

    let open = abi::OpenIn {
        flags: libc::O_RDONLY as u32,
        open_flags: 0,
    };
    let (errno, body) = answer(
        d,
        &request(opcode::OPEN, 4, entry.nodeid, 0, open.as_bytes()),
    );
    assert_eq!(errno, 0);
    let opened = abi::OpenOut::read_from_bytes(&body).unwrap();
    assert_ne!(opened.fh, 0);
    let (errno, data) = answer(
        d,
        &request(
            opcode::READ,
            5,
            entry.nodeid,
            0,
            &read_in(opened.fh, 3, 1 << 20),
        ),
    );
    assert_eq!(errno, 0);
    assert_eq!(data, std::fs::read(&source).unwrap()[3..]);

    // Opening for writing: EROFS.
    let write = abi::OpenIn {
        flags: libc::O_WRONLY as u32,
        open_flags: 0,
    };
    let (errno, _) = answer(
        d,
        &request(opcode::OPEN, 6, entry.nodeid, 0, write.as_bytes()),
    );
    assert_eq!(errno, libc::EROFS);

    let release = abi::ReleaseIn {
        fh: opened.fh,
        flags: 0,
        release_flags: 0,
        lock_owner: 0,
    };
    let (errno, body) = answer(
        d,
        &request(opcode::RELEASE, 8, entry.nodeid, 0, release.as_bytes()),
    );
    assert_eq!((errno, body.len()), (0, 0));
    assert_eq!(d.fs().fs().open_handles(), 0);
}

/// The names of a READDIRPLUS answer, each entry's node checked against its attributes.
fn names_plus(mut body: &[u8]) -> Vec<(OsString, u64)> {
    let mut names = Vec::new();
    while !body.is_empty() {
        let (entry, rest) = abi::DirentPlus::read_from_prefix(body).unwrap();
        let len = entry.dirent.namelen as usize;
        let name = OsStr::from_bytes(&rest[..len]).to_os_string();
        if entry.entry_out.nodeid == 0 {
            // A bare entry (a file, while walks do not stat): the kernel links nothing, and
            // reads only the dirent's name, node and type.
            assert_eq!(entry.entry_out.attr.ino, 0);
            assert_ne!(
                entry.dirent.typ,
                libc::DT_DIR as u32,
                "directories are linked"
            );
        } else {
            assert_eq!(entry.dirent.ino, entry.entry_out.attr.ino);
            assert_eq!(entry.dirent.typ, entry.entry_out.attr.mode >> 12);
        }
        names.push((name, entry.dirent.off));
        let whole = abi::dirent_align(std::mem::size_of::<abi::DirentPlus>() + len);
        body = &body[whole..];
    }
    names
}

#[test]
fn readdirplus_lists_the_source_across_small_buffers() {
    let Some(f) = fixture(None) else { return };
    init(
        &f.dispatcher,
        init_flags::INIT_EXT | init_flags::NO_OPENDIR_SUPPORT,
    );
    let d = &f.dispatcher;
    let mut listed = Vec::new();
    let mut offset = 0;
    loop {
        // A buffer of 512 bytes: three entries or so, so the listing takes several answers.
        let (errno, body) = answer(
            d,
            &request(opcode::READDIRPLUS, 9, ROOT, 0, &read_in(0, offset, 512)),
        );
        assert_eq!(errno, 0);
        assert!(body.len() <= 512);
        let names = names_plus(&body);
        let Some(&(_, next)) = names.last() else {
            break;
        };
        offset = next;
        listed.extend(names.into_iter().map(|(n, _)| n));
    }
    let mut want: BTreeSet<OsString> = std::fs::read_dir(&f.built.src)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    want.insert(".".into());
    want.insert("..".into());
    assert_eq!(listed.len(), want.len(), "each entry once: {listed:?}");
    assert_eq!(listed.into_iter().collect::<BTreeSet<_>>(), want);
}

#[test]
fn writes_are_erofs_unknown_operations_enosys_and_forgets_unanswered() {
    let Some(f) = fixture(None) else { return };
    let d = &f.dispatcher;
    for op in [
        opcode::MKDIR,
        opcode::UNLINK,
        opcode::SETATTR,
        opcode::WRITE,
        opcode::CREATE,
        opcode::SETXATTR,
        opcode::RENAME2,
    ] {
        let (errno, body) = answer(d, &request(op, 10, ROOT, 0, &[0; 64]));
        assert_eq!((errno, body.len()), (libc::EROFS, 0), "opcode {op}");
    }
    // IOCTL, LSEEK, and a number no kernel sends yet.
    for op in [39, 46, 4000] {
        let (errno, _) = answer(d, &request(op, 11, ROOT, 0, &[0; 64]));
        assert_eq!(errno, libc::ENOSYS, "opcode {op}");
    }
    let forget = abi::ForgetIn { nlookup: 1 }.as_bytes().to_vec();
    assert!(d
        .dispatch(&request(opcode::FORGET, 12, 5, 0, &forget))
        .is_none());
    let batch = [
        abi::BatchForgetIn { count: 2, dummy: 0 }.as_bytes(),
        abi::ForgetOne {
            nodeid: 5,
            nlookup: 1,
        }
        .as_bytes(),
        abi::ForgetOne {
            nodeid: 6,
            nlookup: 2,
        }
        .as_bytes(),
    ]
    .concat();
    assert!(d
        .dispatch(&request(opcode::BATCH_FORGET, 13, 0, 0, &batch))
        .is_none());
    let interrupt = abi::InterruptIn { unique: 12 }.as_bytes().to_vec();
    assert!(d
        .dispatch(&request(opcode::INTERRUPT, 14, 0, 0, &interrupt))
        .is_none());
}

#[test]
fn truncated_requests_are_eio_never_a_panic() {
    let Some(f) = fixture(None) else { return };
    let d = &f.dispatcher;
    // Shorter than a header: nothing to answer.
    assert!(d.dispatch(&[1, 2, 3]).is_none());
    // A READ without its argument, a name without its NUL, a batch promising more than it has.
    let cases = [
        request(opcode::READ, 20, ROOT, 0, &[0; 8]),
        request(opcode::LOOKUP, 21, ROOT, 0, b"one"),
        request(opcode::INIT, 22, 0, 0, &[0; 8]),
    ];
    for bytes in &cases {
        let (errno, body) = answer(d, bytes);
        assert_eq!((errno, body.len()), (libc::EIO, 0));
    }
    let batch = [
        abi::BatchForgetIn {
            count: 1000,
            dummy: 0,
        }
        .as_bytes(),
        &[0; 16],
    ]
    .concat();
    assert!(d
        .dispatch(&request(opcode::BATCH_FORGET, 23, 0, 0, &batch))
        .is_none());
    // A header whose length is beyond the bytes given.
    let mut long = request(opcode::STATFS, 24, ROOT, 0, &[]);
    long[0] = 200;
    let (errno, _) = answer(d, &long);
    assert_eq!(errno, libc::EIO);
}

#[test]
fn allow_root_refuses_other_users_and_admits_the_owner_and_root() {
    let Some(f) = fixture(Some(1000)) else { return };
    let d = &f.dispatcher;
    assert_eq!(lookup(d, ROOT, "one").0, 0, "root");
    let as_user = |uid| answer(d, &request(opcode::LOOKUP, 30, ROOT, uid, &name("one"))).0;
    assert_eq!(as_user(1000), 0, "the owner");
    assert_eq!(as_user(1234), libc::EACCES, "another user");
    let (errno, _) = answer(d, &request(opcode::STATFS, 31, ROOT, 1234, &[]));
    assert_eq!(errno, libc::EACCES);
}

#[test]
fn getxattr_size_query_and_statfs() {
    let Some(f) = fixture(None) else { return };
    let d = &f.dispatcher;
    let (errno, body) = answer(d, &request(opcode::STATFS, 40, ROOT, 0, &[]));
    assert_eq!(errno, 0);
    let statfs = abi::StatfsOut::read_from_bytes(&body).unwrap();
    assert_eq!((statfs.bfree, statfs.bavail, statfs.ffree), (0, 0, 0));
    assert!(statfs.blocks > 0 && statfs.files > 0);
    // No such xattr on the root: ENODATA, whatever the buffer.
    let args = [
        abi::GetxattrIn {
            size: 0,
            padding: 0,
        }
        .as_bytes(),
        &name("user.nothing"),
    ]
    .concat();
    let (errno, _) = answer(d, &request(opcode::GETXATTR, 41, ROOT, 0, &args));
    assert_eq!(errno, libc::ENODATA);
    let list = abi::GetxattrIn {
        size: 0,
        padding: 0,
    };
    let (errno, body) = answer(d, &request(opcode::LISTXATTR, 42, ROOT, 0, list.as_bytes()));
    assert_eq!(errno, 0);
    assert_eq!(body.len(), std::mem::size_of::<abi::GetxattrOut>());
}

/// The node of the fixture's `one/only`, looked up.
fn only_node(d: &Dispatcher<FuseAdapter>) -> u64 {
    let (_, dir) = lookup(d, ROOT, "one");
    let (_, entry) = lookup(d, dir.unwrap().nodeid, "only");
    entry.unwrap().nodeid
}

/// OPEN as one node's first request in no-open: ENOSYS, or the handle it answers.
fn open_errno(d: &Dispatcher<FuseAdapter>, node: u64) -> (i32, Option<abi::OpenOut>) {
    let open = abi::OpenIn {
        flags: libc::O_RDONLY as u32,
        open_flags: 0,
    };
    let (errno, body) = answer(d, &request(opcode::OPEN, 40, node, 0, open.as_bytes()));
    (errno, abi::OpenOut::read_from_bytes(&body).ok())
}

/// A kernel offering FUSE_NO_OPEN_SUPPORT is told ENOSYS at OPEN (and at FLUSH), after which it
/// opens and closes files without a round trip; reads then name no handle and get the file's
/// bytes by node. Under allow_root every open still comes to the daemon, which must refuse
/// other users there, and a kernel that did not offer it gets handles as before.
#[test]
fn no_open_offered_opens_and_closes_without_asking_and_reads_by_node() {
    let Some(f) = fixture(None) else { return };
    let d = &f.dispatcher;
    init(d, init_flags::INIT_EXT | init_flags::NO_OPEN_SUPPORT);
    let source = std::fs::read(f.built.src.join("one/only")).unwrap();
    let node = only_node(d);
    assert_eq!(open_errno(d, node).0, libc::ENOSYS, "OPEN");
    for offset in [0, 5] {
        let (errno, data) = answer(
            d,
            &request(opcode::READ, 41, node, 0, &read_in(0, offset, 1 << 20)),
        );
        assert_eq!(errno, 0);
        assert_eq!(data, source[offset as usize..], "read at {offset}");
    }
    let flush = abi::FlushIn {
        fh: 0,
        unused: 0,
        padding: 0,
        lock_owner: 0,
    };
    let (errno, _) = answer(d, &request(opcode::FLUSH, 42, node, 0, flush.as_bytes()));
    assert_eq!(errno, libc::ENOSYS, "FLUSH");
    assert_eq!(d.fs().fs().open_handles(), 0);
    // A handle that was never given is still refused.
    let (errno, _) = answer(
        d,
        &request(opcode::READ, 43, node, 0, &read_in(77, 0, 4096)),
    );
    assert_eq!(errno, libc::EBADF);

    let Some(owned) = fixture(Some(1000)) else {
        return;
    };
    init(
        &owned.dispatcher,
        init_flags::INIT_EXT | init_flags::NO_OPEN_SUPPORT,
    );
    let (errno, opened) = open_errno(&owned.dispatcher, only_node(&owned.dispatcher));
    assert_eq!(errno, 0, "allow_root: every open is asked");
    assert_ne!(opened.unwrap().fh, 0);

    let Some(old) = fixture(None) else { return };
    init(&old.dispatcher, init_flags::INIT_EXT);
    let (errno, opened) = open_errno(&old.dispatcher, only_node(&old.dispatcher));
    assert_eq!(errno, 0, "not offered: a handle");
    assert_ne!(opened.unwrap().fh, 0);
}
