//! The ring transport on a real FUSE mount: requests go over io_uring, replies come back right,
//! every queue is used, unmount ends the queues, and the failure paths end cleanly. Needs root
//! and a kernel with /sys/module/fuse/parameters/enable_uring (turned on for the test and
//! restored after); skipped with a printed reason otherwise.

mod common;

use std::fs::File;
use std::io::{self, Read as _};
use std::os::unix::fs::FileExt as _;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::testfs::{big_byte, BIG_SIZE, SLOW_READ, SMALL_CONTENT};
use common::{cpus, on_cpu, skip_reason, EnableUring, TestMount};
use nix::mount::MntFlags;
use squashd_fuse_uring::{
    ring_memory, KernelSupport, Transport, TransportEnd, UringConfig, UringError,
    ENABLE_URING_PARAMETER,
};

const BOUND: Duration = Duration::from_secs(10);

/// Shuts `transport` down on another thread and waits at most [`BOUND`] for it: a shutdown
/// that hangs fails the test instead of hanging it.
fn shutdown_within_bound(transport: Transport) -> TransportEnd {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || done_tx.send(transport.shutdown()));
    done_rx
        .recv_timeout(BOUND)
        .expect("shutdown returns while mounted")
}

macro_rules! skip_unless_possible {
    () => {
        if let Some(reason) = skip_reason() {
            println!("SKIPPED: {reason}");
            return;
        }
    };
}

fn check_big(bytes: &[u8], offset: u64) {
    for (i, &byte) in bytes.iter().enumerate() {
        let at = offset + i as u64;
        assert_eq!(byte, big_byte(at), "byte {at} of /big");
    }
}

/// A mount served over the ring (two entries per CPU's queue, a thread each) with /slow's READ
/// held in its handler, and the thread reading it (on `cpu`, if given).
fn ring_mount_with_a_slow_read(cpu: Option<usize>) -> (TestMount, JoinHandle<io::Result<usize>>) {
    ring_mount_with_a_slow_read_with(&TestMount::config(2), cpu)
}

/// [`ring_mount_with_a_slow_read`] with `config`.
fn ring_mount_with_a_slow_read_with(
    config: &UringConfig,
    cpu: Option<usize>,
) -> (TestMount, JoinHandle<io::Result<usize>>) {
    let mut mount = TestMount::mount(true, 1);
    mount.start_ring(config).expect("start the ring transport");
    let slow = mount.path().join("slow");
    let read = move || File::open(slow).and_then(|mut f| f.read(&mut [0u8; 16]));
    let reader = match cpu {
        Some(cpu) => on_cpu(cpu, read),
        None => std::thread::spawn(read),
    };
    wait_for_slow_read(&mount);
    (mount, reader)
}

/// Waits until /slow's READ has reached the handler (it is held there for SLOW_READ).
fn wait_for_slow_read(mount: &TestMount) {
    let deadline = Instant::now() + BOUND;
    while !mount.fs.slow_started.load(Ordering::SeqCst) {
        assert!(
            Instant::now() < deadline,
            "the slow READ never reached the handler"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn requests_go_over_the_ring_and_come_back_right() {
    skip_unless_possible!();
    let _uring = EnableUring::on();
    let mut mount = TestMount::mount(true, 1);
    assert!(
        mount.init.offered_uring,
        "INIT offers FUSE_OVER_IO_URING with enable_uring on"
    );
    mount
        .start_ring(&TestMount::config(2))
        .expect("start the ring transport");
    let root = mount.path();

    // A listing, a stat and small reads, from other processes.
    let ls = std::process::Command::new("ls")
        .arg(&root)
        .output()
        .expect("run ls");
    assert_eq!(
        String::from_utf8_lossy(&ls.stdout),
        "big\noversized\nslow\nsmall\n"
    );
    let stat = std::process::Command::new("stat")
        .args(["-c", "%s %F"])
        .arg(root.join("big"))
        .output()
        .expect("run stat");
    assert_eq!(
        String::from_utf8_lossy(&stat.stdout).trim(),
        format!("{BIG_SIZE} regular file")
    );
    let cat = std::process::Command::new("cat")
        .arg(root.join("small"))
        .output()
        .expect("run cat");
    assert_eq!(cat.stdout, SMALL_CONTENT);
    let statfs = nix::sys::statvfs::statvfs(&root).expect("statfs");
    assert_eq!((statfs.blocks(), statfs.block_size()), (300, 4096));

    // /big from one thread per CPU at once, so that every queue serves reads: the whole file
    // (reads of 128 KiB: more than a page), then ranges that cross pages at odd offsets.
    let readers: Vec<_> = (0..cpus())
        .map(|cpu| {
            let path = root.join("big");
            on_cpu(cpu, move || {
                for _ in 0..3 {
                    let mut whole = Vec::new();
                    File::open(&path)
                        .and_then(|mut f| f.read_to_end(&mut whole))
                        .expect("read /big");
                    assert_eq!(whole.len() as u64, BIG_SIZE);
                    check_big(&whole, 0);
                    let file = File::open(&path).expect("open /big");
                    let mut range = vec![0u8; 100_000];
                    let offset = 12_345 + cpu as u64 * 4099;
                    file.read_exact_at(&mut range, offset).expect("pread /big");
                    check_big(&range, offset);
                }
            })
        })
        .collect();
    for reader in readers {
        reader.join().expect("a reader thread");
    }

    // A reply larger than the payload buffer is refused: the read fails with EIO, the mount
    // goes on serving.
    let oversized = File::open(root.join("oversized")).and_then(|mut f| f.read(&mut [0u8; 4096]));
    assert_eq!(
        oversized.map_err(|e| e.raw_os_error()),
        Err(Some(libc::EIO))
    );
    assert_eq!(
        std::fs::read(root.join("small")).expect("read /small"),
        SMALL_CONTENT
    );

    let transport = mount.transport.as_ref().expect("transport");
    let stats = transport.stats();
    println!(
        "ring stats: {stats:?}; ring memory {} bytes",
        ring_memory(transport.config())
    );
    assert_eq!(stats.refused_replies, 1);
    assert_eq!(stats.malformed_requests, 0);
    assert!(
        stats.requests() >= 20,
        "requests went over the ring: {stats:?}"
    );
    assert!(
        stats.requests_per_queue.iter().all(|&n| n > 0),
        "every queue served: {stats:?}"
    );
    // The file system counts a request as it starts answering it and the transport once it
    // has answered: a request the kernel sent on its own (a release, a getattr) may be between
    // the two when they are read. Once it is answered, the two agree.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while transport.stats().requests() != mount.fs.ring_requests.load(Ordering::Relaxed)
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(
        transport.stats().requests(),
        mount.fs.ring_requests.load(Ordering::Relaxed)
    );
    assert_eq!(
        mount.dev_reads.load(Ordering::Relaxed),
        0,
        "no request but FORGET on /dev/fuse"
    );
    assert!(
        mount.fs.max_ring_read.load(Ordering::Relaxed) > 4096,
        "a READ larger than a page"
    );

    // Unmounting ends every entry (ENOTCONN) and so the queue threads, and /dev/fuse's reader.
    mount.unmount(MntFlags::empty());
    let transport = mount.transport.take().expect("transport");
    assert!(
        transport.wait_finished(BOUND),
        "the queue threads end after unmount"
    );
    assert!(
        mount.readers_end_within(BOUND),
        "the /dev/fuse reader ends after unmount"
    );
    let end = transport.shutdown();
    assert_eq!(
        end.leaked_bytes, 0,
        "every buffer came back from the kernel: {end:?}"
    );
    assert!(end.errors.is_empty(), "{end:?}");
}

#[test]
fn a_payload_buffer_smaller_than_a_request_is_refused_and_dev_fuse_serves() {
    skip_unless_possible!();
    let _uring = EnableUring::on();
    let mut mount = TestMount::mount(true, 1);
    // The connection's requests can be 32 pages; an 8 KiB payload buffer cannot hold them.
    let config = UringConfig {
        payload_size: 8192,
        ..TestMount::config(1)
    };
    match mount.start_ring(&config) {
        Err(UringError::Register { source, .. }) => {
            assert_eq!(source.raw_os_error(), Some(libc::EINVAL), "{source}")
        }
        other => panic!("expected the kernel to refuse the entries, got {other:?}"),
    }
    // The kernel falls back to /dev/fuse for this connection.
    assert_eq!(
        std::fs::read(mount.path().join("small")).expect("read /small"),
        SMALL_CONTENT
    );
    assert!(mount.dev_reads.load(Ordering::Relaxed) > 0);
    assert_eq!(mount.fs.ring_requests.load(Ordering::Relaxed), 0);
}

#[test]
fn unmount_with_a_request_in_flight_does_not_hang() {
    skip_unless_possible!();
    let _uring = EnableUring::on();
    let (mut mount, reader) = ring_mount_with_a_slow_read(None);
    // Abort and detach while the handler still holds the request.
    let started = Instant::now();
    mount.unmount(MntFlags::MNT_FORCE | MntFlags::MNT_DETACH);
    let transport = mount.transport.take().expect("transport");
    assert!(
        transport.wait_finished(BOUND),
        "the queue threads end after the abort"
    );
    let read = reader.join().expect("reader thread");
    assert!(read.is_err(), "the aborted read fails: {read:?}");
    assert!(mount.readers_end_within(BOUND));
    let end = transport.shutdown();
    assert_eq!(end.leaked_bytes, 0, "{end:?}");
    assert!(end.errors.is_empty(), "{end:?}");
    println!("ended {:?} after the abort", started.elapsed());
}

/// Over a ring made with `config` (two entries on CPU 0's queue), reads /small on CPU 0 while
/// /slow's READ, also from CPU 0, is held in its handler: how long the small read took, and
/// whether the slow one had ended by then. Both reads must come back right, and the transport
/// must end cleanly at unmount.
fn small_read_beside_a_slow_one(config: &UringConfig) -> (Duration, bool) {
    let (mut mount, slow_reader) = ring_mount_with_a_slow_read_with(config, Some(0));
    let small = mount.path().join("small");
    let started = Instant::now();
    let small_read = on_cpu(0, move || std::fs::read(small).expect("read /small"));
    assert_eq!(small_read.join().expect("small reader"), SMALL_CONTENT);
    let waited = started.elapsed();
    let slow_ended_first = slow_reader.is_finished();
    assert_eq!(
        slow_reader.join().expect("slow reader").expect("slow read"),
        16
    );
    mount.unmount(MntFlags::empty());
    let transport = mount.transport.take().expect("transport");
    assert!(transport.wait_finished(BOUND), "every queue thread ends");
    let end = transport.shutdown();
    assert!(end.errors.is_empty(), "{end:?}");
    (waited, slow_ended_first)
}

#[test]
fn a_slow_request_holds_only_its_own_entry_of_a_cpus_queue() {
    skip_unless_possible!();
    let _uring = EnableUring::on();
    // Both requests are issued on CPU 0, so both go to its queue, of two entries.
    let (waited, slow_ended_first) = small_read_beside_a_slow_one(&TestMount::config(2));
    // Answered while the slow READ (SLOW_READ long) still held the other entry: with one
    // thread serving both entries, it waited for the slow one to be answered first.
    assert!(
        !slow_ended_first && waited < SLOW_READ / 2,
        "the small read waited {waited:?} behind the slow one"
    );
}

/// The names of this process's threads.
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .expect("list this process's threads")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_string())
        .collect()
}

#[test]
fn one_thread_per_cpu_holds_all_of_its_queues_entries() {
    skip_unless_possible!();
    let _uring = EnableUring::on();
    // Queue threads of the tests before (a transport dropped with its mount) end by themselves.
    let deadline = Instant::now() + BOUND;
    while thread_names().iter().any(|n| n.starts_with("fuse-uring")) {
        assert!(Instant::now() < deadline, "{:?}", thread_names());
        std::thread::sleep(Duration::from_millis(20));
    }
    let depth = 4;
    let config = TestMount::config(depth).one_thread_per_cpu();
    let (mount, ring) = TestMount::mount_with_ring(&config, 1);
    ring.expect("prepare and register the ring transport");
    let transport = mount.transport.as_ref().expect("transport");
    assert_eq!(transport.stats().entries, cpus() * depth as usize);
    // One queue thread per CPU (`fuse-uring-N`), and none of a thread per entry (`.K`).
    let names = thread_names();
    for cpu in 0..cpus() {
        assert_eq!(threads_named(&format!("fuse-uring-{cpu}")), 1, "{names:?}");
    }
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("fuse-uring-") && n.contains('.')),
        "{names:?}"
    );

    // More readers on each CPU than its queue has entries: every read comes back right.
    let readers: Vec<_> = (0..cpus() * 2 * depth as usize)
        .map(|k| {
            let path = mount.path().join("big");
            on_cpu(k % cpus(), move || {
                let mut whole = Vec::new();
                File::open(&path)
                    .and_then(|mut f| f.read_to_end(&mut whole))
                    .expect("read /big");
                whole
            })
        })
        .collect();
    for reader in readers {
        let whole = reader.join().expect("reader");
        assert_eq!(whole.len() as u64, BIG_SIZE);
        check_big(&whole, 0);
    }
    let stats = transport.stats();
    assert!(stats.requests() > 0, "{stats:?}");
    mount.unmount_ring();
}

#[test]
fn one_thread_per_cpu_answers_its_queues_requests_in_turn() {
    skip_unless_possible!();
    let _uring = EnableUring::on();
    // The trade: with one thread holding every entry of CPU 0's queue, a request of that CPU
    // waits for the one the thread is answering (why a file system whose answers may wait
    // keeps a thread per entry: `a_slow_request_holds_only_its_own_entry_of_a_cpus_queue`).
    let config = TestMount::config(2).one_thread_per_cpu();
    let (waited, slow_ended_first) = small_read_beside_a_slow_one(&config);
    assert!(
        slow_ended_first && waited >= SLOW_READ / 2,
        "the small read was answered in {waited:?}, beside the slow one"
    );
}

#[test]
fn shutdown_while_mounted_stops_the_queues() {
    skip_unless_possible!();
    let _uring = EnableUring::on();
    let config = TestMount::config(1);
    let (mut mount, ring) = TestMount::mount_with_ring(&config, 1);
    ring.expect("prepare and register the ring transport");
    assert_eq!(
        std::fs::read(mount.path().join("small")).expect("read /small"),
        SMALL_CONTENT
    );
    let transport = mount.transport.take().expect("transport");
    let end = shutdown_within_bound(transport);
    // The kernel keeps the entries' addresses until the connection ends: their buffers stay.
    assert_eq!(
        end.leaked_bytes,
        cpus() * (config.payload_size + squashd_fuse_uring::RING_HEADER_SIZE)
    );
    assert!(end.errors.is_empty(), "{end:?}");
    // Dropping the mount aborts the connection; nothing hangs.
}

#[test]
fn detection_follows_the_parameter_and_a_kernel_without_it_refuses_the_ring() {
    skip_unless_possible!();
    let _uring = EnableUring::on();
    assert_eq!(KernelSupport::probe(), KernelSupport::Enabled);
    assert_eq!(KernelSupport::Enabled.refusal(), None);
    // Off (the guard restores the machine's value afterwards).
    std::fs::write(ENABLE_URING_PARAMETER, "0").expect("turn enable_uring off");
    assert_eq!(KernelSupport::probe(), KernelSupport::Disabled);
    let refusal = KernelSupport::probe().refusal().expect("refused when off");
    assert!(refusal.contains("fuse.enable_uring=1"), "{refusal}");
    assert!(
        refusal.contains("echo 1 > /sys/module/fuse/parameters/enable_uring"),
        "{refusal}"
    );

    let mut mount = TestMount::mount(true, 1);
    assert!(
        !mount.init.offered_uring,
        "no FUSE_OVER_IO_URING in INIT with enable_uring off"
    );
    match mount.start_ring(&TestMount::config(1)) {
        Err(UringError::Register { source, .. }) => {
            assert_eq!(source.raw_os_error(), Some(libc::EOPNOTSUPP), "{source}")
        }
        other => panic!("expected the kernel to refuse the ring, got {other:?}"),
    }
    assert_eq!(
        std::fs::read(mount.path().join("small")).expect("read /small"),
        SMALL_CONTENT
    );
    assert!(mount.dev_reads.load(Ordering::Relaxed) > 0);

    // A config for another number of CPUs is refused before anything reaches the kernel: the
    // kernel would never use a ring with a queue missing.
    let config = UringConfig {
        cpus: cpus() + 1,
        ..TestMount::config(1)
    };
    match mount.start_ring(&config) {
        Err(UringError::Config(message)) => assert!(message.contains("possible CPU"), "{message}"),
        other => panic!("expected a config error, got {other:?}"),
    }
}

#[test]
fn the_parameter_is_restored_when_a_test_panics() {
    skip_unless_possible!();
    let machine = common::lock_machine();
    let before = std::fs::read_to_string(ENABLE_URING_PARAMETER).expect("read enable_uring");
    let outcome = std::panic::catch_unwind(|| {
        let _uring = EnableUring::on_while_locked();
        assert_eq!(KernelSupport::probe(), KernelSupport::Enabled);
        panic!("a failing test");
    });
    assert!(outcome.is_err());
    let after = std::fs::read_to_string(ENABLE_URING_PARAMETER).expect("read enable_uring");
    assert_eq!(after, before);
    drop(machine);
}

#[test]
fn a_transport_that_cannot_be_prepared_leaves_the_mount_on_dev_fuse() {
    skip_unless_possible!();
    let _uring = EnableUring::on();
    // A config the transport refuses before anything reaches the kernel (as io_uring_setup
    // refused by a seccomp profile would be): the INIT reply then does not accept the ring,
    // and the mount works over /dev/fuse instead of waiting for a ring that never comes.
    let config = UringConfig {
        queue_depth: 0,
        ..TestMount::config(1)
    };
    let (mount, ring) = TestMount::mount_with_ring(&config, 1);
    assert!(matches!(ring, Err(UringError::Config(_))), "{ring:?}");
    assert_eq!(
        std::fs::read(mount.path().join("small")).expect("read /small"),
        SMALL_CONTENT
    );
    assert!(mount.dev_reads.load(Ordering::Relaxed) > 0);
}

#[test]
fn an_answer_committed_early_reaches_the_caller_before_the_handler_returns() {
    skip_unless_possible!();
    let _uring = EnableUring::on();
    let mut mount = TestMount::mount(true, 1);
    mount
        .start_ring(&TestMount::config(1))
        .expect("start the ring transport");
    // The handler of /e* commits its answer, then waits for this thread to have it: without
    // the early commit, the answer would leave only when the handler returns (after 5 s).
    for n in 0..3 {
        let started = Instant::now();
        // stat(2), not std's statx: a statx asking for the birth time costs a FUSE_STATX too,
        // which this queue could answer only after the handler returns.
        let path = std::ffi::CString::new(format!("{}/e{n}", mount.path().display())).unwrap();
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a NUL-terminated path and a stat buffer of the right type.
        assert_eq!(
            unsafe { libc::stat(path.as_ptr(), &mut st) },
            0,
            "stat /e{n}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "the answer waited for the handler"
        );
        mount.fs.early_seen.store(true, Ordering::Release);
        let deadline = Instant::now() + BOUND;
        while mount.fs.early_before_return.load(Ordering::Acquire) < n + 1 {
            assert!(
                Instant::now() < deadline,
                "the handler never saw the answer arrive"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    assert!(mount.fs.ring_lookups.load(Ordering::Relaxed) >= 3);
}

extern "C" fn ignore_signal(_: libc::c_int) {}

#[test]
fn an_interrupted_read_comes_on_dev_fuse_and_is_answered_on_both_transports() {
    skip_unless_possible!();
    let _uring = EnableUring::on();
    // A handler without SA_RESTART, so that the signal interrupts the reader's wait.
    // SAFETY: a zeroed sigaction with a handler that does nothing, for a signal no other test of
    // this binary uses.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = ignore_signal as *const () as usize;
        assert_eq!(
            libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()),
            0
        );
    }
    for ring in [false, true] {
        // Two /dev/fuse readers: one may be busy with the slow READ (without the ring).
        let mut mount = TestMount::mount(ring, 2);
        if ring {
            mount
                .start_ring(&TestMount::config(1))
                .expect("start the ring transport");
        }
        let slow = mount.path().join("slow");
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            // SAFETY: pthread_self has no preconditions.
            tid_tx.send(unsafe { libc::pthread_self() }).unwrap();
            File::open(slow).and_then(|mut f| f.read(&mut [0u8; 16]))
        });
        let thread = tid_rx.recv().unwrap();
        wait_for_slow_read(&mount);
        let deadline = Instant::now() + BOUND;
        // SAFETY: the reader thread is alive (it is in its slow read) and handles SIGUSR1.
        assert_eq!(unsafe { libc::pthread_kill(thread, libc::SIGUSR1) }, 0);
        while mount.fs.interrupts.load(Ordering::SeqCst) == 0 {
            assert!(
                Instant::now() < deadline,
                "ring={ring}: no INTERRUPT on /dev/fuse"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // The READ is answered when done (the interrupt is not answered), and the read ends
        // with its bytes or EINTR, never a hang.
        let read = reader.join().expect("reader thread");
        match read {
            Ok(n) => assert!(n > 0, "ring={ring}"),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EINTR), "ring={ring}: {e}"),
        }
        assert_eq!(
            std::fs::read(mount.path().join("small")).expect("read /small"),
            SMALL_CONTENT,
            "ring={ring}: the mount serves after the interrupt"
        );
        if ring {
            assert!(mount.fs.ring_requests.load(Ordering::Relaxed) > 0);
        }
    }
}

/// Threads of this process whose name is `name`.
fn threads_named(name: &str) -> usize {
    thread_names().iter().filter(|comm| *comm == name).count()
}

#[test]
fn an_idle_start_holds_one_entry_per_cpu_and_grows_per_cpu_queues_once_busy() {
    skip_unless_possible!();
    let _uring = EnableUring::on();
    let idle_threads_before = threads_named("fuse-uring");
    let config = TestMount::config(2).idle_start(40);
    let (mut mount, ring) = TestMount::mount_with_ring(&config, 1);
    ring.expect("prepare and register the ring transport");
    let transport = mount.transport.as_ref().expect("transport");
    let idle_memory = transport.memory();
    let stats = transport.stats();
    // Idle: one thread, one entry of every CPU's queue, and only that queue's memory.
    assert_eq!(
        (stats.entries, stats.queue_threads),
        (cpus(), 1),
        "{stats:?}"
    );
    assert_eq!(threads_named("fuse-uring"), idle_threads_before + 1);
    assert!(idle_memory >= cpus() * config.payload_size, "{idle_memory}");
    assert!(
        idle_memory < ring_memory(&TestMount::config(2)),
        "{idle_memory}"
    );
    // A few requests from every CPU are answered by that one thread (every queue's entry).
    for cpu in 0..cpus() {
        let path = mount.path().join("small");
        let read = on_cpu(cpu, move || std::fs::read(path).expect("read /small"));
        assert_eq!(read.join().expect("reader"), SMALL_CONTENT);
    }
    let stats = transport.stats();
    assert!(stats.requests() < 40, "{stats:?}");
    assert_eq!(
        (stats.entries, stats.queue_threads),
        (cpus(), 1),
        "{stats:?}"
    );

    // Busy: past 40 answers, the per-CPU threads start: `queue_depth` per CPU, an entry each.
    let readers: Vec<_> = (0..cpus())
        .map(|cpu| {
            let path = mount.path().join("big");
            on_cpu(cpu, move || {
                for _ in 0..4 {
                    let whole = std::fs::read(&path).expect("read /big");
                    assert_eq!(whole.len() as u64, BIG_SIZE);
                    check_big(&whole, 0);
                }
            })
        })
        .collect();
    for reader in readers {
        reader.join().expect("a reader thread");
    }
    let deadline = Instant::now() + BOUND;
    while transport.stats().entries < cpus() * 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let stats = transport.stats();
    assert_eq!(
        (stats.entries, stats.queue_threads),
        (cpus() + cpus() * 2, 1 + cpus() * 2),
        "{stats:?}"
    );
    assert_eq!(
        transport.memory(),
        ring_memory(&config),
        "every queue allocated"
    );
    // Requests keep coming back right with both kinds of threads serving.
    for cpu in 0..cpus() {
        let path = mount.path().join("big");
        let read = on_cpu(cpu, move || {
            let file = File::open(&path).expect("open /big");
            let mut range = vec![0u8; 70_000];
            file.read_exact_at(&mut range, 4097).expect("pread /big");
            check_big(&range, 4097);
        });
        read.join().expect("reader");
    }
    assert_eq!(
        transport.stats().requests(),
        mount.fs.ring_requests.load(Ordering::Relaxed)
    );
    assert_eq!(mount.dev_reads.load(Ordering::Relaxed), 0);

    // Unmounting ends every thread, the grown ones too, and gives back every buffer.
    mount.unmount(MntFlags::empty());
    let transport = mount.transport.take().expect("transport");
    assert!(transport.wait_finished(BOUND), "every queue thread ends");
    let end = transport.shutdown();
    assert_eq!(end.leaked_bytes, 0, "{end:?}");
    assert!(end.errors.is_empty(), "{end:?}");
}

#[test]
fn shutdown_while_mounted_after_growing_stops_every_queue_thread() {
    skip_unless_possible!();
    let _uring = EnableUring::on();
    let config = TestMount::config(1).idle_start(4);
    let (mut mount, ring) = TestMount::mount_with_ring(&config, 1);
    ring.expect("prepare and register the ring transport");
    for _ in 0..4 {
        assert_eq!(
            std::fs::read(mount.path().join("small")).expect("read /small"),
            SMALL_CONTENT
        );
    }
    let transport = mount.transport.take().expect("transport");
    let deadline = Instant::now() + BOUND;
    while transport.stats().queue_threads < 1 + cpus() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(transport.stats().queue_threads, 1 + cpus());
    let end = shutdown_within_bound(transport);
    // Every entry (the idle thread's and the per-CPU ones) stays with the kernel until the
    // connection ends, so every buffer is kept.
    assert_eq!(
        end.leaked_bytes,
        2 * cpus() * (config.payload_size + squashd_fuse_uring::RING_HEADER_SIZE)
    );
    assert!(end.errors.is_empty(), "{end:?}");
}
