//! `squashd extract` (not written yet).

/// Arguments of `squashd extract`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    image: super::ImageArgs,
}

/// Runs `squashd extract`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let _image = args.image.open()?;
    anyhow::bail!("squashd extract is not implemented yet")
}
