//! Fetching with retries: transient failures (a cut connection, a short body, 5xx, 429) are
//! tried again after an exponential, jittered backoff, a bounded number of times; every request
//! and retry is counted.

use crate::http::{Client, Endpoint, FetchError, ObjectInfo};
use crate::stats::Counters;
use std::sync::Arc;
use std::time::Duration;

/// Backoff before the first retry; doubled each time up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Sends one object's requests, retrying what is worth retrying.
pub(crate) struct Fetcher {
    client: Client,
    endpoint: Endpoint,
    retries: u32,
    counters: Arc<Counters>,
}

impl Fetcher {
    pub fn new(client: Client, endpoint: Endpoint, retries: u32, counters: Arc<Counters>) -> Self {
        Fetcher {
            client,
            endpoint,
            retries,
            counters,
        }
    }

    /// The object's size and validator, and its first `len` bytes (see [`Client::open`]).
    pub fn open(&self, len: u64) -> Result<(ObjectInfo, Vec<u8>), FetchError> {
        let (info, bytes) = self.with_retries(|| self.client.open(&self.endpoint, len))?;
        Counters::add(&self.counters.bytes_fetched, bytes.len() as u64);
        Ok((info, bytes))
    }

    /// The object's last `len` bytes, asked for once (no retry: see [`Client::get_tail`]).
    pub fn tail(&self, len: u64) -> Result<(u64, ObjectInfo, Vec<u8>), FetchError> {
        Counters::add(&self.counters.requests, 1);
        let (start, info, bytes) = self.client.get_tail(&self.endpoint, len)?;
        Counters::add(&self.counters.bytes_fetched, bytes.len() as u64);
        Ok((start, info, bytes))
    }

    /// Bytes `start..start + len` of the object in `info`'s version.
    pub fn get(&self, info: &ObjectInfo, start: u64, len: u64) -> Result<Vec<u8>, FetchError> {
        let bytes =
            self.with_retries(|| self.client.get_range(&self.endpoint, info, start, len))?;
        Counters::add(&self.counters.bytes_fetched, bytes.len() as u64);
        Ok(bytes)
    }

    /// Bytes `start..start + len` of the object in `info`'s version, handed to `on_chunk` as
    /// `(position, bytes)` `chunk` bytes at a time as they arrive. A retry after a failure
    /// mid-body asks only for what has not arrived.
    pub fn get_chunks(
        &self,
        info: &ObjectInfo,
        start: u64,
        len: u64,
        chunk: u64,
        mut on_chunk: impl FnMut(u64, Vec<u8>),
    ) -> Result<(), FetchError> {
        let mut arrived = 0u64;
        self.with_retries(|| {
            self.client.get_chunks(
                &self.endpoint,
                info,
                start + arrived,
                len - arrived,
                chunk,
                &mut |bytes| {
                    let n = bytes.len() as u64;
                    Counters::add(&self.counters.bytes_fetched, n);
                    on_chunk(start + arrived, bytes);
                    arrived += n;
                },
            )
        })
    }

    fn with_retries<T>(
        &self,
        mut attempt: impl FnMut() -> Result<T, FetchError>,
    ) -> Result<T, FetchError> {
        let mut backoff = FIRST_BACKOFF;
        let mut tries = 0;
        loop {
            Counters::add(&self.counters.requests, 1);
            match attempt() {
                Err(FetchError::Transient(why)) if tries < self.retries => {
                    tries += 1;
                    Counters::add(&self.counters.retries, 1);
                    tracing::debug!("retry {tries} of {} after: {why}", self.retries);
                    // Jitter (0.5x-1.5x) keeps many readers that failed together from coming back
                    // together.
                    std::thread::sleep(backoff.mul_f64(0.5 + fastrand::f64()));
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Err(FetchError::Transient(why)) => {
                    Counters::add(&self.counters.failures, 1);
                    return Err(FetchError::Transient(format!(
                        "{why} (gave up after {tries} retries)"
                    )));
                }
                Err(e) => {
                    Counters::add(&self.counters.failures, 1);
                    return Err(e);
                }
                Ok(value) => return Ok(value),
            }
        }
    }
}
