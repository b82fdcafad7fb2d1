"""Reads of part of a file that take whole blocks (a file object's `read(n)`): with read-ahead
off, each such block is decompressed straight into the bytes returned and not kept in the data
cache, as a whole-file read's blocks are; blocks read in part go through the cache. With read-ahead on, a stream's blocks go through the cache, where its workers load them,
and none is decompressed twice."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

import squashd

BLOCK = 4096
#: Full blocks of the file, then a shorter last block (mksquashfs keeps the tail end of a file
#: longer than a block in a block of its own).
BLOCKS = 64
TAIL = 1000


@pytest.fixture(scope="module")
def image_and_data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    if shutil.which("mksquashfs") is None:
        print("SKIPPED: mksquashfs (squashfs-tools) is not installed")
        pytest.skip("mksquashfs is not installed")
    tmp = tmp_path_factory.mktemp("block-reads")
    tree = tmp / "tree"
    tree.mkdir()
    # Compressible (every block is stored compressed) and different in every block.
    lines = b"".join(b"%08d %s\n" % (i, os.urandom(8).hex().encode()) for i in range(12_000))
    data = lines[: BLOCKS * BLOCK + TAIL]
    assert len(data) == BLOCKS * BLOCK + TAIL
    (tree / "big").write_bytes(data)
    image = tmp / "tree.sqfs"
    subprocess.run(["mksquashfs", str(tree), str(image), "-comp", "zstd", "-b", "4K", "-quiet",
                    "-no-progress"], check=True, stdout=subprocess.DEVNULL)
    return image, data


def _data_cache(image) -> dict:
    return image.stats()["cache"]["data"]


def _read_in_pieces(f, size: int) -> bytes:
    """Everything left in file object `f`, read `size` bytes at a time."""
    got = b""
    while chunk := f.read(size):
        got += chunk
    return got


def test_whole_blocks_of_reads_are_not_cached_with_read_ahead_off(image_and_data):
    path, data = image_and_data
    with squashd.open(path, read_ahead=0) as image:
        with image.open("big", buffering=0) as f:
            assert _read_in_pieces(f, 4 * BLOCK) == data
        after = _data_cache(image)
        # Each block decompressed once, none kept.
        assert after["loads"] == BLOCKS + 1, after
        assert after["entries"] == 0, after
        assert after["resident_bytes"] == 0, after

        # A read that starts and ends inside blocks: those two go through the cache, the two
        # it takes whole do not. Read again, the two in part are hits and the two whole ones
        # are decompressed again.
        with image.open("big", buffering=0) as f:
            for round_ in range(2):
                before = _data_cache(image)
                f.seek(BLOCK // 2)
                assert f.read(3 * BLOCK) == data[BLOCK // 2: BLOCK // 2 + 3 * BLOCK]
                got = _data_cache(image)
                assert got["entries"] - after["entries"] == 2, (round_, got)
                assert got["loads"] - before["loads"] == (4 if round_ == 0 else 2), (round_, got)


def test_two_threads_reading_halves_decompress_each_block_once_past_the_cache(image_and_data):
    path, data = image_and_data
    with squashd.open(path, read_ahead=0) as image:
        got = [b"", b""]

        def read_half(i):
            half = len(data) // 2 // BLOCK * BLOCK
            start, end = (half, len(data)) if i else (0, half)
            with image.open("big", buffering=0) as f:
                f.seek(start)
                while start < end:
                    chunk = f.read(min(8 * BLOCK, end - start))
                    got[i] += chunk
                    start += len(chunk)

        threads = [threading.Thread(target=read_half, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert got[0] + got[1] == data
        after = _data_cache(image)
    assert after["loads"] == BLOCKS + 1, after
    assert after["entries"] == 0, after


def test_a_stream_read_ahead_decompresses_each_block_once(image_and_data):
    path, data = image_and_data
    with squashd.open(path, read_ahead=2) as image:
        with image.open("big", buffering=0) as f:
            assert _read_in_pieces(f, 2 * BLOCK) == data
        after = _data_cache(image)
    # The workers and the reader share the blocks out through the cache: none twice.
    assert after["loads"] == BLOCKS + 1, after
