//! How many request threads of a transport may wait at once for requests of their own mount,
//! so that one is always left to answer those requests.
//!
//! A file system may cause requests of its own mount while it answers one: the kernel path's
//! blob file system asks EROFS to read a block ahead, and EROFS reads the blob (and its
//! metadata image) through the same FUSE connection, as background requests that can wait for
//! a slot, or as a read that waits for its answer. That is safe while another thread takes
//! those requests. On /dev/fuse any request thread takes any request, so the file system keeps
//! one of its threads free. Over the ring, a request goes to the queue of the CPU it was issued
//! on, and only the threads holding entries of that queue answer it: [`with_own_mount_waits`]
//! says how many of those may wait. While a mount is idle, one thread holds an entry of every
//! queue and no other thread does: it may not wait at all (a hang seen with fio's random
//! reads on the kernel path, when it did).

use std::cell::Cell;

thread_local! {
    static LIMIT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Runs `f` (the dispatch of one request) with at most `limit` request threads of its
/// transport waiting at once for requests of their own mount ([`own_mount_waits`]); 0 for a
/// thread whose wait would leave requests unanswered.
pub fn with_own_mount_waits<R>(limit: usize, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<usize>);
    impl Drop for Restore {
        fn drop(&mut self) {
            LIMIT.set(self.0);
        }
    }
    let _restore = Restore(LIMIT.replace(Some(limit)));
    f()
}

/// How many request threads may wait at once for requests of their own mount, as the
/// transport dispatching on this thread says ([`with_own_mount_waits`]); `None` where it sets
/// no limit (/dev/fuse: the file system keeps one of its own threads free).
pub fn own_mount_waits() -> Option<usize> {
    LIMIT.get()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_holds_only_inside_and_nests() {
        assert_eq!(own_mount_waits(), None);
        with_own_mount_waits(2, || {
            assert_eq!(own_mount_waits(), Some(2));
            with_own_mount_waits(0, || assert_eq!(own_mount_waits(), Some(0)));
            assert_eq!(own_mount_waits(), Some(2));
        });
        assert_eq!(own_mount_waits(), None);
        let other = std::thread::spawn(|| with_own_mount_waits(0, own_mount_waits));
        assert_eq!(other.join().unwrap(), Some(0));
        assert_eq!(own_mount_waits(), None);
    }
}
