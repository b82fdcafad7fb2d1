//! [`FaultServer`]: an in-process HTTP/1.1 server for one object, whose faults a test changes
//! while a client uses it.
//!
//! Written by hand on purpose, on std's TcpListener with a thread per connection: fault
//! injection needs control of the socket itself (stop writing a body after N bytes, close with a
//! FIN or reset the connection with an RST, announce a Content-Length and send less), which
//! server frameworks hide behind their response types. The server is small because it serves
//! one object with GET and HEAD only.

use super::fault_conn;
use std::hash::{Hash, Hasher};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// At most this many connections are served at once; more are closed when accepted, so a client
/// that leaks connections fails visibly instead of exhausting the test's threads.
const MAX_CONNECTIONS: usize = 256;
/// At most this many requested ranges are kept in [`Stats::ranges`] (the count goes on).
const MAX_RANGES_KEPT: usize = 100_000;

/// What the server has seen and done since it started (or since [`FaultServer::reset_stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Connections accepted.
    pub connections: u64,
    /// Requests read, of every method and outcome.
    pub requests: u64,
    /// HEAD requests.
    pub heads: u64,
    /// GET requests.
    pub gets: u64,
    /// Body bytes written to clients (what was sent, not what was announced).
    pub body_bytes: u64,
    /// The byte range each GET with a usable Range header asked for, in order, whatever it was
    /// answered (a fault, 412, or the whole object when Range is ignored), as `start..end` with
    /// the end clamped to the object's size; unsatisfiable ranges are left out. The first 100,000
    /// are kept.
    pub ranges: Vec<Range<u64>>,
    /// Responses with an injected error status ([`FaultServer::fail_next`]).
    pub injected_errors: u64,
    /// Bodies cut by a reset ([`FaultServer::cut_after`]).
    pub cuts: u64,
    /// Bodies ended early by a clean close ([`FaultServer::truncate_after`]).
    pub truncations: u64,
    /// Answers 412 to an `If-Match` that did not match.
    pub precondition_failed: u64,
    /// Requests for another path (e.g. `IMAGE.roothash` beside the image), answered 404 and
    /// counted here only: the other counters and the fault plan are the object's.
    pub other_paths: u64,
}

/// A fault that ends the next `responses` bodies after `after` bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BodyFault {
    pub(crate) after: u64,
    pub(crate) responses: u32,
}

/// The faults in force; [`fault_conn`] consults and counts them down per request.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    pub(crate) cut: Option<BodyFault>,
    pub(crate) truncate: Option<BodyFault>,
    pub(crate) delay: Duration,
    /// (status, how many more requests get it)
    pub(crate) fail: Option<(u16, u32)>,
    pub(crate) ignore_range: bool,
}

/// The object and everything a connection thread reads or updates, under one lock that no
/// thread holds while it does I/O.
pub(crate) struct State {
    pub(crate) object: Arc<[u8]>,
    pub(crate) etag: String,
    generation: u64,
    pub(crate) faults: Faults,
    pub(crate) stats: Stats,
}

impl State {
    /// Records a ranged GET's range, within the bound on how many are kept.
    pub(crate) fn record_range(&mut self, range: Range<u64>) {
        if self.stats.ranges.len() < MAX_RANGES_KEPT {
            self.stats.ranges.push(range);
        }
    }
}

/// What the accept loop and the connection threads share with the [`FaultServer`].
pub(crate) struct Shared {
    pub(crate) path: String,
    pub(crate) stop: AtomicBool,
    state: Mutex<State>,
    /// A second handle on each live connection's socket, by connection number, to shut them all
    /// down when the server stops. A connection removes its own when it ends: the socket closes
    /// (with a FIN, or an RST after a cut) only when its last handle does.
    sockets: Mutex<Vec<(u64, TcpStream)>>,
    /// The connection threads not yet joined.
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Shared {
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Forgets the second handle on connection `id`'s socket, as the connection ends.
    pub(crate) fn forget_socket(&self, id: u64) {
        lock(&self.sockets).retain(|(n, _)| *n != id);
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Sleeps for `d`, waking early when the server stops, so that a long injected delay never
    /// holds up a test's end.
    pub(crate) fn sleep(&self, d: Duration) {
        let end = std::time::Instant::now() + d;
        while !self.stopping() {
            let left = end.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(10)));
        }
    }
}

/// An HTTP/1.1 server on 127.0.0.1 serving one object at one path, with keep-alive, HEAD, GET, a
/// single `Range: bytes=` range (206 with Content-Range, 416 outside the object; several ranges
/// or a malformed one get the whole object, as RFC 9110 allows), a quoted ETag on every answer
/// and `If-Match` (412 when no tag matches). The fault methods change what the next requests get,
/// while clients are connected. Dropping it stops it: every connection is shut down and every
/// thread joined.
pub struct FaultServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl FaultServer {
    /// Starts serving `object` at `path` (e.g. `/image.sqfs`). Panics if it cannot listen on
    /// 127.0.0.1 (then no test of remote images can run, and that is a failure, not a skip).
    pub fn start(path: &str, object: impl Into<Vec<u8>>) -> FaultServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("listen on 127.0.0.1");
        let addr = listener.local_addr().expect("the listener's address");
        let object: Arc<[u8]> = object.into().into();
        let shared = Arc::new(Shared {
            path: format!("/{}", path.trim_start_matches('/')),
            stop: AtomicBool::new(false),
            state: Mutex::new(State {
                etag: etag(&object, 0),
                object,
                generation: 0,
                faults: Faults::default(),
                stats: Stats::default(),
            }),
            sockets: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
        });
        let accept_shared = shared.clone();
        let accept = std::thread::Builder::new()
            .name("fault-server".into())
            .spawn(move || accept_loop(listener, accept_shared))
            .expect("start the accept thread");
        FaultServer {
            addr,
            shared,
            accept: Some(accept),
        }
    }

    /// The object's URL, `http://127.0.0.1:PORT/path`.
    pub fn url(&self) -> String {
        format!("http://{}{}", self.addr, self.shared.path)
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The object's current ETag, with its quotes, as sent in the `ETag` header.
    pub fn etag(&self) -> String {
        self.shared.state().etag.clone()
    }

    /// For the next `responses` answers with a body, sends `after` bytes of the body (of the
    /// Content-Length announced in full) and then resets the connection (RST), as a network
    /// failure would (a body of `after` bytes or fewer is sent whole, and still reset).
    pub fn cut_after(&self, after: u64, responses: u32) {
        self.shared.state().faults.cut = Some(BodyFault { after, responses });
    }

    /// For the next `responses` answers with a body, sends `after` bytes of the body (of the
    /// Content-Length announced in full) and then closes the connection cleanly (FIN), as a server
    /// that crashed mid-answer would.
    pub fn truncate_after(&self, after: u64, responses: u32) {
        self.shared.state().faults.truncate = Some(BodyFault { after, responses });
    }

    /// Waits `delay` before each answer from now on (zero for none).
    pub fn set_delay(&self, delay: Duration) {
        self.shared.state().faults.delay = delay;
    }

    /// Answers the next `requests` requests, whatever they ask, with `status` (e.g. 503 or 500)
    /// and a short body, keeping the connection.
    pub fn fail_next(&self, requests: u32, status: u16) {
        assert!(
            (400..600).contains(&status),
            "fail_next needs an error status, not {status}"
        );
        self.shared.state().faults.fail = Some((status, requests));
    }

    /// Replaces the object with `object` under a new ETag, which it returns. Answers already
    /// being sent finish with the old object; later ones get the new.
    pub fn replace(&self, object: impl Into<Vec<u8>>) -> String {
        let object: Arc<[u8]> = object.into().into();
        let mut state = self.shared.state();
        state.generation += 1;
        state.etag = etag(&object, state.generation);
        state.object = object;
        state.etag.clone()
    }

    /// Whether to ignore Range headers from now on (answer 200 with the whole object), as some
    /// servers and proxies do.
    pub fn ignore_range(&self, ignore: bool) {
        self.shared.state().faults.ignore_range = ignore;
    }

    /// Removes every fault: no cut, truncation, delay, injected error or ignored Range.
    pub fn clear_faults(&self) {
        self.shared.state().faults = Faults::default();
    }

    /// A copy of the counters.
    pub fn stats(&self) -> Stats {
        self.shared.state().stats.clone()
    }

    /// Sets every counter back to zero and forgets the ranges asked.
    pub fn reset_stats(&self) {
        self.shared.state().stats = Stats::default();
    }
}

impl Drop for FaultServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop, which sees the stop flag on its next connection.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        for (_, socket) in std::mem::take(&mut *lock(&self.shared.sockets)) {
            let _ = socket.shutdown(Shutdown::Both);
        }
        for thread in std::mem::take(&mut *lock(&self.shared.threads)) {
            let _ = thread.join();
        }
    }
}

/// A lock that a panicked connection thread did not leave unusable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for (id, stream) in (0u64..).zip(listener.incoming()) {
        if shared.stopping() {
            break;
        }
        let Ok(stream) = stream else { continue };
        shared.state().stats.connections += 1;
        let mut threads = lock(&shared.threads);
        threads.retain(|thread| !thread.is_finished());
        if threads.len() >= MAX_CONNECTIONS {
            continue; // dropping the stream closes it
        }
        let Ok(second) = stream.try_clone() else {
            continue;
        };
        // Registered before the thread starts, so that it cannot forget it before it is there.
        lock(&shared.sockets).push((id, second));
        let conn_shared = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("fault-conn".into())
            .spawn(move || {
                fault_conn::serve(&stream, &conn_shared);
                conn_shared.forget_socket(id);
            });
        match spawned {
            Ok(thread) => threads.push(thread),
            Err(_) => shared.forget_socket(id),
        }
    }
}

/// A quoted strong ETag that differs between generations of one server's object and, by a hash
/// of the bytes, between servers serving different bytes.
fn etag(object: &[u8], generation: u64) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    object.hash(&mut hasher);
    format!(
        "\"g{generation}-{:x}-{:016x}\"",
        object.len(),
        hasher.finish()
    )
}
