//! Tests of the block cache.

use super::*;
use std::sync::atomic::AtomicUsize;
use std::sync::Barrier;

fn key(pos: u64) -> BlockKey {
    BlockKey { image: 1, pos }
}

fn block(len: usize) -> Arc<[u8]> {
    vec![7u8; len].into()
}

#[test]
fn loads_elsewhere_wait_for_a_load_in_flight_and_cache_nothing() {
    let cache = BlockCache::<Arc<[u8]>>::new(1 << 20, 64 * 1024);
    let loading = Barrier::new(2);
    std::thread::scope(|s| {
        let loader = s.spawn(|| {
            cache.get_or_load(key(1), None, || {
                loading.wait();
                std::thread::sleep(std::time::Duration::from_millis(50));
                Ok::<_, ()>(block(100))
            })
        });
        loading.wait();
        // Key 1 is being loaded: waited for, and the caller's load does not run.
        let found =
            cache.get_or_load_elsewhere(key(1), None, || Err::<((), u64), _>("loaded twice"));
        assert!(matches!(found, Ok(Cached::Held(ref b)) if b.len() == 100));
        assert!(loader.join().unwrap().is_ok());
    });
    // Two loads elsewhere of one key run side by side: neither waits for the other (the
    // first would time out waiting for the second's signal).
    let (signal, signalled) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let cache = &cache;
        let first = s.spawn(move || {
            cache.get_or_load_elsewhere(key(4), None, || {
                signalled
                    .recv_timeout(std::time::Duration::from_secs(10))
                    .map(|()| ((), 1))
                    .map_err(|_| "the second load waited for the first")
            })
        });
        // Started once the first has its load under way (or the second would not meet it).
        std::thread::sleep(std::time::Duration::from_millis(50));
        let second = cache.get_or_load_elsewhere(key(4), None, || {
            signal.send(()).map(|()| ((), 1)).map_err(|_| "first gone")
        });
        assert!(matches!(second, Ok(Cached::Elsewhere(()))));
        assert!(matches!(first.join().unwrap(), Ok(Cached::Elsewhere(()))));
    });
    // Not cached: the caller's load runs and nothing is kept; a cached key is lent.
    let found = cache.get_or_load_elsewhere(key(2), None, || Ok::<_, ()>((5u8, 300)));
    assert!(matches!(found, Ok(Cached::Elsewhere(5))));
    assert!(matches!(
        cache.get_or_load_elsewhere(key(1), None, || Err::<((), u64), _>(())),
        Ok(Cached::Held(_))
    ));
    let failed = cache.get_or_load_elsewhere(key(3), None, || Err::<((), u64), _>(()));
    assert!(failed.is_err());
    let s = cache.stats();
    assert_eq!((s.entries, s.loads, s.load_failures), (1, 4, 1), "{s:?}");
    assert_eq!((s.hits, s.waits, s.misses), (2, 1, 5), "{s:?}");
    assert_eq!(s.loaded_bytes, 100 + 1 + 1 + 300, "{s:?}");
}

#[test]
fn loads_unless_loading_leave_a_load_in_flight_to_its_loader() {
    let cache = BlockCache::<Arc<[u8]>>::new(1 << 20, 64 * 1024);
    let (loading, release) = (Barrier::new(2), Barrier::new(2));
    std::thread::scope(|s| {
        let loader = s.spawn(|| {
            cache.get_or_load(key(1), None, || {
                loading.wait();
                release.wait();
                Ok::<_, ()>(block(100))
            })
        });
        loading.wait();
        // Key 1 is being loaded: not waited for (the loader waits for this thread), and
        // the caller's load does not run.
        let found = cache.get_or_load_unless_loading(key(1), None, || Err("loaded twice"));
        assert!(matches!(found, Ok(None)));
        assert!(cache.is_loading(&key(1)));
        assert!(!cache.is_loading(&key(2)));
        release.wait();
        assert!(loader.join().unwrap().is_ok());
    });
    assert!(!cache.is_loading(&key(1)), "cached, not loading");
    // Cached now: lent. Not cached: loaded and kept.
    let found = cache.get_or_load_unless_loading(key(1), None, || Err("loaded twice"));
    assert!(matches!(found, Ok(Some(ref b)) if b.len() == 100));
    let found = cache.get_or_load_unless_loading(key(2), None, || Ok::<_, ()>(block(300)));
    assert!(matches!(found, Ok(Some(ref b)) if b.len() == 300));
    let s = cache.stats();
    assert_eq!(
        (s.entries, s.loads, s.hits, s.misses, s.waits),
        (2, 2, 1, 2, 0),
        "{s:?}"
    );
    // No budget: nothing is loaded ahead, since nothing could be kept.
    let off = BlockCache::<Arc<[u8]>>::new(0, 64 * 1024);
    let found = off.get_or_load_unless_loading(key(1), None, || Err("loaded uncached"));
    assert!(matches!(found, Ok(None)));
}

#[test]
fn evictions_are_loads_no_longer_held() {
    let cache = BlockCache::<Arc<[u8]>>::new(64 * 1024, 16 * 1024);
    for pos in 0..40 {
        cache
            .get_or_load(key(pos), None, || Ok::<_, ()>(block(8 * 1024)))
            .unwrap();
    }
    let s = cache.stats();
    assert_eq!(s.loads, 40);
    assert!(s.resident_bytes <= 64 * 1024, "{s:?}");
    assert!(s.entries < 40, "{s:?}");
    assert_eq!(s.evictions, 40 - s.entries);
    cache.clear();
    assert_eq!(
        cache.stats().evictions,
        40 - s.entries,
        "clear is not eviction"
    );
}

#[test]
fn a_reservation_takes_its_bytes_from_the_budget() {
    let cache = BlockCache::<Arc<[u8]>>::new(64 * 1024, 8 * 1024);
    let fill = |cache: &BlockCache<Arc<[u8]>>| {
        for pos in 0..40 {
            cache
                .get_or_load(key(pos), None, || Ok::<_, ()>(block(4 * 1024)))
                .unwrap();
        }
    };
    fill(&cache);
    cache.reserve(48 * 1024);
    let s = cache.stats();
    assert!(s.resident_bytes <= 64 * 1024, "{s:?}");
    assert!(s.entries <= 4, "{s:?}");
    fill(&cache);
    let s = cache.stats();
    assert!(s.resident_bytes <= 64 * 1024, "{s:?}");
    assert_eq!(cache.resident_bytes_of(1), s.resident_bytes - 48 * 1024);
    cache.release(48 * 1024);
    fill(&cache);
    let s = cache.stats();
    assert!(s.entries > 4 && s.resident_bytes <= 64 * 1024, "{s:?}");
    assert_eq!(cache.resident_bytes_of(1), s.resident_bytes);
    assert_eq!(cache.resident_bytes_of(2), 0);
}

#[test]
fn a_failed_load_caches_nothing() {
    let cache = BlockCache::<Arc<[u8]>>::new(1 << 20, 8192);
    assert!(cache
        .get_or_load(key(1), None, || Err("bad block"))
        .is_err());
    let v = cache
        .get_or_load(key(1), None, || Ok::<_, &str>(block(10)))
        .unwrap();
    assert_eq!(v.len(), 10);
    let s = cache.stats();
    assert_eq!((s.load_failures, s.loads, s.misses, s.hits), (1, 1, 2, 0));
}

#[test]
fn concurrent_misses_load_once_and_count_per_image() {
    let cache = BlockCache::<Arc<[u8]>>::new(1 << 20, 8192);
    let mine = CacheCounters::default();
    let runs = AtomicUsize::new(0);
    let start = Barrier::new(16);
    std::thread::scope(|s| {
        for _ in 0..16 {
            s.spawn(|| {
                start.wait();
                cache
                    .get_or_load(key(9), Some(&mine), || {
                        runs.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        Ok::<_, ()>(block(100))
                    })
                    .unwrap();
            });
        }
    });
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let total = cache.stats();
    let own = mine.snapshot(0, 0, 0);
    assert_eq!((total.loads, total.misses, total.hits), (1, 1, 15));
    assert_eq!((own.loads, own.misses, own.hits), (1, 1, 15));
}

#[test]
fn forgetting_an_image_drops_only_its_blocks() {
    let cache = BlockCache::<Arc<[u8]>>::new(1 << 20, 8192);
    for image in [1, 2] {
        for pos in 0..10 {
            let k = BlockKey { image, pos };
            cache
                .get_or_load(k, None, || Ok::<_, ()>(block(100)))
                .unwrap();
        }
    }
    cache.forget_image(1);
    let s = cache.stats();
    assert_eq!((s.entries, s.evictions), (10, 0), "{s:?}");
    assert!(cache.peek(&BlockKey { image: 2, pos: 3 }).is_some());
    assert!(cache.peek(&BlockKey { image: 1, pos: 3 }).is_none());
}

#[test]
fn zero_budget_loads_every_time() {
    let cache = BlockCache::<Arc<[u8]>>::new(0, 8192);
    for _ in 0..3 {
        cache
            .get_or_load(key(1), None, || Ok::<_, ()>(block(5)))
            .unwrap();
    }
    let s = cache.stats();
    assert_eq!((s.loads, s.misses, s.hits, s.entries), (3, 3, 0, 0));
}

/// A peek counts a hit but is not a use: a block only peeked at after its load leaves the
/// cache as blocks used once pass through, where a block used again stays (the kernel path's
/// fill reads peek, so that the rest of a block read at random does not make it hot).
#[test]
fn a_block_peeked_at_is_not_kept_as_one_used_again() {
    let cache = BlockCache::<Arc<[u8]>>::new(8 << 20, 4096);
    let load = || Ok::<_, ()>(block(4096));
    // A full cache first (quick_cache admits blocks as hot while it fills).
    for pos in 10_000..10_000 + 2 * (8 << 20) / 4096 {
        cache.get_or_load(key(pos), None, load).unwrap();
    }
    cache.get_or_load(key(1), None, load).unwrap();
    cache.get_or_load(key(2), None, load).unwrap();
    for _ in 0..3 {
        assert!(cache.peek_counted(&key(1), None).is_some());
        assert!(cache.get_or_load(key(2), None, || Err(())).is_ok());
    }
    assert_eq!(cache.stats().hits, 6);
    // Blocks used once each pass through.
    for pos in 100..100 + 4 * (8 << 20) / 4096 {
        cache.get_or_load(key(pos), None, load).unwrap();
    }
    assert!(
        cache.peek(&key(2)).is_some(),
        "the block used again was evicted"
    );
    assert!(
        cache.peek(&key(1)).is_none(),
        "the block peeked at was kept"
    );
}

/// Fills a one-shard cache of 64 KiB with 60 values of 1 KiB used twice (fragment blocks that
/// several files share), then loads 16 more that are not used yet (blocks read ahead, waiting
/// for their reader): how many of those 16 are still held.
fn values_read_ahead_still_held(waiting: u64) -> usize {
    let cache = BlockCache::<Arc<[u8]>>::with_waiting_room(64 << 10, 16 << 10, waiting);
    let load = |pos| cache.get_or_load(key(pos), None, || Ok::<_, ()>(block(1024)));
    for pos in 0..60 {
        load(pos).unwrap();
    }
    for pos in 0..60 {
        load(pos).unwrap();
    }
    for pos in 100..116 {
        load(pos).unwrap();
    }
    (100..116)
        .filter(|&pos| cache.peek(&key(pos)).is_some())
        .count()
}

#[test]
fn values_loaded_ahead_wait_in_the_room_kept_for_them() {
    // quick_cache's own ring (3% of the capacity, 2 KiB) evicts all but the last few before
    // they are used: a reader would load them again.
    assert!(values_read_ahead_still_held(0) <= 4);
    // With 24 KiB kept for them, values used before make room (the hot part shrinks).
    assert_eq!(values_read_ahead_still_held(24 << 10), 16);
}
