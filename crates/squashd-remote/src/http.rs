//! One HTTP exchange at a time: a HEAD for the object's size and validator, a ranged GET for
//! its bytes, each answer checked against what was asked. No retrying here (see `fetch`): each
//! failure says whether trying again could help.

use crate::location::Location;
use crate::s3::S3Object;
use std::time::Duration;

/// What a HEAD said of the object; the validator is pinned for the life of a mount.
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

    fn head_url(&self) -> String {
        match self {
            Endpoint::Http(url) => url.clone(),
            Endpoint::S3(object) => object.head_url(),
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

    /// The object's size and validator.
    pub fn head(&self, endpoint: &Endpoint) -> Result<ObjectInfo, FetchError> {
        let response = self
            .agent
            .head(&endpoint.head_url())
            .call()
            .map_err(transport)?;
        check_status(response.status().as_u16(), "HEAD")?;
        let header = |name: &str| header(&response, name);
        let size = header("content-length")
            .and_then(|len| len.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                FetchError::Permanent("the server gave no Content-Length for the image".into())
            })?;
        Ok(ObjectInfo {
            size,
            etag: header("etag"),
            last_modified: header("last-modified"),
        })
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
            Some((from, to, total)) if from == start && to == end && total == Some(info.size) => {}
            Some((_, _, total)) if total.is_some_and(|t| t != info.size) => {
                return Err(FetchError::Changed(format!(
                    "its size was {} bytes and is now {}",
                    info.size,
                    total.unwrap_or_default()
                )))
            }
            _ => {
                return Err(FetchError::Permanent(format!(
                    "the server answered bytes {start}-{end} with Content-Range {:?}",
                    header("content-range").unwrap_or_default()
                )))
            }
        }
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
}

use std::io::Read as _;

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
