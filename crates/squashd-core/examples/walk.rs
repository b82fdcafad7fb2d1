//! Walks an image and prints every path with its size and a content checksum.
//! Usage: cargo run --example walk IMAGE
use squashd_core::{FileKind, Image, Inode, OpenOptions};

fn walk(image: &Image, dir: &Inode, path: &mut Vec<u8>) -> squashd_core::Result<()> {
    for e in image.read_dir(dir)? {
        let len = path.len();
        path.push(b'/');
        path.extend_from_slice(&e.name);
        let inode = image.inode(e.id)?;
        let mut sum = 0u64;
        if inode.kind == FileKind::File {
            let f = image.open_file(&inode)?;
            let mut buf = vec![0u8; 65536];
            let mut off = 0;
            loop {
                let n = f.read_at(off, &mut buf)?;
                if n == 0 {
                    break;
                }
                sum = buf[..n]
                    .iter()
                    .fold(sum, |a, &b| a.wrapping_mul(31).wrapping_add(b as u64));
                off += n as u64;
            }
        }
        println!(
            "{} {:?} {:o} {} {} {:x}",
            String::from_utf8_lossy(path),
            inode.kind,
            inode.mode(),
            inode.size,
            inode.nlink,
            sum
        );
        if inode.is_dir() {
            walk(image, &inode, path)?;
        }
        path.truncate(len);
    }
    Ok(())
}

fn main() {
    let path = std::env::args().nth(1).expect("usage: walk IMAGE");
    let image = Image::open(&path, &OpenOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let root = image.root().unwrap_or_else(|e| panic!("{e}"));
    if let Err(e) = walk(&image, &root, &mut Vec::new()) {
        eprintln!("{e}");
        std::process::exit(1);
    }
    eprintln!("{:?}", image.stats());
}
