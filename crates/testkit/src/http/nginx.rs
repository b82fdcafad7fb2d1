//! [`Nginx`]: Debian's nginx as the test's child, serving one directory on 127.0.0.1.

use super::{free_port, poll_until, probe};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How many ports to try: each attempt fails only if another process took the port between
/// [`free_port`] and nginx's bind, so a handful of attempts is plenty.
const PORT_ATTEMPTS: usize = 8;
/// How long nginx may take to answer its first request before the start counts as failed.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A running nginx serving a directory as static files: ranged GETs answer 206 with
/// Content-Range, every answer carries nginx's ETag (`"<mtime hex>-<size hex>"`), and `If-Match`
/// with another ETag answers 412 and closes the connection (while its header says keep-alive),
/// so a client must be ready to reconnect after one. Stopped (killed and reaped) when dropped.
///
/// nginx runs in the foreground as one process (`daemon off`, `master_process off`), so the test
/// owns it directly and, as root, it keeps root's rights to read the served directory (with a
/// master process its workers would switch to `nobody`). Everything it writes (configuration,
/// pid, logs, temporary files) stays in a temporary directory of its own.
pub struct Nginx {
    child: Child,
    addr: SocketAddr,
    state: tempfile::TempDir,
}

impl Nginx {
    /// Starts nginx serving `dir` at `http://127.0.0.1:PORT/`, and returns once it answers.
    /// Err gives the reason it cannot run here (not installed, would not start), for the test to
    /// print as its skip.
    pub fn serve(dir: &Path) -> Result<Nginx, String> {
        Nginx::serve_with(dir, "")
    }

    /// [`Nginx::serve`] with `server_directives` added to the configuration's `server` block
    /// (e.g. a `location` that answers without validators), for a test of what a server
    /// configured so does to a client.
    pub fn serve_with(dir: &Path, server_directives: &str) -> Result<Nginx, String> {
        let program = find_nginx()?;
        let dir = std::fs::canonicalize(dir)
            .map_err(|e| format!("cannot serve {}: {e}", dir.display()))?;
        let root = config_path(&dir)?;
        let state = tempfile::Builder::new()
            .prefix("testkit-nginx")
            .tempdir()
            .map_err(|e| format!("cannot make nginx's state directory: {e}"))?;
        let state_dir = config_path(state.path())?;
        for sub in ["body", "proxy", "fastcgi", "uwsgi", "scgi"] {
            std::fs::create_dir(state.path().join(sub))
                .map_err(|e| format!("cannot make nginx's temporary directory: {e}"))?;
        }
        let conf = state.path().join("nginx.conf");
        let error_log = state.path().join("error.log");
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port().map_err(|e| format!("no free port on 127.0.0.1: {e}"))?;
            std::fs::write(&conf, config(&state_dir, &root, port, server_directives))
                .map_err(|e| format!("cannot write {}: {e}", conf.display()))?;
            let mut child = Command::new(&program)
                .arg("-p")
                .arg(state.path())
                .arg("-c")
                .arg(&conf)
                .arg("-e")
                .arg(&error_log)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let outcome = poll_until(START_TIMEOUT, || match child.try_wait() {
                Ok(Some(status)) => Some(Err(status.to_string())),
                Err(e) => Some(Err(e.to_string())),
                Ok(None) => probe(addr, Duration::from_millis(500))
                    .filter(|head| head.to_ascii_lowercase().contains("server: nginx"))
                    .map(Ok),
            });
            match outcome {
                Some(Ok(_)) => return Ok(Nginx { child, addr, state }),
                Some(Err(status)) => {
                    let log = std::fs::read_to_string(&error_log).unwrap_or_default();
                    if log.contains("Address already in use") {
                        continue;
                    }
                    return Err(format!("nginx exited ({status}): {}", last_lines(&log)));
                }
                None => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let log = std::fs::read_to_string(&error_log).unwrap_or_default();
                    return Err(format!(
                        "nginx did not answer on {addr} within {START_TIMEOUT:?}: {}",
                        last_lines(&log)
                    ));
                }
            }
        }
        Err(format!(
            "nginx found no free port on 127.0.0.1 in {PORT_ATTEMPTS} attempts"
        ))
    }

    /// The URL of `path` (relative to the served directory; a leading `/` is optional).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}/{}", self.addr, path.trim_start_matches('/'))
    }

    /// The address nginx listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// nginx's access log so far, one line per request:
    /// `METHOD URI "RANGE" STATUS BODY_BYTES` (RANGE is `-` without a Range header).
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.state.path().join("access.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// nginx is in /usr/sbin, which is on root's PATH but often not on a user's.
fn find_nginx() -> Result<PathBuf, String> {
    let on_path = Command::new("nginx")
        .arg("-v")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if on_path {
        return Ok(PathBuf::from("nginx"));
    }
    let sbin = PathBuf::from("/usr/sbin/nginx");
    if sbin.exists() {
        return Ok(sbin);
    }
    Err("nginx is not installed (scripts/setup.sh installs nginx-light)".into())
}

/// `path` as a string to put in double quotes in nginx's configuration; refuses the characters
/// that quoting does not make literal there (`$` starts a variable in `root`).
fn config_path(path: &Path) -> Result<String, String> {
    let s = path
        .to_str()
        .ok_or_else(|| format!("{} is not UTF-8: nginx cannot be given it", path.display()))?;
    if s.contains(['"', '\\', '$']) {
        return Err(format!("{s} holds \", \\ or $: nginx cannot be given it"));
    }
    Ok(s.to_owned())
}

fn config(state: &str, root: &str, port: u16, server_directives: &str) -> String {
    format!(
        r#"daemon off;
master_process off;
worker_processes 1;
pid "{state}/nginx.pid";
error_log "{state}/error.log" warn;
events {{ worker_connections 1024; }}
http {{
    default_type application/octet-stream;
    log_format ranges '$request_method $uri "$http_range" $status $body_bytes_sent';
    access_log "{state}/access.log" ranges;
    client_body_temp_path "{state}/body";
    proxy_temp_path "{state}/proxy";
    fastcgi_temp_path "{state}/fastcgi";
    uwsgi_temp_path "{state}/uwsgi";
    scgi_temp_path "{state}/scgi";
    sendfile on;
    # A remote image's client keeps its connections for a whole mount: nginx's default closes a
    # connection after 1000 requests.
    keepalive_requests 1000000;
    server {{
        listen 127.0.0.1:{port};
        root "{root}";
        {server_directives}
    }}
}}
"#
    )
}

fn last_lines(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let tail = &lines[lines.len().saturating_sub(3)..];
    if tail.is_empty() {
        "(nothing in its error log)".into()
    } else {
        tail.join(" | ")
    }
}
