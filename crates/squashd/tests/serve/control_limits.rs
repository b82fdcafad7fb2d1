//! The control socket under abuse (README, "Who may do what": connection limits and
//! deadlines): a local user who opens hundreds of connections and sends a byte now and then
//! holds no thread of the daemon's when refused, only a few when allowed, and root is still
//! answered at once; a request that trickles in is cut off by a deadline on the whole request.

use super::*;

/// A client script run as another uid: opens `n` connections to the socket, sends the start of
/// a request on each, prints `ready`, then sends one more byte on each every second for `hold`
/// seconds. At the end it prints, as JSON, how many connections got an answer containing each
/// of the words given after `hold`.
const FLOOD: &str = r#"
import json, socket, sys, time
path, n, hold, words = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
conns = []
for _ in range(n):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    try:
        s.send(b'{"op": "status"')
    except OSError:
        pass
    conns.append(s)
print("ready", flush=True)
end = time.time() + hold
while time.time() < end:
    for s in conns:
        try:
            s.send(b" ")
        except OSError:
            pass
    time.sleep(1)
answers = []
for s in conns:
    s.setblocking(False)
    try:
        answers.append(s.recv(4096).decode(errors="replace"))
    except OSError:
        answers.append("")
print(json.dumps({w: sum(w in a for a in answers) for w in words}), flush=True)
"#;

/// Starts `cmd` as `uid` (gid the same, no supplementary groups), its stdout piped.
fn spawn_as(uid: u32, mut cmd: Command) -> Child {
    as_user(&mut cmd, uid);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The number of threads of `pid`, from /proc/PID/status.
fn threads_of(pid: i32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

/// Floods `daemon` from `uid` with 300 dribbling connections; returns the most threads the
/// daemon had above `baseline` while they were open, and the flood script's counts of answers
/// containing each of `words`.
fn flood(daemon: &Daemon, uid: u32, baseline: u64, words: &[&str]) -> (u64, Value) {
    let mut cmd = Command::new("python3");
    cmd.args(["-c", FLOOD])
        .arg(&daemon.socket)
        .args(["300", "4"])
        .args(words);
    let mut child = spawn_as(uid, cmd);
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "the flood did not start");
    // Every connection is open: watch the daemon's threads for a while, and ask as root.
    let mut most = 0;
    for _ in 0..10 {
        most = most.max(threads_of(daemon.pid()).saturating_sub(baseline));
        std::thread::sleep(Duration::from_millis(150));
    }
    let asked = Instant::now();
    let root = squashd_as(0, &daemon.socket, &["status", "--json"]);
    let took = asked.elapsed();
    assert!(
        root.status.success(),
        "root's status during the flood: {root:?}"
    );
    assert!(took < Duration::from_secs(3), "root waited {took:?}");
    line.clear();
    out.read_line(&mut line).unwrap();
    assert!(child.wait().unwrap().success());
    let counts = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    (most, counts)
}

#[test]
fn a_flood_of_slow_connections_holds_no_threads_and_root_is_answered() {
    if !testkit::can_mount() {
        return;
    }
    let scratch = Scratch::new();
    let daemon = Daemon::ready(scratch.path(), "flood", "allow_uids = [65534]\n");
    let baseline = settled_footprint(daemon.pid()).1;

    // A uid the config does not name: refused on the accepting thread, each with the reason.
    let (most, counts) = flood(&daemon, 65533, baseline, &["allow_uids"]);
    assert!(
        most <= 4,
        "300 refused connections made {most} threads over {baseline}"
    );
    assert_eq!(counts["allow_uids"], 300, "refusals seen: {counts}");
    // A well-behaved refused client still reads its refusal, not a reset connection.
    let nobody = squashd_as(65533, &daemon.socket, &["status"]);
    let err = String::from_utf8_lossy(&nobody.stderr);
    assert!(
        err.contains("permission denied") && err.contains("allow_uids"),
        "{err}"
    );

    // An allowed uid: a few connections at once are served, the rest told to wait.
    let baseline = settled_footprint(daemon.pid()).1;
    let (most, counts) = flood(&daemon, 65534, baseline, &["too many connections"]);
    assert!(
        most <= 12,
        "300 connections of one allowed uid made {most} threads over {baseline}"
    );
    let turned_away = counts["too many connections"].as_u64().unwrap();
    assert!(turned_away >= 280, "turned away: {counts}");
    // The limit is on connections at once: afterwards the uid is served again.
    let allowed = squashd_as(65534, &daemon.socket, &["status", "--json"]);
    assert!(allowed.status.success(), "{allowed:?}");
    daemon.terminate();
}

/// A client script: connects, sends the start of a status request, then one byte a second
/// until the daemon ends the connection or `limit` seconds pass; prints, as JSON, how long the
/// connection lasted and what the daemon sent.
const DRIBBLE: &str = r#"
import json, select, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
limit = float(sys.argv[2])
start = time.time()
s.send(b'{"op": "status"')
got, ended = b"", False
while time.time() - start < limit and not ended:
    readable, _, _ = select.select([s], [], [], 1.0)
    if readable:
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        got += data
        ended = not data
        continue
    try:
        s.send(b" ")
    except OSError:
        ended = True
print(json.dumps({"secs": time.time() - start, "ended": ended, "answer": got.decode(errors="replace")}))
"#;

#[test]
fn a_request_that_trickles_in_is_cut_off_by_its_deadline() {
    if !testkit::can_mount() {
        return;
    }
    let scratch = Scratch::new();
    let daemon = Daemon::ready(scratch.path(), "dribble", "allow_uids = [65534]\n");
    let mut cmd = Command::new("python3");
    cmd.args(["-c", DRIBBLE]).arg(&daemon.socket).arg("20");
    let out = run_as(65534, cmd);
    assert!(out.status.success(), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    // A byte a second never trips a timeout per read; the deadline (10 s) is on the whole.
    assert_eq!(report["ended"], true, "still open after 20 s: {report}");
    let secs = report["secs"].as_f64().unwrap();
    assert!(
        (9.0..15.0).contains(&secs),
        "ended after {secs} s: {report}"
    );
    let answer = report["answer"].as_str().unwrap();
    assert!(answer.contains("within 10 s"), "{report}");
    daemon.terminate();
}
