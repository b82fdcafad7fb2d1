//! A transport owned by its own handler: squashd's file system keeps the session's ring state
//! (for `status`), and the ring's handler keeps the file system, so the last reference to the
//! transport can go away on one of the transport's own queue threads, as that thread ends after
//! an unmount. Dropping it there must stop the other threads and return, not try to join the
//! thread it runs on (which panicked: "failed to join thread: Resource deadlock avoided", seen
//! at every `squashd serve` shutdown with rings). Needs root and the enable_uring parameter.

mod common;

use std::os::fd::AsFd as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::testfs::{TestFs, SMALL_CONTENT};
use common::{skip_reason, EnableUring, TestMount};
use nix::mount::MntFlags;
use squashd_fuse_uring::{Handler, ReplyWriter, Request, Transport};

/// The test file system, holding the transport that serves it; when it is dropped (on whichever
/// thread lets go of it last), it drops the transport and then says so.
struct OwningHandler {
    fs: Arc<TestFs>,
    transport: Mutex<Option<Transport>>,
    transport_dropped: Arc<AtomicBool>,
}

impl Handler for OwningHandler {
    fn handle(&self, request: &Request<'_>, reply: &mut dyn ReplyWriter) {
        self.fs.handle(request, reply);
    }
}

impl Drop for OwningHandler {
    fn drop(&mut self) {
        let transport = self
            .transport
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        // A panic in here (joining the current thread) never reaches the store below.
        drop(transport);
        self.transport_dropped.store(true, Ordering::SeqCst);
    }
}

fn transport_dropped_by_its_own_queue_thread(config: squashd_fuse_uring::UringConfig) {
    let _uring = EnableUring::on();
    let mut mount = TestMount::mount(true, 1);
    let transport_dropped = Arc::new(AtomicBool::new(false));
    let handler = Arc::new(OwningHandler {
        fs: Arc::clone(&mount.fs),
        transport: Mutex::new(None),
        transport_dropped: Arc::clone(&transport_dropped),
    });
    let transport = Transport::start(mount.dev.as_fd(), &config, Arc::clone(&handler))
        .expect("start the ring transport");
    for _ in 0..8 {
        assert_eq!(
            std::fs::read(mount.path().join("small")).expect("read /small"),
            SMALL_CONTENT
        );
    }
    assert!(
        transport.stats().requests() > 0,
        "the ring carried the reads"
    );
    *handler.transport.lock().expect("slot") = Some(transport);
    // From here only the queue threads hold the handler, and so the transport.
    drop(handler);
    mount.unmount(MntFlags::empty());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !transport_dropped.load(Ordering::SeqCst) {
        assert!(
            Instant::now() < deadline,
            "the transport's drop on its own queue thread never returned"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(mount.readers_end_within(Duration::from_secs(10)));
}

#[test]
fn a_transport_dropped_on_its_own_queue_thread_stops_and_returns() {
    if let Some(reason) = skip_reason() {
        println!("SKIPPED: {reason}");
        return;
    }
    // One thread per CPU from the start, and an idle start that grew its per-CPU threads
    // (after 4 answers): either way the last thread to end drops the transport.
    transport_dropped_by_its_own_queue_thread(TestMount::config(1));
    transport_dropped_by_its_own_queue_thread(TestMount::config(1).idle_start(4));
}
