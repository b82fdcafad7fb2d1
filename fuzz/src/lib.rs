//! Shared code of the fuzz targets. The exerciser lives in `exercise.rs` so that
//! `crates/squashd-core/tests/hostile.rs` runs exactly the same walk on its hostile images.

#[path = "exercise.rs"]
pub mod exercise;
