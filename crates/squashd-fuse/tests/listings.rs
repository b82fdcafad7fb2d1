//! What a listing request gets once the kernel has cached the listing, in-process: the kernel
//! caches a directory's entries from position 0 on and serves listings from that cache only
//! after an answer with no entries (the end) came; a request that reaches squashd after that
//! was on its way before, and gets one entry (its next `getdents` reads the rest from the
//! cache). A second opener's READDIRPLUS from 0 while the first one's fill is under way gets
//! entries the kernel does not link (the first answer links them). Images are made by the
//! real mksquashfs from the testkit fixture tree.

use fuser::{FileHandle, INodeNo};
use squashd_core::{Image, OpenOptions};
use squashd_fuse::fs::{
    DirectoryEntry, DirectoryEntryPlus, DirectoryPlusReplier, DirectoryReplier,
};
use squashd_fuse::{MountConfig, SquashFs};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use testkit::{Built, TreeOptions};

/// The size of a readdir buffer the kernel sends: one page.
const PAGE: usize = 4096;
const ROOT: INodeNo = INodeNo(1);
const NO_HANDLE: FileHandle = FileHandle(0);

/// Entries of one readdir answer: (name, offset of the next), up to `PAGE` bytes as the kernel
/// counts them (a 24-byte `fuse_dirent` and the name, padded to 8 bytes).
#[derive(Default)]
struct Answer {
    used: usize,
    entries: Vec<(Vec<u8>, u64)>,
    /// READDIRPLUS entries the kernel would not link.
    unlinked: usize,
}

impl Answer {
    fn take(&mut self, name: &OsStr, offset: u64, fixed: usize) -> bool {
        let len = (fixed + name.len()).next_multiple_of(8);
        if self.used + len > PAGE {
            return true;
        }
        self.used += len;
        self.entries.push((name.as_bytes().to_vec(), offset));
        false
    }

    fn names(&self) -> Vec<&[u8]> {
        self.entries.iter().map(|(n, _)| &n[..]).collect()
    }
}

impl DirectoryReplier for Answer {
    fn add(&mut self, e: DirectoryEntry<'_>) -> bool {
        self.take(e.name, e.offset, 24)
    }
}

impl DirectoryPlusReplier for Answer {
    fn add(&mut self, e: DirectoryEntryPlus<'_>) -> bool {
        let full = self.take(e.name, e.offset, 152);
        if !full && !e.link {
            self.unlinked += 1;
        }
        full
    }
}

fn readdir(fs: &SquashFs, node: INodeNo, offset: u64) -> Answer {
    let mut answer = Answer::default();
    drop(fs.readdir(node, NO_HANDLE, offset, &mut answer).unwrap());
    answer
}

fn readdirplus(fs: &SquashFs, node: INodeNo, offset: u64) -> Answer {
    let mut answer = Answer::default();
    drop(
        fs.readdirplus(node, NO_HANDLE, offset, &mut answer)
            .unwrap(),
    );
    answer
}

/// Lists `node` from 0 to its end, as one opener does while the cache fills: every answer
/// full, the last one empty (which completes the kernel's cache). Returns the names.
fn list_to_the_end(fs: &SquashFs, node: INodeNo) -> Vec<Vec<u8>> {
    let mut names = Vec::new();
    let mut offset = 0;
    loop {
        let answer = readdir(fs, node, offset);
        let Some((_, next)) = answer.entries.last() else {
            return names;
        };
        offset = *next;
        names.extend(answer.entries.into_iter().map(|(n, _)| n));
    }
}

#[test]
fn duplicates_of_a_fill_are_unlinked_and_once_its_end_was_answered_they_get_one_entry() {
    if !testkit::have_squashfs_tools() {
        println!("SKIPPED: mksquashfs not installed");
        return;
    }
    let built = Built::new(&TreeOptions {
        many_entries: 1000,
        ..TreeOptions::default()
    });
    let image = Image::open(
        built.image("gzip", &["-comp", "gzip"]),
        &OpenOptions::default(),
    )
    .unwrap();
    let fs = SquashFs::new(image, &MountConfig::default()).unwrap();
    fs.set_no_opendir(true);
    let big = fs.lookup(ROOT, OsStr::new("big")).unwrap().attr.ino;
    let probe = fs.probe();

    // While the first opener's fill is under way, a second opener from 0 gets a full answer:
    // the kernel has nothing to give it yet.
    let first = readdirplus(&fs, big, 0);
    assert!(first.entries.len() > 10, "{}", first.entries.len());
    assert_eq!(first.unlinked, 0, "the first opener's entries are linked");
    // Its answer links every entry: the second's gives names, nodes and types only.
    let second = readdirplus(&fs, big, 0);
    assert_eq!(second.names(), first.names());
    assert_eq!(second.unlinked, first.entries.len() - 2);
    assert_eq!(probe.unlinked_listings(), 1);
    let first = readdir(&fs, big, 0);
    assert_eq!(readdir(&fs, big, 0).names(), first.names());
    let whole = list_to_the_end(&fs, big);
    assert_eq!(whole.len(), 1002);
    assert_eq!(probe.short_listings(), 0);

    // The end was answered: the kernel has the whole listing. A request from 0 that comes
    // now was on its way before; it gets "." and finds the rest in the cache ...
    let listings = probe.listings();
    let short = readdirplus(&fs, big, 0);
    assert_eq!(short.entries, vec![(b".".to_vec(), 1)]);
    let short = readdir(&fs, big, 0);
    assert_eq!(short.entries, vec![(b".".to_vec(), 1)]);
    // ... or, if its next getdents too came before the cache was complete, "..".
    let short = readdir(&fs, big, 1);
    assert_eq!(short.entries, vec![(b"..".to_vec(), 2)]);
    assert_eq!(probe.short_listings(), 3);
    assert_eq!(probe.listings(), listings + 3);

    // A request further inside the listing means the kernel no longer has it (dropped from
    // its cache): that answer and the next from 0 are full, and the entries are the same.
    let inside = readdir(&fs, big, 2);
    let from_two: Vec<&[u8]> = whole[2..inside.entries.len() + 2]
        .iter()
        .map(|n| &n[..])
        .collect();
    assert_eq!(inside.names(), from_two);
    assert_eq!(readdir(&fs, big, 0).names(), first.names());
    assert_eq!(list_to_the_end(&fs, big), whole);
    assert_eq!(probe.short_listings(), 3);
    // That fill's end was answered again: short answers again.
    assert_eq!(readdir(&fs, big, 0).entries.len(), 1);
}
