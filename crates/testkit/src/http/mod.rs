//! HTTP servers for the tests of remote images, all on 127.0.0.1 and all stopped when dropped:
//!
//! - [`Nginx`]: Debian's nginx, started by the test with a generated configuration, serving a
//!   directory as any static web server does (Range, ETag, If-Match): the real server that remote
//!   images are checked against.
//! - [`FaultServer`]: a small in-process HTTP/1.1 server for one object, with a fault plan the test
//!   changes while a client is using it (connections cut or bodies truncated mid-way, delays, 5xx
//!   bursts, the object replaced, Range ignored) and counters of what the client asked for.
//!
//! ```no_run
//! let server = testkit::http::FaultServer::start("/image.sqfs", vec![0u8; 4096]);
//! server.fail_next(2, 503); // the next two requests answer 503
//! let url = server.url();
//! # let _ = url;
//! ```

mod fault;
mod fault_conn;
mod nginx;
mod range;

pub use fault::{FaultServer, Stats};
pub use nginx::Nginx;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// A port on 127.0.0.1 that was free a moment ago, for servers that cannot bind port 0 and report
/// the port they got: the kernel picks it, so parallel tests rarely collide, and callers retry when
/// one does (another process may take the port between this call and their bind).
pub(crate) fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Sends `HEAD /` to `addr` and returns the response's head when an HTTP server answers, within
/// `timeout` for the whole exchange.
pub(crate) fn probe(addr: SocketAddr, timeout: Duration) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    stream
        .write_all(b"HEAD / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut head = Vec::new();
    // A HEAD answer has no body, and Connection: close ends it; the cap bounds a misbehaving peer.
    stream.take(64 * 1024).read_to_end(&mut head).ok()?;
    let head = String::from_utf8_lossy(&head).into_owned();
    head.starts_with("HTTP/1.").then_some(head)
}

/// Polls `ready` every 20 ms until it gives a value or `within` has passed.
pub(crate) fn poll_until<T>(within: Duration, mut ready: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = ready() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
