//! [`S3Server`]: a real S3-compatible server on 127.0.0.1, with credentials, for the tests of
//! `s3://` images: s3s-fs (crates.io; `scripts/setup.sh` installs it into `~/.cargo/bin`), which
//! checks AWS Signature V4 and keeps each bucket as a subdirectory of its root directory.
//!
//! What s3s-fs 0.14.1 does and does not do, as the tests of remote images need to know:
//! ranged GETs answer 206 with Content-Range; every answer carries the object's ETag (its MD5, in
//! quotes, for an object put in one request); requests must be signed and carry
//! `x-amz-content-sha256` (as real S3 wants); but `If-Match` on GET is not evaluated (a
//! mismatching tag still gets 206, through s3s-fs 0.17), so a replaced object shows only as a
//! different ETag on the answer.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The region the server is addressed as: s3s-fs accepts any, clients need one to sign.
const REGION: &str = "us-east-1";
/// How long s3s-fs may take to report that it listens.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A running s3s-fs on 127.0.0.1 with a fresh root directory and random credentials; stopped
/// (killed and reaped) when dropped. Requests address it path-style:
/// `{endpoint}/{bucket}/{key}`.
pub struct S3Server {
    child: Child,
    endpoint: String,
    access_key: String,
    secret_key: String,
    root: PathBuf,
    /// Holds the root and the server's log; removed after the server is stopped.
    _dir: tempfile::TempDir,
}

impl S3Server {
    /// Starts s3s-fs on a port of its choosing and returns once it listens. Err gives the reason
    /// it cannot run here (not installed, would not start), for the test to print as its skip.
    pub fn start() -> Result<S3Server, String> {
        let program = find_s3s_fs()?;
        let dir = tempfile::Builder::new()
            .prefix("testkit-s3")
            .tempdir()
            .map_err(|e| format!("cannot make the S3 server's directory: {e}"))?;
        // The log goes beside the root, not in it, where s3s-fs would list it as a bucket.
        let root = dir.path().join("root");
        std::fs::create_dir(&root).map_err(|e| format!("cannot make {}: {e}", root.display()))?;
        let log_path = dir.path().join("s3s-fs.log");
        let log = File::create(&log_path).map_err(|e| format!("cannot create the log: {e}"))?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let access_key = format!("TESTKIT{}", random_string(13, true));
        let secret_key = random_string(40, false);
        let mut child = Command::new(&program)
            .args(["--host", "127.0.0.1", "--port", "0"])
            .args(["--access-key", &access_key, "--secret-key", &secret_key])
            .arg(&root)
            .env("RUST_LOG", "s3s_fs=info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
        let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
        // Port 0 lets the kernel choose, so no other process can take the port first; s3s-fs
        // says which it got: "server is running at http://127.0.0.1:PORT".
        let outcome = crate::http::poll_until(START_TIMEOUT, || {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(Err(format!("s3s-fs exited ({status})")));
            }
            let log = read_log();
            let at = log.find("server is running at ")?;
            let endpoint: String = log[at + "server is running at ".len()..]
                .chars()
                .take_while(|c| !c.is_whitespace())
                .collect();
            Some(Ok(endpoint))
        });
        match outcome {
            Some(Ok(endpoint)) if endpoint.starts_with("http://127.0.0.1:") => Ok(S3Server {
                child,
                endpoint,
                access_key,
                secret_key,
                root,
                _dir: dir,
            }),
            other => {
                let _ = child.kill();
                let _ = child.wait();
                let why = match other {
                    Some(Err(e)) => e,
                    Some(Ok(endpoint)) => format!("s3s-fs listens at {endpoint}, not 127.0.0.1"),
                    None => format!("s3s-fs did not say it listens within {START_TIMEOUT:?}"),
                };
                Err(format!("{why}: {}", read_log().trim()))
            }
        }
    }

    /// Stores `bytes` as `key` in `bucket` (creating the bucket), through a signed PutObject so
    /// that s3s-fs records the object's ETag as S3 would; returns the ETag with its quotes.
    pub fn put(&self, bucket: &str, key: &str, bytes: &[u8]) -> Result<String, String> {
        let staging = tempfile::NamedTempFile::new().map_err(|e| e.to_string())?;
        std::fs::write(staging.path(), bytes).map_err(|e| e.to_string())?;
        self.put_file(bucket, key, staging.path())
    }

    /// Stores the file at `path` as `key` in `bucket`, as [`S3Server::put`] does.
    /// Bucket names follow S3's rules (3 to 63 of `a-z 0-9 . -`); keys are limited to
    /// `A-Z a-z 0-9 . _ - /`, which need no escaping in a signed URL.
    pub fn put_file(&self, bucket: &str, key: &str, path: &Path) -> Result<String, String> {
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
        if !bucket_ok {
            return Err(format!("{bucket:?} is not an S3 bucket name"));
        }
        let key_ok = !key.is_empty()
            && !key.starts_with('/')
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b));
        if !key_ok {
            return Err(format!("{key:?}: keys here are limited to A-Za-z0-9._-/"));
        }
        // s3s-fs keeps a bucket as a subdirectory of its root.
        std::fs::create_dir_all(self.root.join(bucket)).map_err(|e| e.to_string())?;
        let out = Command::new("curl")
            .args(["-sS", "-o", "/dev/null", "-D", "-", "-w", "%{http_code}"])
            .args(self.curl_auth())
            .arg("-T")
            .arg(path)
            .arg(self.url(bucket, key))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run curl (scripts/setup.sh installs it): {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let status = text.lines().last().unwrap_or_default();
        if !out.status.success() || status != "200" {
            return Err(format!(
                "PUT {} answered {status}: {}",
                self.url(bucket, key),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        text.lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(name, _)| name.eq_ignore_ascii_case("etag"))
            .map(|(_, value)| value.trim().to_owned())
            .ok_or_else(|| format!("PUT {} answered without an ETag", self.url(bucket, key)))
    }

    /// The arguments that make curl sign a request for this server:
    /// `--aws-sigv4 aws:amz:REGION:s3 --user KEY:SECRET -H x-amz-content-sha256:UNSIGNED-PAYLOAD`
    /// (curl 7.88 signs but does not add that header, which s3s-fs requires).
    pub fn curl_auth(&self) -> Vec<String> {
        vec![
            "--aws-sigv4".into(),
            format!("aws:amz:{REGION}:s3"),
            "--user".into(),
            format!("{}:{}", self.access_key, self.secret_key),
            "-H".into(),
            "x-amz-content-sha256: UNSIGNED-PAYLOAD".into(),
        ]
    }

    /// `http://127.0.0.1:PORT`, the endpoint to configure an S3 client with (path-style).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The object's path-style URL, `{endpoint}/{bucket}/{key}`.
    pub fn url(&self, bucket: &str, key: &str) -> String {
        format!("{}/{bucket}/{key}", self.endpoint)
    }

    /// The access key id requests must be signed with.
    pub fn access_key(&self) -> &str {
        &self.access_key
    }

    /// The secret access key requests must be signed with.
    pub fn secret_key(&self) -> &str {
        &self.secret_key
    }

    /// The region to sign for.
    pub fn region(&self) -> &str {
        REGION
    }

    /// The server's root directory: one subdirectory per bucket, objects as files under it.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// s3s-fs on PATH, else where `cargo install` puts it.
fn find_s3s_fs() -> Result<PathBuf, String> {
    let runs = |p: &Path| {
        Command::new(p)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let candidates =
        std::iter::once(PathBuf::from("s3s-fs")).chain(cargo_home.map(|h| h.join("bin/s3s-fs")));
    for candidate in candidates {
        if runs(&candidate) {
            return Ok(candidate);
        }
    }
    Err("s3s-fs is not installed (scripts/setup.sh installs it with cargo install)".into())
}

fn random_string(len: usize, upper: bool) -> String {
    (0..len)
        .map(|_| {
            if upper {
                fastrand::uppercase()
            } else {
                fastrand::alphanumeric()
            }
        })
        .collect()
}
