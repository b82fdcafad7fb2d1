//! `squashd walk` (not written yet).

/// Arguments of `squashd walk`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    image: super::ImageArgs,
}

/// Runs `squashd walk`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let _image = args.image.open()?;
    anyhow::bail!("squashd walk is not implemented yet")
}
