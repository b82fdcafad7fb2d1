//! Mounts one image through the kernel path and serves it until it is unmounted: for trying the
//! kernel path by hand and timing it before `squashd mount -o kernel`.
//!
//! `cargo run --release -p squashd-kernel --example kmount IMAGE MOUNTPOINT BLOB_DIR`

use nix::mount::MsFlags;
use squashd_core::{Image, OpenOptions};
use squashd_kernel::{KernelMountOptions, KernelPath, Prepared};
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [image, mountpoint, blob_dir] = args.as_slice() else {
        eprintln!("usage: kmount IMAGE MOUNTPOINT BLOB_DIR");
        std::process::exit(2);
    };
    let started = std::time::Instant::now();
    let kernel = KernelPath::start(
        blob_dir,
        squashd_core::cores(),
        squashd_fuse::server::UringMode::Auto,
    )?;
    let image = Image::open(image, &OpenOptions::default())?;
    let prepared = Prepared::new(image, &KernelMountOptions::default())?;
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    let mount = kernel.mount(prepared, mountpoint, mountpoint, flags)?;
    let s = mount.stats();
    eprintln!(
        "mounted in {:.3} s: translation {:.3} s, {} inodes, metadata {} bytes, blob {} bytes",
        started.elapsed().as_secs_f64(),
        s.elapsed.as_secs_f64(),
        s.nodes,
        s.metadata_bytes,
        s.blob_bytes
    );
    mount.wait_unmounted();
    Ok(())
}
