//! S3 addressing and request signing, configured the way AWS's own tools are: credentials,
//! region and endpoint from the environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`, `AWS_REGION`/`AWS_DEFAULT_REGION`, `AWS_ENDPOINT_URL_S3`/`AWS_ENDPOINT_URL`,
//! `AWS_PROFILE`), else from the shared files (`~/.aws/credentials`, `~/.aws/config`, or the
//! files `AWS_SHARED_CREDENTIALS_FILE`/`AWS_CONFIG_FILE` name). Without credentials, requests go
//! unsigned (a public bucket). Secrets are held here and put only into signatures: nothing in
//! this module formats them into a message.

use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};
use std::path::PathBuf;
use std::time::Duration;

/// How long a signed request stays valid: long enough for a slow transfer, short enough that a
/// URL seen by a proxy is soon worthless.
const SIGNATURE_LIFETIME: Duration = Duration::from_secs(15 * 60);

/// Signs requests for one object.
#[derive(Clone)]
pub struct S3Object {
    bucket: Bucket,
    key: String,
    credentials: Option<Credentials>,
}

impl std::fmt::Debug for S3Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The credentials are left out on purpose.
        f.debug_struct("S3Object")
            .field("bucket", &self.bucket.name())
            .field("key", &self.key)
            .field("signed", &self.credentials.is_some())
            .finish()
    }
}

impl S3Object {
    /// The object `key` of `bucket`, configured from the environment and AWS's shared files.
    pub fn from_environment(bucket: &str, key: &str) -> Result<S3Object, String> {
        let settings = Settings::load();
        let region = settings
            .region
            .clone()
            .unwrap_or_else(|| "us-east-1".to_string());
        let (endpoint, style) = match &settings.endpoint {
            // S3-compatible servers are mostly addressed by path (the bucket is not a host name).
            Some(endpoint) => (endpoint.clone(), UrlStyle::Path),
            None => (
                format!("https://s3.{region}.amazonaws.com"),
                UrlStyle::VirtualHost,
            ),
        };
        let endpoint = endpoint
            .parse()
            .map_err(|e| format!("S3 endpoint {endpoint}: not a URL: {e}"))?;
        let bucket = Bucket::new(endpoint, style, bucket.to_string(), region)
            .map_err(|e| format!("s3://{bucket}: {e}"))?;
        Ok(S3Object {
            bucket,
            key: key.to_string(),
            credentials: settings.credentials,
        })
    }

    /// The object's URL without a signature: its endpoint, bucket and key, which tell two
    /// objects apart (two endpoints may hold a bucket of the same name).
    pub fn unsigned_url(&self) -> String {
        match self.bucket.object_url(&self.key) {
            Ok(url) => url.to_string(),
            // A key that makes no URL: the parts themselves, which the endpoint's URL begins.
            Err(_) => format!(
                "{}\0{}\0{}",
                self.bucket.base_url(),
                self.bucket.name(),
                self.key
            ),
        }
    }

    /// A signed URL for a GET of the object (a Range header is not part of the signature).
    pub fn get_url(&self) -> String {
        self.bucket
            .get_object(self.credentials.as_ref(), &self.key)
            .sign(SIGNATURE_LIFETIME)
            .to_string()
    }
}

/// What the environment and the shared files say.
#[derive(Default)]
struct Settings {
    credentials: Option<Credentials>,
    region: Option<String>,
    endpoint: Option<String>,
}

impl Settings {
    fn load() -> Settings {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let profile = env("AWS_PROFILE").unwrap_or_else(|| "default".to_string());
        let home = env("HOME").map(PathBuf::from);
        let file = |var: &str, name: &str| {
            env(var)
                .map(PathBuf::from)
                .or_else(|| home.as_ref().map(|h| h.join(".aws").join(name)))
        };
        let credentials_file = file("AWS_SHARED_CREDENTIALS_FILE", "credentials")
            .and_then(|p| ini::Ini::load_from_file(p).ok());
        let config_file =
            file("AWS_CONFIG_FILE", "config").and_then(|p| ini::Ini::load_from_file(p).ok());
        // In the config file a profile's section is `[profile NAME]`, except `[default]`.
        let config_section = if profile == "default" {
            "default".to_string()
        } else {
            format!("profile {profile}")
        };
        let from_files = |key: &str| {
            credentials_file
                .as_ref()
                .and_then(|ini| ini.get_from(Some(profile.as_str()), key))
                .or_else(|| {
                    config_file
                        .as_ref()
                        .and_then(|ini| ini.get_from(Some(config_section.as_str()), key))
                })
                .map(str::to_string)
        };
        let credentials = match (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
            (Some(key), Some(secret)) => Some((key, secret, env("AWS_SESSION_TOKEN"))),
            _ => match (
                from_files("aws_access_key_id"),
                from_files("aws_secret_access_key"),
            ) {
                (Some(key), Some(secret)) => Some((key, secret, from_files("aws_session_token"))),
                _ => None,
            },
        }
        .map(|(key, secret, token)| match token {
            Some(token) => Credentials::new_with_token(key, secret, token),
            None => Credentials::new(key, secret),
        });
        Settings {
            credentials,
            region: env("AWS_REGION")
                .or_else(|| env("AWS_DEFAULT_REGION"))
                .or_else(|| from_files("region")),
            endpoint: env("AWS_ENDPOINT_URL_S3")
                .or_else(|| env("AWS_ENDPOINT_URL"))
                .or_else(|| from_files("endpoint_url")),
        }
    }
}
