//! Remote images: a [`squashd_core::source::Source`] over HTTP(S) range requests and S3,
//! fetched lazily in aligned units, one fetch per unit however many readers miss it, kept in a
//! disk cache shared by every image of a process.
#![forbid(unsafe_code)]

pub mod disk_cache;
