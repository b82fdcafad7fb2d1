"""Blocks read ahead wait in the data cache for their reader among the blocks not yet used
again (the cache's cold ring). With read-ahead on, the package keeps room there for the window
of read-ahead across files, so that a full cache does not evict blocks read ahead before their
reader comes, to decompress them a second time."""

from __future__ import annotations

import time

import squashd
from conftest import random_files_image


def test_blocks_read_ahead_in_a_full_cache_wait_for_their_reader(tmp_path):
    # Small files, their bytes in 4 KiB fragment blocks (~4.5 MB), which fill a 2 MiB data
    # cache. Read-ahead's window (128 files, ~50 fragment blocks) waits among the blocks not
    # yet used again, for which the cache keeps 3% of its budget (~60 KiB) by default.
    image_path, contents = random_files_image(
        tmp_path, 3000, lambda i: 100 + (i * 2654435761) % 3000, lambda i: f"f{i:04}")
    loads = {}
    for read_ahead in (0, 2):
        with squashd.open(image_path, read_ahead=read_ahead, cache={"data": 2 << 20}) as image:
            for name in sorted(image.listdir("d")):
                assert image.read_bytes(f"d/{name}") == contents[name], name
                if read_ahead:
                    # A reader with work of its own per file (a walk's), which the workers
                    # get ahead of.
                    time.sleep(0.0002)
            loads[read_ahead] = image.stats()["cache"]["data"]["loads"]
    # Without read-ahead each fragment block is decompressed once: the files using it come one
    # after another. With it, as many (a block may be loaded twice only in the instant a worker
    # starts it as the reader comes to its file).
    assert loads[2] <= loads[0] + 3, loads
