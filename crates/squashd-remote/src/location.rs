//! Where a remote image lives: an `http://` or `https://` URL, or `s3://bucket/key`.

use std::fmt;

/// A remote image's address, as given on a command line or in a config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// An object on an HTTP(S) server that answers range requests.
    Http {
        /// The URL as given (it may carry a token in its query: never shown: see its `Display`).
        url: String,
    },
    /// An object in an S3-compatible store.
    S3 {
        /// The bucket.
        bucket: String,
        /// The object's key in the bucket.
        key: String,
    },
}

/// Whether `name` names a remote image rather than a local file.
pub fn is_remote(name: &str) -> bool {
    ["http://", "https://", "s3://"].iter().any(|scheme| {
        name.len() > scheme.len() && name[..scheme.len()].eq_ignore_ascii_case(scheme)
    })
}

impl Location {
    /// Parses `name`; an error saying what is wrong when it is not a remote address squashd
    /// knows.
    pub fn parse(name: &str) -> Result<Location, String> {
        if !is_remote(name) {
            return Err(format!(
                "{name}: not a remote image address (http://, https:// or s3://)"
            ));
        }
        let lower = name.to_ascii_lowercase();
        if lower.starts_with("s3://") {
            let rest = &name["s3://".len()..];
            let (bucket, key) = rest
                .split_once('/')
                .filter(|(bucket, key)| !bucket.is_empty() && !key.is_empty())
                .ok_or_else(|| format!("{name}: an S3 address is s3://BUCKET/KEY"))?;
            return Ok(Location::S3 {
                bucket: bucket.to_string(),
                key: key.to_string(),
            });
        }
        Ok(Location::Http {
            url: name.to_string(),
        })
    }
}

/// Shows the address without what may be a secret: user and password of an HTTP URL, and its
/// query (a pre-signed URL's signature), are replaced by `…`.
impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::S3 { bucket, key } => write!(f, "s3://{bucket}/{key}"),
            Location::Http { url } => f.write_str(&redact(url)),
        }
    }
}

/// `url` with its user information and query left out.
fn redact(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (authority, path) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, ""),
    };
    let host = match authority.rsplit_once('@') {
        Some((_, host)) => format!("…@{host}"),
        None => authority.to_string(),
    };
    let path = match path.split_once('?') {
        Some((path, _)) => format!("{path}?…"),
        None => path.to_string(),
    };
    format!("{scheme}://{host}{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_print_without_secrets() {
        assert!(is_remote("HTTPS://h/x"));
        assert!(!is_remote("/srv/img.sqfs"));
        assert!(!is_remote("http://"));
        let s3 = Location::parse("s3://bucket/dir/img.sqfs").unwrap();
        assert_eq!(
            s3,
            Location::S3 {
                bucket: "bucket".into(),
                key: "dir/img.sqfs".into()
            }
        );
        assert!(Location::parse("s3://bucket").is_err());
        assert!(Location::parse("s3:///key").is_err());
        let http = Location::parse("https://me:pw@h:8443/a/img.sqfs?X-Amz-Signature=abc").unwrap();
        assert_eq!(http.to_string(), "https://…@h:8443/a/img.sqfs?…");
        assert_eq!(
            Location::parse("http://h/img").unwrap().to_string(),
            "http://h/img"
        );
    }
}
