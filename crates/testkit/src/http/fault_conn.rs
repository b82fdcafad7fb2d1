//! One connection of a [`super::FaultServer`]: reads requests (keep-alive) and answers each,
//! applying the fault plan.

use super::fault::{BodyFault, Shared};
use super::range::{if_match, parse_range, Asked};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

/// An idle keep-alive connection is closed after this long; the server's Drop closes the rest.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// A client that stops reading a body fails the write after this long.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Bounds on a request's head: longer lines or more lines get 400 and a close.
const MAX_LINE: u64 = 8 * 1024;
const MAX_HEADERS: usize = 100;

/// A request as far as this server cares.
struct Request {
    method: String,
    path: String,
    keep_alive: bool,
    range: Option<String>,
    if_match: Option<String>,
    has_body: bool,
}

/// Serves requests on `stream` until the client closes, an error, a fault that ends the
/// connection, or the server stops.
pub(crate) fn serve(stream: &TcpStream, shared: &Shared) {
    let _ = stream.set_read_timeout(Some(IDLE_TIMEOUT));
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(stream);
    while !shared.stopping() {
        let request = match read_request(&mut reader) {
            Ok(Some(r)) => r,
            Ok(None) => return,
            Err(()) => {
                let _ = write_head(stream, 400, &[], 0, false);
                return;
            }
        };
        match answer(stream, shared, &request) {
            Ok(true) => {}
            Ok(false) | Err(_) => return,
        }
    }
}

/// Reads one request head; None when the client closed the connection before one.
fn read_request(reader: &mut impl BufRead) -> Result<Option<Request>, ()> {
    let mut line = String::new();
    let n = reader
        .by_ref()
        .take(MAX_LINE)
        .read_line(&mut line)
        .map_err(|_| ())?;
    if n == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (Some(method), Some(path), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(());
    };
    let mut request = Request {
        method: method.to_owned(),
        path: path.to_owned(),
        // HTTP/1.0 clients get one answer per connection.
        keep_alive: version == "HTTP/1.1",
        range: None,
        if_match: None,
        has_body: false,
    };
    for _ in 0..=MAX_HEADERS {
        line.clear();
        reader
            .by_ref()
            .take(MAX_LINE)
            .read_line(&mut line)
            .map_err(|_| ())?;
        let header = line.trim_end_matches(['\r', '\n']);
        if header.is_empty() {
            return Ok(Some(request));
        }
        let (name, value) = header.split_once(':').ok_or(())?;
        let value = value.trim().to_owned();
        match name.trim().to_ascii_lowercase().as_str() {
            "range" => request.range = Some(value),
            "if-match" => request.if_match = Some(value),
            "connection" if value.eq_ignore_ascii_case("close") => request.keep_alive = false,
            "content-length" => request.has_body |= value != "0",
            "transfer-encoding" => request.has_body = true,
            _ => {}
        }
    }
    Err(())
}

/// Answers one request; Ok(true) when the connection can serve another.
fn answer(mut stream: &TcpStream, shared: &Shared, request: &Request) -> std::io::Result<bool> {
    let is_head = request.method == "HEAD";
    let keep = request.keep_alive && !request.has_body;
    if request.path != shared.path {
        shared.state().stats.other_paths += 1;
        write_head(stream, 404, &[], 0, keep)?;
        return Ok(keep);
    }
    let (object, etag, delay, fail, asked) = {
        let mut state = shared.state();
        state.stats.requests += 1;
        match request.method.as_str() {
            "HEAD" => state.stats.heads += 1,
            "GET" => state.stats.gets += 1,
            _ => {}
        }
        let fail = match &mut state.faults.fail {
            Some((status, left)) if *left > 0 => {
                *left -= 1;
                Some(*status)
            }
            _ => None,
        };
        if fail.is_some() {
            state.stats.injected_errors += 1;
        }
        let len = state.object.len() as u64;
        let asked = match request.range.as_deref() {
            Some(value) if !is_head => parse_range(value, len),
            _ => Asked::Whole,
        };
        if let Asked::Part(r) = &asked {
            state.record_range(r.clone());
        }
        let delay = state.faults.delay;
        (state.object.clone(), state.etag.clone(), delay, fail, asked)
    };
    shared.sleep(delay);
    if let Some(status) = fail {
        let body = b"injected failure\n";
        write_head(stream, status, &[], body.len() as u64, keep)?;
        if !is_head {
            stream.write_all(body)?;
        }
        return Ok(keep);
    }
    if request.has_body {
        // GET and HEAD carry no body; rather than read one, refuse and close.
        write_head(stream, 400, &[], 0, false)?;
        return Ok(false);
    }
    if !is_head && request.method != "GET" {
        write_head(stream, 405, &[("Allow", "GET, HEAD".into())], 0, keep)?;
        return Ok(keep);
    }
    let len = object.len() as u64;
    let etag_header = ("ETag", etag.clone());
    if let Some(tags) = &request.if_match {
        if !if_match(tags, &etag) {
            shared.state().stats.precondition_failed += 1;
            write_head(stream, 412, &[etag_header], 0, keep)?;
            return Ok(keep);
        }
    }
    let ignore_range = shared.state().faults.ignore_range;
    let range = if ignore_range { Asked::Whole } else { asked };
    let (status, body, mut headers) = match range {
        Asked::Unsatisfiable => {
            let headers = vec![etag_header, ("Content-Range", format!("bytes */{len}"))];
            write_head(stream, 416, &headers, 0, keep)?;
            return Ok(keep);
        }
        Asked::Whole => (200, 0..len, vec![etag_header]),
        Asked::Part(r) => {
            let content_range = format!("bytes {}-{}/{len}", r.start, r.end - 1);
            (206, r, vec![etag_header, ("Content-Range", content_range)])
        }
    };
    if !ignore_range {
        headers.push(("Accept-Ranges", "bytes".into()));
    }
    let body_len = body.end - body.start;
    write_head(stream, status, &headers, body_len, keep)?;
    if is_head {
        return Ok(keep);
    }
    let (cut, truncate) = {
        let mut state = shared.state();
        let cut = take_fault(&mut state.faults.cut);
        let truncate = if cut.is_none() {
            take_fault(&mut state.faults.truncate)
        } else {
            None
        };
        state.stats.cuts += u64::from(cut.is_some());
        state.stats.truncations += u64::from(truncate.is_some());
        (cut, truncate)
    };
    let send = cut
        .or(truncate)
        .map_or(body_len, |after| after.min(body_len));
    let from = usize::try_from(body.start).unwrap_or(usize::MAX);
    let to = usize::try_from(body.start + send).unwrap_or(usize::MAX);
    let sent = write_body(stream, shared, &object[from..to]);
    shared.state().stats.body_bytes += sent;
    if cut.is_some() {
        // SO_LINGER of zero makes close() send an RST: the connection is reset, not ended.
        let _ = rustix::net::sockopt::set_socket_linger(stream, Some(Duration::ZERO));
        return Ok(false);
    }
    if truncate.is_some() {
        close_cleanly(stream);
        return Ok(false);
    }
    Ok(keep && sent == body_len)
}

/// Counts down a body fault; the byte count to stop after when it applies to this response.
fn take_fault(fault: &mut Option<BodyFault>) -> Option<u64> {
    let f = fault.as_mut()?;
    if f.responses == 0 {
        return None;
    }
    f.responses -= 1;
    Some(f.after)
}

/// Writes `bytes` in pieces, stopping early if the server stops; returns how many were written.
fn write_body(mut stream: &TcpStream, shared: &Shared, bytes: &[u8]) -> u64 {
    let mut sent = 0u64;
    for piece in bytes.chunks(64 * 1024) {
        if shared.stopping() || stream.write_all(piece).is_err() {
            break;
        }
        sent += piece.len() as u64;
    }
    sent
}

/// Sends a FIN and waits briefly for the client's end, so that unread bytes from the client do
/// not turn the close into a reset.
fn close_cleanly(mut stream: &TcpStream) {
    let _ = stream.shutdown(Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let mut sink = [0u8; 4096];
    for _ in 0..64 {
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
}

fn write_head(
    mut stream: &TcpStream,
    status: u16,
    headers: &[(&str, String)],
    content_length: u64,
    keep_alive: bool,
) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        206 => "Partial Content",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        412 => "Precondition Failed",
        416 => "Range Not Satisfiable",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Injected",
    };
    let mut head = format!("HTTP/1.1 {status} {reason}\r\nContent-Length: {content_length}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !keep_alive {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())
}
