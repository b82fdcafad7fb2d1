//! The fault-injection server, checked with a raw client: what it answers without faults (HEAD,
//! ranges, If-Match, keep-alive, counters), then each fault on its own, then that it stops
//! promptly with clients still connected.

mod common;

use common::{pattern, Client};
use std::io::ErrorKind;
use std::time::{Duration, Instant};
use testkit::http::FaultServer;

const LEN: usize = 300_000;

fn server() -> (FaultServer, Vec<u8>) {
    let object = pattern(LEN, 1);
    (
        FaultServer::start("/dir/image.sqfs", object.clone()),
        object,
    )
}

#[test]
fn answers_head_ranges_and_if_match_on_one_connection() {
    let (server, object) = server();
    assert!(
        server.url().ends_with("/dir/image.sqfs"),
        "{}",
        server.url()
    );
    let etag = server.etag();
    assert!(etag.len() > 2 && etag.starts_with('"') && etag.ends_with('"'));
    let path = "/dir/image.sqfs";
    let mut c = Client::connect(server.addr());

    let head = c.request("HEAD", path, &[]);
    assert_eq!(head.status, 200);
    assert_eq!(head.header("Content-Length"), Some("300000"));
    assert_eq!(head.header("ETag"), Some(etag.as_str()));
    assert_eq!(head.header("Accept-Ranges"), Some("bytes"));
    assert!(head.body.is_empty());

    let r = c.get_range(path, "1000-1999", &[]);
    assert_eq!(r.status, 206);
    assert_eq!(r.body, object[1000..2000]);
    assert_eq!(r.header("Content-Range"), Some("bytes 1000-1999/300000"));
    assert_eq!(r.header("ETag"), Some(etag.as_str()));

    let r = c.get_range(path, "299990-400000", &[]);
    assert_eq!((r.status, &r.body[..]), (206, &object[299_990..]));
    let r = c.get_range(path, "-5", &[]);
    assert_eq!((r.status, &r.body[..]), (206, &object[LEN - 5..]));
    let r = c.get_range(path, "300000-300010", &[]);
    assert_eq!(r.status, 416);
    assert_eq!(r.header("Content-Range"), Some("bytes */300000"));

    let r = c.get_range(path, "0-9", &[("If-Match", &etag)]);
    assert_eq!((r.status, &r.body[..]), (206, &object[..10]));
    let r = c.get_range(path, "0-9", &[("If-Match", "*")]);
    assert_eq!(r.status, 206, "* matches any tag");
    let list = format!("\"other\", {etag}");
    let r = c.get_range(path, "0-9", &[("If-Match", &list)]);
    assert_eq!(r.status, 206, "a list matches if one tag does");
    let r = c.get_range(path, "0-9", &[("If-Match", "\"other\"")]);
    assert_eq!(r.status, 412);
    assert!(r.body.is_empty());
    let weak = format!("W/{etag}");
    let r = c.get_range(path, "0-9", &[("If-Match", &weak)]);
    assert_eq!(r.status, 412, "a weak tag never matches strongly");

    let r = c.request("GET", path, &[]);
    assert_eq!((r.status, r.body == object), (200, true));
    assert_eq!(c.request("GET", "/other", &[]).status, 404);
    assert_eq!(c.request("DELETE", path, &[]).status, 405);

    let stats = server.stats();
    assert_eq!(stats.connections, 1, "all on one keep-alive connection");
    // The GET of /other is counted apart from the object's requests.
    assert_eq!((stats.requests, stats.heads, stats.gets), (12, 1, 10));
    assert_eq!(stats.other_paths, 1);
    assert_eq!(
        stats.ranges,
        vec![
            1000..2000,
            299_990..300_000,
            299_995..300_000,
            0..10,
            0..10,
            0..10,
            0..10,
            0..10
        ]
    );
    assert_eq!(stats.precondition_failed, 2);
    assert_eq!(stats.body_bytes, 1000 + 10 + 5 + 10 + 10 + 10 + LEN as u64);
    server.reset_stats();
    assert_eq!(server.stats(), testkit::http::Stats::default());
}

#[test]
fn closes_after_http_1_0_connection_close_and_malformed_requests() {
    let (server, _) = server();
    let mut c = Client::connect(server.addr());
    c.send_raw(b"HEAD /dir/image.sqfs HTTP/1.0\r\n\r\n");
    let r = c.read_response(true);
    assert_eq!((r.status, r.header("Connection")), (200, Some("close")));
    assert!(c.closed_within(Duration::from_secs(5)));

    let mut c = Client::connect(server.addr());
    let r = c.request("HEAD", "/dir/image.sqfs", &[("Connection", "close")]);
    assert_eq!(r.header("Connection"), Some("close"));
    assert!(c.closed_within(Duration::from_secs(5)));

    let mut c = Client::connect(server.addr());
    c.send_raw(b"NONSENSE\r\n\r\n");
    assert_eq!(c.read_response(true).status, 400);
    assert!(c.closed_within(Duration::from_secs(5)));
}

#[test]
fn cut_resets_the_next_k_bodies_after_n_bytes() {
    let (server, object) = server();
    server.cut_after(1000, 2);
    for _ in 0..2 {
        let mut c = Client::connect(server.addr());
        let r = c.get_range("/dir/image.sqfs", "0-99999", &[]);
        assert_eq!(r.status, 206);
        assert!(!r.complete);
        assert!(r.body.len() <= 1000, "{} bytes came", r.body.len());
        assert_eq!(r.body, object[..r.body.len()], "what came is right");
        assert_eq!(
            r.error,
            Some(ErrorKind::ConnectionReset),
            "an RST, not a FIN"
        );
    }
    // A HEAD has no body and is not cut; the third body is whole again.
    let mut c = Client::connect(server.addr());
    assert_eq!(c.request("HEAD", "/dir/image.sqfs", &[]).status, 200);
    let r = c.get_range("/dir/image.sqfs", "0-99999", &[]);
    assert!(r.complete && r.body == object[..100_000]);
    let stats = server.stats();
    assert_eq!((stats.cuts, stats.connections), (2, 3));
}

#[test]
fn truncation_announces_the_full_length_and_closes_cleanly() {
    let (server, object) = server();
    server.truncate_after(500, 1);
    let mut c = Client::connect(server.addr());
    let r = c.get_range("/dir/image.sqfs", "100-4195", &[]);
    assert_eq!(r.header("Content-Length"), Some("4096"));
    assert_eq!(
        r.body,
        object[100..600],
        "exactly 500 bytes, the right ones"
    );
    assert_eq!((r.complete, r.error), (false, None), "a clean close");
    assert!(c.closed_within(Duration::from_secs(5)));
    let mut c = Client::connect(server.addr());
    assert!(c.get_range("/dir/image.sqfs", "100-4195", &[]).complete);
    assert_eq!(server.stats().truncations, 1);
}

#[test]
fn delay_holds_each_answer() {
    let (server, _) = server();
    let mut c = Client::connect(server.addr());
    let t = Instant::now();
    assert_eq!(c.request("HEAD", "/dir/image.sqfs", &[]).status, 200);
    let undelayed = t.elapsed();
    server.set_delay(Duration::from_millis(300));
    for _ in 0..2 {
        let t = Instant::now();
        assert_eq!(c.get_range("/dir/image.sqfs", "0-0", &[]).status, 206);
        assert!(
            t.elapsed() >= Duration::from_millis(300),
            "{:?}",
            t.elapsed()
        );
    }
    assert!(undelayed < Duration::from_millis(300), "{undelayed:?}");
    server.clear_faults();
    let t = Instant::now();
    c.request("HEAD", "/dir/image.sqfs", &[]);
    assert!(
        t.elapsed() < Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn error_bursts_answer_the_next_k_requests_and_keep_the_connection() {
    let (server, object) = server();
    let mut c = Client::connect(server.addr());
    server.fail_next(2, 503);
    for _ in 0..2 {
        let r = c.get_range("/dir/image.sqfs", "0-9", &[]);
        assert_eq!(r.status, 503);
        assert!(r.complete);
    }
    assert_eq!(
        c.get_range("/dir/image.sqfs", "0-9", &[]).body,
        object[..10]
    );
    server.fail_next(1, 500);
    assert_eq!(c.request("HEAD", "/dir/image.sqfs", &[]).status, 500);
    assert_eq!(c.request("HEAD", "/dir/image.sqfs", &[]).status, 200);
    let stats = server.stats();
    assert_eq!((stats.injected_errors, stats.connections), (3, 1));
}

#[test]
fn a_replaced_object_has_a_new_etag_and_fails_the_old_one() {
    let (server, _) = server();
    let old = server.etag();
    let new_object = pattern(1234, 2);
    let new = server.replace(new_object.clone());
    assert_ne!(old, new);
    assert_eq!(server.etag(), new);
    let mut c = Client::connect(server.addr());
    let r = c.get_range("/dir/image.sqfs", "0-99", &[("If-Match", &old)]);
    assert_eq!(r.status, 412);
    let r = c.get_range("/dir/image.sqfs", "0-99", &[("If-Match", &new)]);
    assert_eq!((r.status, &r.body[..]), (206, &new_object[..100]));
    let head = c.request("HEAD", "/dir/image.sqfs", &[]);
    assert_eq!(head.header("Content-Length"), Some("1234"));
    // The same bytes again still get a new tag: every replacement is a new version.
    assert_ne!(server.replace(new_object), new);
}

#[test]
fn ignoring_range_answers_200_with_the_whole_object() {
    let (server, object) = server();
    server.ignore_range(true);
    let mut c = Client::connect(server.addr());
    let r = c.get_range("/dir/image.sqfs", "0-9", &[]);
    assert_eq!(r.status, 200);
    assert!(r.body == object);
    assert_eq!(r.header("Accept-Ranges"), None);
    server.ignore_range(false);
    assert_eq!(c.get_range("/dir/image.sqfs", "0-9", &[]).status, 206);
}

#[test]
fn serves_parallel_connections() {
    let (server, object) = server();
    std::thread::scope(|s| {
        for i in 0..8usize {
            let (server, object) = (&server, &object);
            s.spawn(move || {
                let mut c = Client::connect(server.addr());
                for j in 0..20 {
                    let start = (i * 30_000 + j * 1000) % (LEN - 5000);
                    let range = format!("{start}-{}", start + 4999);
                    let r = c.get_range("/dir/image.sqfs", &range, &[]);
                    assert_eq!(r.body, object[start..start + 5000]);
                }
            });
        }
    });
    let stats = server.stats();
    assert_eq!((stats.connections, stats.gets), (8, 160));
}

#[test]
fn drop_stops_promptly_with_clients_connected_and_answers_delayed() {
    let (server, _) = server();
    let mut idle = Client::connect(server.addr());
    assert_eq!(idle.request("HEAD", "/dir/image.sqfs", &[]).status, 200);
    server.set_delay(Duration::from_secs(60));
    let addr = server.addr();
    let waiting = std::thread::spawn(move || {
        let mut c = Client::connect(addr);
        c.send_raw(b"GET /dir/image.sqfs HTTP/1.1\r\nHost: x\r\n\r\n");
        c.closed_within(Duration::from_secs(30))
    });
    std::thread::sleep(Duration::from_millis(200)); // the request is in its delay
    let t = Instant::now();
    drop(server);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(idle.closed_within(Duration::from_secs(5)));
    assert!(
        waiting.join().unwrap(),
        "the delayed request's connection is closed"
    );
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "nothing listens any more"
    );
}
