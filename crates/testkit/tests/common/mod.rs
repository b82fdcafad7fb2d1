//! A raw HTTP/1.1 client on std's TcpStream, for tests that check servers byte by byte: it sends
//! exactly what it is given and reports exactly what came back, including a body that ended early
//! and how it ended.

#![allow(dead_code)] // each test file uses a different part

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// One response as read from the socket.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Whether the whole announced Content-Length arrived.
    pub complete: bool,
    /// How the body ended early: None for a clean close (EOF), else the error's kind.
    pub error: Option<ErrorKind>,
}

impl Response {
    /// The value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A connection to a server.
pub struct Client {
    reader: BufReader<TcpStream>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Client {
            reader: BufReader::new(stream),
        }
    }

    /// Writes `raw` as it is.
    pub fn send_raw(&mut self, raw: &[u8]) {
        self.reader.get_mut().write_all(raw).expect("send");
    }

    /// Sends `METHOD path HTTP/1.1` with a Host header and `headers`, and reads the answer.
    pub fn request(&mut self, method: &str, path: &str, headers: &[(&str, &str)]) -> Response {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        self.send_raw(head.as_bytes());
        self.read_response(method == "HEAD")
    }

    /// `GET path` with `Range: bytes=range` (and more headers).
    pub fn get_range(&mut self, path: &str, range: &str, more: &[(&str, &str)]) -> Response {
        let value = format!("bytes={range}");
        let mut headers = vec![("Range", value.as_str())];
        headers.extend_from_slice(more);
        self.request("GET", path, &headers)
    }

    /// Reads one response; a HEAD answer has no body whatever its Content-Length says.
    pub fn read_response(&mut self, head_only: bool) -> Response {
        let mut line = String::new();
        self.reader
            .read_line(&mut line)
            .expect("read the status line");
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not an HTTP status line: {line:?}"));
        let mut headers = Vec::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line).expect("read a header");
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            let (n, v) = l.split_once(':').expect("a header line");
            headers.push((n.trim().to_owned(), v.trim().to_owned()));
        }
        let mut response = Response {
            status,
            headers,
            body: Vec::new(),
            complete: true,
            error: None,
        };
        let len: usize = match response.header("Content-Length") {
            Some(v) if !head_only => v.parse().expect("a Content-Length"),
            _ => return response,
        };
        let mut buf = [0u8; 64 * 1024];
        while response.body.len() < len {
            let want = (len - response.body.len()).min(buf.len());
            match self.reader.read(&mut buf[..want]) {
                Ok(0) => break,
                Ok(n) => response.body.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    response.error = Some(e.kind());
                    break;
                }
            }
        }
        response.complete = response.body.len() == len;
        response
    }

    /// Whether the server has closed the connection (EOF or an error within `wait`).
    pub fn closed_within(&mut self, wait: Duration) -> bool {
        self.reader.get_ref().set_read_timeout(Some(wait)).unwrap();
        let mut byte = [0u8; 1];
        let closed = match self.reader.read(&mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        };
        self.reader
            .get_ref()
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        closed
    }
}

/// Bytes that differ at every offset from a shifted copy of themselves, so a range served from the
/// wrong offset never passes for the right one.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..len).map(|_| rng.u8(..)).collect()
}
