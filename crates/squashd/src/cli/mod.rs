//! The offline subcommands, and what they share: how an image is named and opened.

pub mod cat;
pub mod display;
pub mod extract;
pub mod info;
pub mod ls;
pub mod progress;
pub mod stat;
pub mod tree;
pub mod verify;
pub mod walk;
pub mod xattr;

use crate::size::parse_size;
use squashd_core::container::Located;
use squashd_core::{CacheBudgets, Image, OpenOptions};
use std::path::PathBuf;

/// The image operand and the options every subcommand takes to open it.
#[derive(clap::Args, Debug, Clone)]
pub struct ImageArgs {
    /// The SquashFS image (or an AppImage or Apptainer SIF file holding one): a file, or an
    /// http://, https:// or s3://BUCKET/KEY address.
    pub image: PathBuf,
    /// Byte offset of the image in the file [default: found in an AppImage or SIF file, else 0].
    #[arg(long, short = 'o', value_name = "BYTES")]
    pub offset: Option<u64>,
    /// The SIF partition to read, by descriptor id (`squashd info` lists them) [default: the
    /// primary system partition].
    #[arg(long, value_name = "ID", conflicts_with = "offset")]
    pub partition: Option<u32>,
    /// Budget of the decompressed metadata cache, e.g. 64MiB.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub metadata_cache: Option<u64>,
    /// Budget of the decompressed data cache, e.g. 256MiB.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub data_cache: Option<u64>,
    /// For a remote image: keep fetched data in this directory, shared with later runs.
    #[arg(long, value_name = "DIR")]
    pub disk_cache: Option<PathBuf>,
    /// For a remote image: budget of the disk cache.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "4GiB")]
    pub disk_cache_size: u64,
    /// Checking the image against a dm-verity hash tree.
    #[command(flatten)]
    pub verity: crate::verity::VerityArgs,
}

impl ImageArgs {
    /// Opens the image with the options given; without `--offset`, where its container (an
    /// AppImage or SIF file) says it starts.
    pub fn open(&self) -> anyhow::Result<Image> {
        Ok(self.open_located()?.0)
    }

    /// How the image is opened: with caches of the budgets given.
    pub(crate) fn open_options(&self) -> OpenOptions {
        let defaults = CacheBudgets::default();
        OpenOptions::default().with_budgets(CacheBudgets::new(
            self.metadata_cache.unwrap_or(defaults.metadata_bytes),
            self.data_cache.unwrap_or(defaults.data_bytes),
        ))
    }

    /// Opens the image as [`ImageArgs::open`] does, and says where it was found: `None` when
    /// `--offset` was given.
    pub fn open_located(&self) -> anyhow::Result<(Image, Option<Located>)> {
        let (image, located, _) = self.open_verified()?;
        Ok((image, located))
    }

    /// Opens the image as [`ImageArgs::open_located`] does, and says how it is verified:
    /// `None` when it is not.
    pub(crate) fn open_verified(
        &self,
    ) -> anyhow::Result<(Image, Option<Located>, Option<crate::verity::Verified>)> {
        let verity = self.verity.options()?;
        let mut options = self.open_options();
        let remote = crate::remote::RemoteSettings {
            disk_cache_dir: self.disk_cache.clone(),
            disk_cache_bytes: self.disk_cache_size,
            ..Default::default()
        };
        let opened = crate::remote::open(&self.image, self.offset, self.partition, &remote)?;
        if let Some(source) = &opened.remote {
            progress::show_fetching(source.clone());
        }
        let caches = crate::verity::image_caches(&mut options);
        let (opened, verified) =
            crate::verity::verify_opened(opened, &self.image, &verity, &caches)?;
        let image = Image::from_source(
            opened.source,
            opened.name,
            &options.with_offset(opened.offset),
        )?;
        Ok((image, opened.located, verified))
    }
}

/// The error a command returns when it has already printed what went wrong (e.g. `cat` of
/// several paths, some missing): the exit status becomes 1 and nothing more is printed.
#[derive(Debug)]
pub struct AlreadyReported;

impl std::fmt::Display for AlreadyReported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("errors were reported")
    }
}

impl std::error::Error for AlreadyReported {}

/// A command used wrongly (an unknown mount option, a bad value, a path that may not be given):
/// exit status 2, as for the usage errors clap finds.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// The exit status for a failed command: 2 for a usage error, 1 for any other failure.
pub fn exit_code(e: &anyhow::Error) -> std::process::ExitCode {
    if e.chain().any(|cause| cause.is::<UsageError>()) {
        std::process::ExitCode::from(2)
    } else {
        std::process::ExitCode::from(1)
    }
}

/// Prints an error as one line on stderr: "squashd: <what went wrong>: <its causes>", the chain
/// joined with ": " as anyhow's `{:#}` does.
pub fn report_error(e: &anyhow::Error) {
    if e.is::<AlreadyReported>() {
        return;
    }
    eprintln!("squashd: {}", one_line(e));
}

/// The error and its causes on one line, each cause once. squashd-core's errors still print
/// their io source in their message as well as chaining it: a cause whose text already ends
/// the line is that repetition, and is skipped. (With errors that do one or the other, this
/// is exactly `{:#}`.)
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let cause = cause.to_string();
        if line.is_empty() {
            line = cause;
        } else if !line.ends_with(&cause) {
            line.push_str(": ");
            line.push_str(&cause);
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::one_line;
    use anyhow::Context;
    use std::io;

    /// An error that prints its source and also chains it, as squashd-core's do today.
    #[derive(Debug)]
    struct Repeats(io::Error);

    impl std::fmt::Display for Repeats {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "img: cannot open: {}", self.0)
        }
    }

    impl std::error::Error for Repeats {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    fn not_found() -> io::Error {
        io::Error::from_raw_os_error(2)
    }

    #[test]
    fn a_chain_is_joined_like_alternate_display() {
        let e = anyhow::Error::new(not_found()).context("x: cannot create");
        assert_eq!(one_line(&e), format!("{e:#}"));
        assert_eq!(
            one_line(&e),
            "x: cannot create: No such file or directory (os error 2)"
        );
    }

    #[test]
    fn a_source_the_message_already_prints_is_shown_once() {
        let e = anyhow::Error::new(Repeats(not_found()));
        assert_eq!(
            one_line(&e),
            "img: cannot open: No such file or directory (os error 2)"
        );
        let e = Err::<(), _>(Repeats(not_found()))
            .context("while listing")
            .unwrap_err();
        assert_eq!(
            one_line(&e),
            "while listing: img: cannot open: No such file or directory (os error 2)"
        );
    }
}
