//! `squashd info` (not written yet).

/// Arguments of `squashd info`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    image: super::ImageArgs,
}

/// Runs `squashd info`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let _image = args.image.open()?;
    anyhow::bail!("squashd info is not implemented yet")
}
