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
    with_listing_waits, DirectoryEntry, DirectoryEntryPlus, DirectoryPlusReplier, DirectoryReplier,
};
use squashd_fuse::{ListingAttrs, MountConfig, SquashFs};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, Instant};
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
    let Some((fs, big)) = big_directory() else {
        return;
    };
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

/// A file system with no opendir over an image whose root has `big` (1,000 entries), and
/// `big`'s node; `None` (printed SKIPPED) without mksquashfs.
fn big_directory() -> Option<(SquashFs, INodeNo)> {
    if !testkit::have_squashfs_tools() {
        println!("SKIPPED: mksquashfs not installed");
        return None;
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
    // Every entry linked, as a walk that stats them gets: which opener links is the subject
    // here (the bare entries of a walk that does not stat are `answers.rs`'s).
    let config = MountConfig {
        listing_attrs: ListingAttrs::All,
        ..MountConfig::default()
    };
    let fs = SquashFs::new(image, &config).unwrap();
    fs.set_no_opendir(true);
    let big = fs.lookup(ROOT, OsStr::new("big")).unwrap().attr.ino;
    Some((fs, big))
}

/// Waits (up to 10 s) until `count` says `n`.
fn wait_for(what: &str, n: u64, count: impl Fn() -> u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while count() < n {
        assert!(Instant::now() < deadline, "{what}: {} of {n}", count());
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_duplicate_allowed_to_wait_waits_for_the_fill_to_end_and_gets_one_entry() {
    let Some((fs, big)) = big_directory() else {
        return;
    };
    let probe = fs.probe();
    // The first opener's fill is under way: its first page is answered.
    let first = readdirplus(&fs, big, 0);
    assert!(first.entries.len() > 10, "{}", first.entries.len());
    std::thread::scope(|s| {
        // Two more openers from 0, on a transport queue that lets one wait at a time.
        let waiting = [0, 1].map(|_| {
            s.spawn(|| {
                with_listing_waits(0, 1, Duration::from_secs(30), || readdirplus(&fs, big, 0))
            })
        });
        // One waits; the other is answered in full at once (no entries linked twice).
        wait_for("listings waiting", 1, || probe.waited_listings());
        wait_for("listing requests answered", 2, || probe.listings());
        assert_eq!(probe.waited_listings(), 1);
        assert_eq!(probe.unlinked_listings(), 1);
        assert_eq!(probe.short_listings(), 0);
        // The first opener reads on to the end, which completes the kernel's cache: the one
        // that waited is answered then, with ".", and reads the rest from that cache.
        let mut offset = first.entries.last().unwrap().1;
        loop {
            let answer = readdir(&fs, big, offset);
            let Some((_, next)) = answer.entries.last() else {
                break;
            };
            offset = *next;
        }
        let answers: Vec<Answer> = waiting.map(|t| t.join().unwrap()).into();
        let short: Vec<_> = answers.iter().filter(|a| a.entries.len() == 1).collect();
        assert_eq!(short.len(), 1, "one waited and got one entry");
        assert_eq!(short[0].entries, vec![(b".".to_vec(), 1)]);
        assert!(answers.iter().any(|a| a.names() == first.names()));
    });
    assert_eq!(probe.short_listings(), 1);
    assert_eq!(probe.waited_listings(), 1);
}

#[test]
fn a_request_waits_for_a_fill_that_never_ends_only_until_its_timeout() {
    let Some((fs, big)) = big_directory() else {
        return;
    };
    let probe = fs.probe();
    let first = readdirplus(&fs, big, 0);
    // Nobody reads on: the duplicate waits out its 50 ms, then gets the full answer.
    let started = Instant::now();
    let timeout = Duration::from_millis(50);
    let second = with_listing_waits(3, 2, timeout, || readdirplus(&fs, big, 0));
    assert!(started.elapsed() >= timeout, "{:?}", started.elapsed());
    assert_eq!(second.names(), first.names());
    assert_eq!(probe.waited_listings(), 1);
    // Without a transport's allowance (the /dev/fuse readers), nothing waits.
    let started = Instant::now();
    assert_eq!(readdirplus(&fs, big, 0).names(), first.names());
    assert!(started.elapsed() < timeout, "{:?}", started.elapsed());
    assert_eq!(probe.waited_listings(), 1);
    // A request from 0 once the end is answered does not wait either: it gets "." at once.
    assert_eq!(list_to_the_end(&fs, big).len(), 1002);
    let short = with_listing_waits(3, 2, timeout, || readdir(&fs, big, 0));
    assert_eq!(short.entries, vec![(b".".to_vec(), 1)]);
    assert_eq!(probe.waited_listings(), 1);
}
