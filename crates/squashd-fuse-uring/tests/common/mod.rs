//! A real FUSE mount for the ring transport's tests: /dev/fuse opened and mounted with
//! mount(2), INIT answered here, /dev/fuse served by plain reader threads (for what the kernel
//! keeps there, and as the transport to compare with), the ring by the crate's `Transport`.

// Shared by the `ring` and `bench` test binaries; each uses only part of it.
#![allow(dead_code)]

pub mod testfs;

use std::fs::File;
use std::io::{IoSlice, Read as _};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use squashd_fuse_uring::{
    init_offers_uring, out_header, possible_cpus, ReplyError, ReplyWriter, Request, Transport,
    UringConfig, UringError, ENABLE_URING_PARAMETER, FUSE_INIT_EXT, INIT_FLAGS2_OVER_IO_URING,
};

use testfs::{TestFs, FUSE_BATCH_FORGET, FUSE_FORGET, FUSE_INIT, FUSE_INTERRUPT};

/// The limits this harness negotiates at INIT.
pub const MAX_WRITE: u32 = 128 << 10;
pub const MAX_PAGES: u16 = 32;
const FUSE_MAX_PAGES: u32 = 1 << 22;
const FUSE_ASYNC_READ: u32 = 1 << 0;

/// Serializes the tests of this binary: they flip one machine-wide parameter.
static MACHINE: Mutex<()> = Mutex::new(());

/// Why a test cannot run here, if it cannot.
pub fn skip_reason() -> Option<String> {
    if !nix::unistd::Uid::effective().is_root() {
        return Some("needs root (mount(2) and the enable_uring parameter)".to_string());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse".to_string());
    }
    if !Path::new(ENABLE_URING_PARAMETER).exists() {
        return Some(format!(
            "{ENABLE_URING_PARAMETER} does not exist (kernel before 6.14?)"
        ));
    }
    None
}

/// Takes the lock that serializes this binary's tests.
pub fn lock_machine() -> MutexGuard<'static, ()> {
    MACHINE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Turns `enable_uring` on for the test and restores the old value when dropped, also when the
/// test panics: testkit's process-wide guard ([`testkit::uring::RingOn`]), shared with every
/// other test that turns the parameter on or off.
pub struct EnableUring {
    _on: testkit::uring::RingOn,
    _machine: Option<MutexGuard<'static, ()>>,
}

impl EnableUring {
    /// Takes the machine lock for the guard's life and turns the parameter on.
    pub fn on() -> EnableUring {
        let machine = lock_machine();
        let mut uring = EnableUring::on_while_locked();
        uring._machine = Some(machine);
        uring
    }

    /// Turns the parameter on; the caller holds [`lock_machine`].
    pub fn on_while_locked() -> EnableUring {
        EnableUring {
            _on: testkit::uring::RingOn::take().expect("turn enable_uring on"),
            _machine: None,
        }
    }
}

/// What the kernel's INIT request said.
#[derive(Debug, Clone, Copy)]
pub struct Init {
    pub offered_uring: bool,
}

/// A mounted test file system.
pub struct TestMount {
    pub dir: tempfile::TempDir,
    pub dev: Arc<OwnedFd>,
    pub fs: Arc<TestFs>,
    pub init: Init,
    pub transport: Option<Transport>,
    /// Requests other than FORGET read from /dev/fuse after INIT.
    pub dev_reads: Arc<AtomicU64>,
    readers: Vec<JoinHandle<()>>,
    mounted: bool,
}

impl TestMount {
    /// Mounts, answers INIT (accepting FUSE over io_uring if `accept_uring` and offered), and
    /// starts `dev_readers` threads serving /dev/fuse. No ring transport: see `mount_with_ring`.
    pub fn mount(accept_uring: bool, dev_readers: usize) -> TestMount {
        let fs = Arc::new(TestFs::default());
        let (mount, _) = TestMount::mount_as(dev_readers, fs, |offered, _| {
            (accept_uring && offered, None::<()>)
        });
        mount
    }

    /// Mounts the way the session will: prepares the ring transport with `config` before the
    /// INIT reply, accepts the ring only if that worked, registers after the reply. Returns the
    /// mount and the outcome of prepare and register.
    pub fn mount_with_ring(
        config: &UringConfig,
        dev_readers: usize,
    ) -> (TestMount, Result<(), UringError>) {
        let fs = Arc::new(TestFs::default());
        let handler = Arc::clone(&fs);
        let (mut mount, prepared) = TestMount::mount_as(dev_readers, fs, |offered, dev| {
            assert!(offered, "INIT offers FUSE over io_uring");
            match Transport::prepare(dev, config, handler) {
                Ok(prepared) => (true, Some(Ok(prepared))),
                Err(error) => (false, Some(Err(error))),
            }
        });
        let outcome = match prepared {
            Some(Ok(prepared)) => prepared
                .register()
                .map(|transport| mount.transport = Some(transport)),
            Some(Err(error)) => Err(error),
            None => unreachable!("the closure always prepares"),
        };
        (mount, outcome)
    }

    /// Mounts; `on_init(offered, dev)` decides whether the INIT reply accepts the ring and may
    /// prepare a transport, which is returned for registering after the reply.
    fn mount_as<P>(
        dev_readers: usize,
        fs: Arc<TestFs>,
        on_init: impl FnOnce(bool, BorrowedFd<'_>) -> (bool, Option<P>),
    ) -> (TestMount, Option<P>) {
        let dev: OwnedFd = File::options()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .expect("open /dev/fuse")
            .into();
        let dir = tempfile::tempdir().expect("mount point");
        let data = format!(
            "fd={},rootmode=40000,user_id=0,group_id=0,allow_other",
            dev.as_raw_fd()
        );
        nix::mount::mount(
            Some("squashd-uring-test"),
            dir.path(),
            Some("fuse.squashd-uring-test"),
            nix::mount::MsFlags::MS_RDONLY
                | nix::mount::MsFlags::MS_NOSUID
                | nix::mount::MsFlags::MS_NODEV,
            Some(data.as_str()),
        )
        .expect("mount(2) the test file system");
        let (init, prepared) = answer_init(&dev, on_init);
        let dev = Arc::new(dev);
        let dev_reads = Arc::new(AtomicU64::new(0));
        let readers = (0..dev_readers)
            .map(|_| {
                let (dev, fs, reads) = (Arc::clone(&dev), Arc::clone(&fs), Arc::clone(&dev_reads));
                std::thread::spawn(move || serve_dev_fuse(&dev, &fs, &reads))
            })
            .collect();
        let mount = TestMount {
            dir,
            dev,
            fs,
            init,
            transport: None,
            dev_reads,
            readers,
            mounted: true,
        };
        (mount, prepared)
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// The config for this mount's INIT with `depth` entries per queue.
    pub fn config(depth: u32) -> UringConfig {
        UringConfig::for_init(depth, MAX_WRITE, MAX_PAGES).expect("config")
    }

    /// Starts the ring transport.
    pub fn start_ring(&mut self, config: &UringConfig) -> Result<(), UringError> {
        let transport = Transport::start(self.dev.as_fd(), config, Arc::clone(&self.fs))?;
        self.transport = Some(transport);
        Ok(())
    }

    /// umount2(2) with `flags`.
    pub fn unmount(&mut self, flags: nix::mount::MntFlags) {
        nix::mount::umount2(self.dir.path(), flags).expect("umount the test file system");
        self.mounted = false;
    }

    /// Unmounts, waits for the ring transport to end, and asserts that it ended without errors.
    pub fn unmount_ring(mut self) {
        self.unmount(nix::mount::MntFlags::empty());
        let transport = self.transport.take().expect("transport");
        assert!(transport.wait_finished(Duration::from_secs(10)));
        let end = transport.shutdown();
        assert!(end.errors.is_empty(), "{end:?}");
    }

    /// Waits up to `timeout` for the /dev/fuse readers to end (they end when the connection
    /// does); true if they did.
    pub fn readers_end_within(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.readers.iter().any(|r| !r.is_finished()) {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        true
    }
}

impl Drop for TestMount {
    fn drop(&mut self) {
        if self.mounted {
            // Abort the connection (MNT_FORCE) so that nothing waits on this server any more.
            let _ = nix::mount::umount2(
                self.dir.path(),
                nix::mount::MntFlags::MNT_FORCE | nix::mount::MntFlags::MNT_DETACH,
            );
        }
        if let Some(transport) = self.transport.take() {
            let _ = transport.wait_finished(Duration::from_secs(10));
            drop(transport);
        }
        self.readers_end_within(Duration::from_secs(10));
    }
}

/// Reads the INIT request and answers it, accepting the ring if `on_init` says so.
fn answer_init<P>(
    dev: &OwnedFd,
    on_init: impl FnOnce(bool, BorrowedFd<'_>) -> (bool, Option<P>),
) -> (Init, Option<P>) {
    let mut buffer = vec![0u8; MAX_WRITE as usize + 4096];
    let len = (&File::from(dev.try_clone().expect("dup /dev/fuse")))
        .read(&mut buffer)
        .expect("read INIT");
    let request = Request::from_dev_fuse(&buffer[..len]).expect("a whole INIT request");
    assert_eq!(
        request.header.opcode, FUSE_INIT,
        "the first request is INIT"
    );
    let mut args = request.args();
    // fuse_init_in: major, minor, max_readahead, flags, flags2.
    let (major, minor, max_readahead, flags, flags2) =
        (args.u32(), args.u32(), args.u32(), args.u32(), args.u32());
    let (Some(major), Some(minor), Some(max_readahead), Some(flags), Some(flags2)) =
        (major, minor, max_readahead, flags, flags2)
    else {
        panic!("short INIT request");
    };
    assert_eq!(major, 7);
    let offered_uring = init_offers_uring(flags, flags2);
    let want = FUSE_INIT_EXT | FUSE_MAX_PAGES | FUSE_ASYNC_READ;
    let (accept_uring, prepared) = on_init(offered_uring, dev.as_fd());
    let reply_flags2 = if accept_uring {
        INIT_FLAGS2_OVER_IO_URING
    } else {
        0
    };
    // fuse_init_out (64 bytes).
    let mut out = [0u8; 64];
    out[0..4].copy_from_slice(&7u32.to_ne_bytes());
    out[4..8].copy_from_slice(&minor.min(45).to_ne_bytes());
    out[8..12].copy_from_slice(&max_readahead.to_ne_bytes());
    out[12..16].copy_from_slice(&(flags & want).to_ne_bytes());
    out[16..18].copy_from_slice(&16u16.to_ne_bytes()); // max_background
    out[18..20].copy_from_slice(&12u16.to_ne_bytes()); // congestion_threshold
    out[20..24].copy_from_slice(&MAX_WRITE.to_ne_bytes());
    out[24..28].copy_from_slice(&1u32.to_ne_bytes()); // time_gran
    out[28..30].copy_from_slice(&MAX_PAGES.to_ne_bytes());
    out[32..36].copy_from_slice(&reply_flags2.to_ne_bytes());
    write_reply(dev, request.header.unique, 0, &[&out]).expect("write the INIT reply");
    (Init { offered_uring }, prepared)
}

fn write_reply(dev: &OwnedFd, unique: u64, errno: i32, parts: &[&[u8]]) -> std::io::Result<()> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let header = out_header(unique, errno, len);
    let mut slices = vec![IoSlice::new(&header)];
    slices.extend(parts.iter().map(|p| IoSlice::new(p)));
    nix::sys::uio::writev(dev, &slices)
        .map(|_| ())
        .map_err(std::io::Error::from)
}

/// /dev/fuse's ReplyWriter, as the session's will be: out header and parts in one writev.
struct DevFuseReply<'a> {
    dev: &'a OwnedFd,
    unique: u64,
    scratch: &'a mut Vec<u8>,
    answered: bool,
}

impl ReplyWriter for DevFuseReply<'_> {
    fn capacity(&self) -> usize {
        MAX_WRITE as usize
    }

    fn ok(&mut self, parts: &[&[u8]]) -> Result<(), ReplyError> {
        if std::mem::replace(&mut self.answered, true) {
            return Err(ReplyError::AlreadyAnswered);
        }
        // ENOENT: the request was interrupted or the connection aborted; nothing to answer.
        let _ = write_reply(self.dev, self.unique, 0, parts);
        Ok(())
    }

    fn ok_with(
        &mut self,
        max_len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Result<usize, i32>,
    ) -> Result<(), ReplyError> {
        if max_len > self.capacity() {
            return Err(ReplyError::TooLarge {
                len: max_len,
                capacity: self.capacity(),
            });
        }
        self.scratch.resize(max_len, 0);
        match fill(&mut self.scratch[..]) {
            Ok(len) => {
                let data = std::mem::take(self.scratch);
                let result = self.ok(&[&data[..len.min(max_len)]]);
                *self.scratch = data;
                result
            }
            Err(errno) => self.error(errno),
        }
    }

    fn error(&mut self, errno: i32) -> Result<(), ReplyError> {
        if std::mem::replace(&mut self.answered, true) {
            return Err(ReplyError::AlreadyAnswered);
        }
        let _ = write_reply(self.dev, self.unique, errno, &[]);
        Ok(())
    }
}

/// A /dev/fuse reader: reads requests until the connection ends (ENODEV).
fn serve_dev_fuse(dev: &OwnedFd, fs: &TestFs, reads: &AtomicU64) {
    use squashd_fuse_uring::Handler as _;
    let mut buffer = vec![0u8; MAX_WRITE as usize + 4096];
    let mut scratch = Vec::new();
    loop {
        let len = match nix::unistd::read(dev, &mut buffer) {
            Ok(len) => len,
            Err(
                nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN | nix::errno::Errno::ENOENT,
            ) => continue,
            Err(_) => return,
        };
        let Some(request) = Request::from_dev_fuse(&buffer[..len]) else {
            continue;
        };
        match request.header.opcode {
            FUSE_INTERRUPT => {
                // Unanswered: the interrupted request is answered when it is done, as squashd
                // does.
                fs.interrupts.fetch_add(1, Ordering::SeqCst);
                continue;
            }
            FUSE_FORGET | FUSE_BATCH_FORGET => continue,
            _ => {}
        }
        reads.fetch_add(1, Ordering::Relaxed);
        let mut reply = DevFuseReply {
            dev,
            unique: request.header.unique,
            scratch: &mut scratch,
            answered: false,
        };
        fs.handle(&request, &mut reply);
        if !reply.answered {
            let _ = reply.error(libc::EIO);
        }
    }
}

/// Runs `work` on a thread pinned to `cpu` (so that its requests go to that CPU's queue).
pub fn on_cpu<T: Send + 'static>(
    cpu: usize,
    work: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    std::thread::spawn(move || {
        let mut set = nix::sched::CpuSet::new();
        set.set(cpu).expect("cpu in set");
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).expect("pin to cpu");
        work()
    })
}

/// A requester pinned to `cpu` looks up `count` missing names under `root` one after another
/// (never cached, so each is a request on that CPU's queue); returns once all are answered.
pub fn missing_lookups_on_cpu(root: std::path::PathBuf, cpu: usize, count: u64) {
    on_cpu(cpu, move || {
        for i in 0..count {
            let missing = root.join(format!("n{cpu}-{i}"));
            assert!(std::fs::symlink_metadata(missing).is_err());
        }
    })
    .join()
    .expect("requester");
}

/// The number of ring queues on this machine.
pub fn cpus() -> usize {
    possible_cpus().expect("possible cpus")
}
