//! One HTTP exchange at a time: a ranged GET of an object's first bytes for its size and
//! validator, ranged GETs for its bytes, each answer checked against what was asked. No retrying here (see `fetch`): each
//! failure says whether trying again could help.

use crate::location::Location;
use crate::s3::S3Object;
use std::time::Duration;

/// What the server said of the object when it was opened; the validator is pinned for the life of a mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Its size in bytes.
    pub size: u64,
    /// Its ETag, quotes included, if the server gives one.
    pub etag: Option<String>,
    /// Its Last-Modified, the validator used when there is no ETag.
    pub last_modified: Option<String>,
}

impl ObjectInfo {
    /// What identifies this version of the object: its ETag, else its modification time and
    /// size. Disk-cache entries are keyed by it, so a new version never reads old units.
    pub fn version(&self) -> String {
        match (&self.etag, &self.last_modified) {
            (Some(etag), _) => format!("etag {etag}"),
            (None, Some(modified)) => format!("modified {modified}, {} bytes", self.size),
            (None, None) => format!("{} bytes", self.size),
        }
    }
}

/// Why an exchange failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchError {
    /// Worth another try: the connection failed or was cut, the body came short, the server
    /// answered 5xx, 408 or 429.
    Transient(String),
    /// Trying again cannot help: the object is gone or forbidden, the server ignores ranges.
    Permanent(String),
    /// The object is no longer the one opened: its validator changed.
    Changed(String),
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchError::Transient(what) | FetchError::Permanent(what) => f.write_str(what),
            FetchError::Changed(what) => {
                write!(f, "the object changed since it was opened: {what}")
            }
        }
    }
}

/// The object's endpoint: where requests for it go.
#[derive(Clone)]
pub enum Endpoint {
    /// A plain URL.
    Http(String),
    /// An S3 object, each request signed afresh.
    S3(Box<S3Object>),
}

impl Endpoint {
    /// The endpoint for `location`, S3 configured from the environment.
    pub fn for_location(location: &Location) -> Result<Endpoint, String> {
        Ok(match location {
            Location::Http { url } => Endpoint::Http(url.clone()),
            Location::S3 { bucket, key } => {
                Endpoint::S3(Box::new(S3Object::from_environment(bucket, key)?))
            }
        })
    }

    /// The object's whole address, secrets included, for the disk cache's identity of it
    /// (which hashes it): an HTTP URL as given, user information and query too; an S3 object's
    /// unsigned URL, which names its endpoint, bucket and key.
    pub fn full_address(&self) -> String {
        match self {
            Endpoint::Http(url) => url.clone(),
            Endpoint::S3(object) => object.unsigned_url(),
        }
    }

    fn get_url(&self) -> String {
        match self {
            Endpoint::Http(url) => url.clone(),
            Endpoint::S3(object) => object.get_url(),
        }
    }
}

/// An HTTP client with a pool of keep-alive connections, shared by every reader of an object.
pub struct Client {
    agent: ureq::Agent,
}

impl Client {
    /// A client keeping up to `connections` idle connections per host.
    pub fn new(connections: usize) -> Client {
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::PlatformVerifier)
            .build();
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .tls_config(tls)
            .max_idle_connections_per_host(connections.max(1))
            .max_idle_connections(connections.max(1) * 4)
            .timeout_connect(Some(Duration::from_secs(10)))
            .timeout_recv_response(Some(Duration::from_secs(30)))
            .timeout_recv_body(Some(Duration::from_secs(60)))
            // A byte range is asked for: a transparently decompressed body would not be it.
            .accept_encoding("identity")
            .user_agent(concat!("squashd/", env!("CARGO_PKG_VERSION")))
            .build();
        Client {
            agent: config.into(),
        }
    }

    /// Opens the object: its size and validator, and its first `len` bytes (all of it if it is
    /// smaller), from one ranged GET. A HEAD and then a GET of the superblock would cost a round
    /// trip more, and opening an image is measured in round trips.
    pub fn open(&self, endpoint: &Endpoint, len: u64) -> Result<(ObjectInfo, Vec<u8>), FetchError> {
        let len = len.max(1);
        let response = self
            .agent
            .get(&endpoint.get_url())
            .header("range", &format!("bytes=0-{}", len - 1))
            .call()
            .map_err(transport)?;
        let status = response.status().as_u16();
        if status == 416 {
            return Err(FetchError::Permanent(
                "the object is empty (HTTP 416 to a GET of its first bytes)".into(),
            ));
        }
        check_ranged_status(status)?;
        let header = |name: &str| header(&response, name);
        let range = header("content-range");
        let (size, got) = match range.as_deref().and_then(parse_content_range) {
            Some((0, to, Some(total))) if to < total && to < len => (total, to + 1),
            _ => {
                return Err(FetchError::Permanent(format!(
                    "the server answered bytes 0-{} with Content-Range {:?}",
                    len - 1,
                    range.unwrap_or_default()
                )))
            }
        };
        let info = object_info(&response, size);
        if got != len.min(size) {
            return Err(FetchError::Permanent(format!(
                "the server answered bytes 0-{} of a {size}-byte object with bytes 0-{}",
                len - 1,
                got - 1
            )));
        }
        Ok((info, read_body(response, 0, got)?))
    }

    /// The object's last `len` bytes (all of it if it is smaller), with its size and validator:
    /// `(position of the first byte, what the server said of the object, the bytes)`.
    pub fn get_tail(
        &self,
        endpoint: &Endpoint,
        len: u64,
    ) -> Result<(u64, ObjectInfo, Vec<u8>), FetchError> {
        let len = len.max(1);
        let response = self
            .agent
            .get(&endpoint.get_url())
            .header("range", &format!("bytes=-{len}"))
            .call()
            .map_err(transport)?;
        check_ranged_status(response.status().as_u16())?;
        let header = |name: &str| header(&response, name);
        let range = header("content-range");
        let (from, size) = match range.as_deref().and_then(parse_content_range) {
            Some((from, to, Some(total))) if to + 1 == total && from <= to && to - from < len => {
                (from, total)
            }
            _ => {
                return Err(FetchError::Permanent(format!(
                    "the server answered the last {len} bytes with Content-Range {:?}",
                    range.unwrap_or_default()
                )))
            }
        };
        let info = object_info(&response, size);
        Ok((from, info, read_body(response, from, size - from)?))
    }

    /// Bytes `start..start + len` of the object, which must still be `info`'s version.
    pub fn get_range(
        &self,
        endpoint: &Endpoint,
        info: &ObjectInfo,
        start: u64,
        len: u64,
    ) -> Result<Vec<u8>, FetchError> {
        if len == 0 {
            return Ok(Vec::new());
        }
        let response = self.send_ranged(endpoint, info, start, len)?;
        read_body(response, start, len)
    }

    /// Bytes `start..start + len` of the object, which must still be `info`'s version, handed
    /// to `on_chunk` `chunk` bytes at a time as they arrive (the last chunk may be shorter).
    pub fn get_chunks(
        &self,
        endpoint: &Endpoint,
        info: &ObjectInfo,
        start: u64,
        len: u64,
        chunk: u64,
        on_chunk: &mut dyn FnMut(Vec<u8>),
    ) -> Result<(), FetchError> {
        if len == 0 {
            return Ok(());
        }
        let response = self.send_ranged(endpoint, info, start, len)?;
        let mut body = response
            .into_body()
            .into_with_config()
            .limit(len + 1)
            .reader();
        let mut at = 0u64;
        while at < len {
            let take = chunk.max(1).min(len - at);
            let mut bytes = vec![0u8; take as usize];
            body.read_exact(&mut bytes).map_err(|e| {
                FetchError::Transient(format!(
                    "reading bytes {}-{}: {e}",
                    start + at,
                    start + at + take - 1
                ))
            })?;
            at += take;
            on_chunk(bytes);
        }
        Ok(())
    }

    /// Sends a GET of bytes `start..start + len` (`len` > 0) conditional on `info`'s version and
    /// checks the answer's status and headers; the body is the caller's to read.
    fn send_ranged(
        &self,
        endpoint: &Endpoint,
        info: &ObjectInfo,
        start: u64,
        len: u64,
    ) -> Result<ureq::http::Response<ureq::Body>, FetchError> {
        let end = start + len - 1;
        let mut request = self
            .agent
            .get(&endpoint.get_url())
            .header("range", &format!("bytes={start}-{end}"));
        if let Some(etag) = &info.etag {
            request = request.header("if-match", etag);
        } else if let Some(modified) = &info.last_modified {
            request = request.header("if-unmodified-since", modified);
        }
        let response = request.call().map_err(transport)?;
        let status = response.status().as_u16();
        if status == 412 {
            return Err(FetchError::Changed(format!(
                "the server refused the pinned version ({})",
                info.version()
            )));
        }
        check_ranged_status(status)?;
        let header = |name: &str| header(&response, name);
        if let (Some(pinned), Some(now)) = (&info.etag, header("etag")) {
            if *pinned != now {
                return Err(FetchError::Changed(format!("ETag {pinned} is now {now}")));
            }
        }
        match header("content-range")
            .as_deref()
            .and_then(parse_content_range)
        {
            Some((from, to, total)) if from == start && to == end && total == Some(info.size) => {
                Ok(response)
            }
            Some((_, _, total)) if total.is_some_and(|t| t != info.size) => {
                Err(FetchError::Changed(format!(
                    "its size was {} bytes and is now {}",
                    info.size,
                    total.unwrap_or_default()
                )))
            }
            _ => Err(FetchError::Permanent(format!(
                "the server answered bytes {start}-{end} with Content-Range {:?}",
                header("content-range").unwrap_or_default()
            ))),
        }
    }
}

/// The body of a 206 answer to bytes `start..start + len`, which must be exactly that long.
fn read_body(
    response: ureq::http::Response<ureq::Body>,
    start: u64,
    len: u64,
) -> Result<Vec<u8>, FetchError> {
    let end = start + len - 1;
    let want = usize::try_from(len)
        .map_err(|_| FetchError::Permanent(format!("a {len}-byte range is too large")))?;
    let mut body = Vec::with_capacity(want);
    let read = response
        .into_body()
        .into_with_config()
        .limit(len + 1)
        .reader()
        .take(len + 1)
        .read_to_end(&mut body);
    match read {
        Ok(_) if body.len() == want => Ok(body),
        Ok(_) => Err(FetchError::Transient(format!(
            "the body of bytes {start}-{end} had {} bytes instead of {len}",
            body.len()
        ))),
        Err(e) => Err(FetchError::Transient(format!(
            "reading bytes {start}-{end}: {e}"
        ))),
    }
}

/// Refuses an answer to a ranged GET that is not 206 (a server ignoring ranges answers 200).
fn check_ranged_status(status: u16) -> Result<(), FetchError> {
    if status == 200 {
        return Err(FetchError::Permanent(
            "the server ignores HTTP range requests (it answered 200 to a ranged GET); \
             serve the image from a server that supports them"
                .into(),
        ));
    }
    check_status(status, "GET")?;
    if status != 206 {
        return Err(FetchError::Permanent(format!(
            "unexpected HTTP status {status} to a ranged GET"
        )));
    }
    Ok(())
}

use std::io::Read as _;

/// What `response` says of the object, `size` bytes long: its validators.
fn object_info(response: &ureq::http::Response<ureq::Body>, size: u64) -> ObjectInfo {
    ObjectInfo {
        size,
        etag: header(response, "etag"),
        last_modified: header(response, "last-modified"),
    }
}

/// Header `name` of `response`, if present and text.
fn header(response: &ureq::http::Response<ureq::Body>, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// A failure below HTTP (connect, TLS, a cut connection, a timeout): worth another try.
fn transport(e: ureq::Error) -> FetchError {
    FetchError::Transient(e.to_string())
}

/// Turns an error status into a [`FetchError`]; success statuses pass.
fn check_status(status: u16, method: &str) -> Result<(), FetchError> {
    match status {
        200..=299 => Ok(()),
        408 | 429 | 500..=599 => Err(FetchError::Transient(format!(
            "the server answered {method} with HTTP {status}"
        ))),
        401 | 403 => Err(FetchError::Permanent(format!(
            "the server refused access (HTTP {status}); check the credentials"
        ))),
        404 => Err(FetchError::Permanent("no such object (HTTP 404)".into())),
        _ => Err(FetchError::Permanent(format!(
            "the server answered {method} with HTTP {status}"
        ))),
    }
}

/// `bytes FROM-TO/TOTAL` (TOTAL may be `*`).
fn parse_content_range(value: &str) -> Option<(u64, u64, Option<u64>)> {
    let rest = value.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (from, to) = range.split_once('-')?;
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse().ok()?),
    };
    Some((from.trim().parse().ok()?, to.trim().parse().ok()?, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_ranges_parse() {
        assert_eq!(
            parse_content_range("bytes 0-99/1000"),
            Some((0, 99, Some(1000)))
        );
        assert_eq!(parse_content_range("bytes 5-9/*"), Some((5, 9, None)));
        assert_eq!(parse_content_range("bytes */1000"), None);
        assert_eq!(parse_content_range("items 0-1/2"), None);
    }

    #[test]
    fn statuses_sort_into_retry_or_not() {
        assert!(check_status(206, "GET").is_ok());
        assert!(matches!(
            check_status(503, "GET"),
            Err(FetchError::Transient(_))
        ));
        assert!(matches!(
            check_status(429, "GET"),
            Err(FetchError::Transient(_))
        ));
        assert!(matches!(
            check_status(404, "GET"),
            Err(FetchError::Permanent(_))
        ));
        assert!(matches!(
            check_status(403, "GET"),
            Err(FetchError::Permanent(_))
        ));
    }
}
