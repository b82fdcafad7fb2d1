//! Debian's nginx, as started by testkit, answers as remote images need: ranges with 206 and
//! Content-Range, a quoted ETag that changes with the file, If-Match honoured (412), 416 past the
//! end. Checked with a raw client against the file's bytes.

mod common;

use common::{pattern, Client};
use testkit::http::Nginx;

#[test]
fn nginx_serves_ranges_etags_and_if_match() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let object = pattern(300_000, 7);
    std::fs::write(dir.path().join("sub/image.sqfs"), &object).unwrap();
    let nginx = match Nginx::serve(dir.path()) {
        Ok(n) => n,
        Err(reason) => return testkit::skip(&reason),
    };
    let url = nginx.url("/sub/image.sqfs");
    assert_eq!(url, nginx.url("sub/image.sqfs"));
    assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/sub/image.sqfs"));
    let path = "/sub/image.sqfs";
    let mut c = Client::connect(nginx.addr());

    let head = c.request("HEAD", path, &[]);
    assert_eq!(head.status, 200);
    assert_eq!(head.header("Content-Length"), Some("300000"));
    assert_eq!(head.header("Accept-Ranges"), Some("bytes"));
    let etag = head.header("ETag").expect("an ETag").to_owned();
    assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");

    let r = c.get_range(path, "131072-262143", &[("If-Match", &etag)]);
    assert_eq!(r.status, 206);
    assert!(r.body == object[131_072..262_144]);
    assert_eq!(
        r.header("Content-Range"),
        Some("bytes 131072-262143/300000")
    );
    assert_eq!(r.header("ETag"), Some(etag.as_str()));
    let r = c.get_range(path, "299000-", &[]);
    assert_eq!((r.status, &r.body[..]), (206, &object[299_000..]));
    let r = c.get_range(path, "300000-300100", &[]);
    assert_eq!(r.status, 416);
    assert_eq!(c.request("GET", "/missing", &[]).status, 404);
    let r = c.get_range(path, "0-99", &[("If-Match", "\"not-it\"")]);
    assert_eq!(r.status, 412);
    // nginx closes the connection after a 412 (while saying keep-alive): clients must reconnect.
    assert!(c.closed_within(std::time::Duration::from_secs(5)));
    let mut c = Client::connect(nginx.addr());

    // A new version of the file (another size) gets another ETag, and the old one fails.
    std::fs::write(dir.path().join("sub/image.sqfs"), &object[..1000]).unwrap();
    let head = c.request("HEAD", path, &[]);
    let new_etag = head.header("ETag").expect("an ETag").to_owned();
    assert_ne!(new_etag, etag);
    assert_eq!(
        c.get_range(path, "0-99", &[("If-Match", &etag)]).status,
        412
    );
    let mut c = Client::connect(nginx.addr());
    let r = c.get_range(path, "0-99", &[("If-Match", &new_etag)]);
    assert_eq!((r.status, &r.body[..]), (206, &object[..100]));

    let log = nginx.access_log();
    assert!(
        log.contains("GET /sub/image.sqfs \"bytes=131072-262143\" 206 131072"),
        "{log}"
    );
    assert!(
        log.contains("GET /sub/image.sqfs \"bytes=0-99\" 412 "),
        "{log}"
    );
}

#[test]
fn nginx_servers_run_side_by_side_and_stop_when_dropped() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), b"0123456789").unwrap();
    let a = match Nginx::serve(dir.path()) {
        Ok(n) => n,
        Err(reason) => return testkit::skip(&reason),
    };
    let b = Nginx::serve(dir.path()).expect("a second nginx");
    assert_ne!(a.addr(), b.addr());
    for server in [&a, &b] {
        let r = Client::connect(server.addr()).get_range("/f", "2-4", &[]);
        assert_eq!((r.status, &r.body[..]), (206, &b"234"[..]));
    }
    let addr = a.addr();
    drop(a);
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "nothing listens any more"
    );
}

#[test]
fn a_missing_directory_is_a_reason_not_a_panic() {
    let err = Nginx::serve(std::path::Path::new("/nonexistent/testkit")).err();
    assert!(err.is_some_and(|e| e.contains("/nonexistent/testkit")));
}
