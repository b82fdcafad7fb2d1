//! The block fill over FUSE over io_uring: while a blob mount is idle one thread answers every
//! CPU's ring queue, and a fill it asked for would make EROFS send blob reads only that thread
//! could answer (a hang seen with fio's random reads). So no fill is asked for until the per-CPU
//! threads have started beside it.

use super::*;

const BLOCK: usize = 128 << 10;

#[test]
fn a_ring_answered_by_one_thread_asks_for_no_fill() {
    if !testkit::can_mount_erofs() {
        return;
    }
    if let Some(why) = testkit::uring::ring_unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let _ring = testkit::uring::RingOn::take().expect("turn enable_uring on");
    let dir = tempfile::tempdir().unwrap();
    let mut rng = fastrand::Rng::with_seed(23);
    let data: Vec<u8> = (0..512 * BLOCK).map(|_| b"acgt"[rng.usize(..4)]).collect();
    let read_ahead = KernelMountOptions::default().read_ahead;
    let m = data_mount_with(dir.path(), &data, read_ahead, 2, None, UringMode::On);
    let ring = || m.blobs.transport().info();
    assert!(
        ring().uring,
        "the blob mount is not on the ring: {:?}",
        ring()
    );
    m.blob
        .block_fill()
        .attach(&m.mnt, &m.blobs.path("data.meta"));
    let file = fs::File::open(m.mnt.join("big")).unwrap();
    rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::Random).unwrap();
    let mut read_random_page = || {
        let at = rng.usize(..data.len() / 4096) * 4096;
        let mut buf = vec![0u8; 4096];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut buf, at as u64).unwrap();
        assert!(buf == data[at..at + 4096], "the page at {at} differs");
    };

    // Idle: every request so far went to the idle start's thread.
    for _ in 0..32 {
        read_random_page();
    }
    let idle = ring();
    assert_eq!(
        idle.ring_idle_thread_requests, idle.ring_requests,
        "the per-CPU threads started early: {idle:?}"
    );
    assert_eq!(
        m.blob.block_fill().stats().fills,
        0,
        "the idle start's thread asked for a fill ({idle:?})"
    );

    // Busy: past the idle start, the per-CPU threads stand by, and reads fill their blocks.
    for _ in 0..1000 {
        read_random_page();
        if m.blob.block_fill().stats().fills > 0 {
            break;
        }
    }
    let busy = ring();
    assert!(
        busy.ring_entries > idle.ring_entries,
        "the per-CPU threads did not start: {busy:?}"
    );
    assert!(
        m.blob.block_fill().stats().fills > 0,
        "no fill once the per-CPU threads started: {busy:?}"
    );
}
