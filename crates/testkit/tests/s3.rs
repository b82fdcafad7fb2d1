//! The S3 server as testkit starts it (s3s-fs): objects put through it land in the bucket's
//! subdirectory with S3's ETag (the MD5, checked with md5sum), signed ranged GETs answer with the
//! right bytes, unsigned or wrongly signed requests are refused. The requests are made with curl's
//! own Signature V4 signing, so no S3 client of ours is involved.

mod common;

use common::pattern;
use std::process::Command;
use testkit::s3::S3Server;

/// The status, headers (lowercased names) and body of `curl ARGS`.
fn curl(args: &[String]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body");
    let out = Command::new("curl")
        .args(["-sS", "-D", "-", "-o"])
        .arg(&body)
        .args(args)
        .output()
        .expect("run curl");
    assert!(out.status.success(), "curl {args:?}: {out:?}");
    let head = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, std::fs::read(&body).unwrap_or_default())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

fn md5_etag(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f");
    std::fs::write(&file, bytes).unwrap();
    let out = Command::new("md5sum").arg(&file).output().expect("md5sum");
    let text = String::from_utf8(out.stdout).unwrap();
    format!("\"{}\"", text.split_whitespace().next().unwrap())
}

#[test]
fn signed_ranged_gets_work_and_unsigned_ones_are_refused() {
    let server = match S3Server::start() {
        Ok(s) => s,
        Err(reason) => return testkit::skip(&reason),
    };
    assert!(server.endpoint().starts_with("http://127.0.0.1:"));
    assert_eq!(server.region(), "us-east-1");
    assert!(!server.access_key().is_empty() && server.secret_key().len() >= 32);
    let object = pattern(2 * 1024 * 1024 + 17, 3);
    let etag = server.put("images", "dir/image.sqfs", &object).unwrap();
    assert_eq!(
        etag,
        md5_etag(&object),
        "a single-part object's ETag is its MD5"
    );
    let stored = std::fs::read(server.root().join("images/dir/image.sqfs")).unwrap();
    assert!(stored == object, "a bucket is a subdirectory of the root");

    let url = server.url("images", "dir/image.sqfs");
    let signed = |extra: &[&str]| {
        let mut args = server.curl_auth();
        args.extend(extra.iter().map(|s| s.to_string()));
        args.push(url.clone());
        curl(&args)
    };
    let (status, headers, body) = signed(&["-H", "Range: bytes=1048576-2097151"]);
    assert_eq!(status, 206);
    assert!(body == object[1_048_576..2_097_152]);
    assert_eq!(
        header(&headers, "content-range"),
        Some("bytes 1048576-2097151/2097169")
    );
    assert_eq!(header(&headers, "etag"), Some(etag.as_str()));
    let (status, headers, _) = signed(&["-I"]);
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "content-length"), Some("2097169"));
    assert_eq!(header(&headers, "etag"), Some(etag.as_str()));
    let (status, _, body) = signed(&["-H", "Range: bytes=-17"]);
    assert_eq!((status, &body[..]), (206, &object[object.len() - 17..]));

    let (status, _, _) = curl(&["-H".into(), "Range: bytes=0-9".into(), url.clone()]);
    assert_eq!(status, 403, "an unsigned request is refused");
    let wrong = vec![
        "--aws-sigv4".into(),
        "aws:amz:us-east-1:s3".into(),
        "--user".into(),
        format!("{}:not-the-secret", server.access_key()),
        "-H".into(),
        "x-amz-content-sha256: UNSIGNED-PAYLOAD".into(),
        url.clone(),
    ];
    assert_eq!(curl(&wrong).0, 403, "a wrong secret is refused");
    let missing = server.url("images", "dir/missing");
    let mut args = server.curl_auth();
    args.push(missing);
    assert_eq!(curl(&args).0, 404);

    // A new version: a new ETag on every answer, and the new bytes.
    let new_object = pattern(5000, 4);
    let new_etag = server.put("images", "dir/image.sqfs", &new_object).unwrap();
    assert_eq!(new_etag, md5_etag(&new_object));
    let (status, headers, body) = signed(&["-H", "Range: bytes=0-99"]);
    assert_eq!((status, &body[..]), (206, &new_object[..100]));
    assert_eq!(header(&headers, "etag"), Some(new_etag.as_str()));
}

#[test]
fn bad_names_are_refused_before_any_request() {
    let server = match S3Server::start() {
        Ok(s) => s,
        Err(reason) => return testkit::skip(&reason),
    };
    assert!(server.put("UPPER", "k", b"x").is_err());
    assert!(server.put("ok-bucket", "sp ace", b"x").is_err());
    assert!(server.put("ok-bucket", "/lead", b"x").is_err());
    assert!(server.put("ok-bucket", "fine/key.bin", b"x").is_ok());
}
