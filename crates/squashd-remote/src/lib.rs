//! Remote images: a [`squashd_core::source::Source`] over HTTP(S) range requests and S3,
//! fetched lazily in aligned units, one fetch per unit however many readers miss it, kept in a
//! disk cache shared by every image of a process.
//!
//! The HTTP client is ureq (blocking): squashd's readers are threads (FUSE workers, extraction
//! threads), so an async client would need a runtime to block on for nothing, and retries must
//! be counted here to show in `status`, which a client retrying inside itself hides. S3 requests
//! are signed by rusty-s3, which only signs and leaves the transport to us.
#![forbid(unsafe_code)]

pub mod disk_cache;
mod fetch;
mod gate;
pub mod http;
pub mod image_source;
mod inflight;
pub mod location;
mod prefetch;
mod s3;
mod source;
mod stats;

pub use http::ObjectInfo;
pub use location::{is_remote, Location};
pub use source::{RemoteOptions, RemoteSource};
pub use stats::RemoteStats;
