//! Every way a data block reaches the data cache gives the image's bytes: decompressed straight
//! into the cache's allocation (full blocks) or copied at their size (last blocks, fragment
//! blocks), stored uncompressed, through the compressed tier or not, with a data cache so small
//! that blocks are evicted and loaded again.

mod common;

use common::walk_image;
use squashd_core::{CacheBudgets, Image, OpenOptions};
use testkit::{assert_records_eq, walk_disk, Built, TreeOptions};

#[test]
fn data_blocks_read_right_through_every_load_path() {
    if !testkit::have_squashfs_tools() {
        testkit::skip("mksquashfs and unsquashfs are not installed");
        return;
    }
    let built = Built::new(&TreeOptions {
        many_entries: 50,
        ..TreeOptions::default()
    });
    let expected = walk_disk(&built.src);
    // 128 KiB blocks (the data cache's common case) and 1 MiB ones; lz4 leaves incompressible
    // blocks stored as they are.
    let images = [
        built.image("zstd", &["-comp", "zstd"]),
        built.image("gzip-1m", &["-comp", "gzip", "-b", "1M"]),
        built.image("lz4", &["-comp", "lz4"]),
    ];
    let budgets = [
        ("default", CacheBudgets::default()),
        (
            "compressed tier",
            CacheBudgets::default().with_compressed(8 << 20),
        ),
        // Smaller than the tree's data: blocks are evicted and loaded again.
        (
            "tiny",
            CacheBudgets::new(1 << 20, 2 << 20).with_compressed(1 << 20),
        ),
    ];
    for path in &images {
        for (name, budget) in &budgets {
            let options = OpenOptions::default().with_budgets(*budget);
            let image = Image::open(path, &options).unwrap();
            // Twice: the second walk reads what the first left in the caches.
            for pass in 0..2 {
                let walked = walk_image(&image, false);
                let ctx = format!("{} with {name} caches, pass {pass}", path.display());
                assert_records_eq(&expected, &walked.records, &ctx);
            }
            let stats = image.stats();
            assert!(stats.data.loads > 0, "{}: {stats:?}", path.display());
            if budget.compressed_bytes > 0 {
                assert!(stats.compressed.loads > 0, "{}: {stats:?}", path.display());
            }
        }
    }
}
