//! `squashd stat` (not written yet).

/// Arguments of `squashd stat`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    image: super::ImageArgs,
}

/// Runs `squashd stat`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let _image = args.image.open()?;
    anyhow::bail!("squashd stat is not implemented yet")
}
