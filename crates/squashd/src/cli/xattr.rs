//! `squashd xattr` (not written yet).

/// Arguments of `squashd xattr`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    image: super::ImageArgs,
}

/// Runs `squashd xattr`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let _image = args.image.open()?;
    anyhow::bail!("squashd xattr is not implemented yet")
}
