"""Read-ahead across files: a reader that reads a directory's files in the listing's order gets
the next files decompressed ahead of it by worker threads, and finds them in the data cache."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import squashd
from conftest import random_files_image


def _read_in_order(image, directory):
    names = sorted(image.listdir(directory))
    first = image.read_bytes(f"{directory}/{names[0]}")
    return names, first


def test_the_next_files_of_a_directory_are_read_ahead(images, trees):
    source = trees.get("plain")
    # No fragments: each file has data blocks of its own, so "decompressed ahead" is per file.
    with squashd.open(images.image("zstd-nofrag-noxattr"), read_ahead=2) as image:
        names, first = _read_in_order(image, "small")
        assert first == (source / "small" / names[0]).read_bytes()
        # The workers run beside this thread: wait for them (a few ms; seconds on a busy host).
        deadline = time.monotonic() + 20
        while image.stats()["files_read_ahead"]["files"] < len(names) - 1:
            assert time.monotonic() < deadline, image.stats()["files_read_ahead"]
            time.sleep(0.01)
        ahead = image.stats()["files_read_ahead"]
        assert ahead["queued"] == len(names) - 1
        assert ahead["chunks"] >= len(names) - 1
        before = image.stats()["cache"]["data"]
        for name in names[1:]:
            assert image.read_bytes(f"small/{name}") == (source / "small" / name).read_bytes()
        after = image.stats()["cache"]["data"]
    # Every later file was in the data cache already: hits, and not one block decompressed more.
    assert after["loads"] == before["loads"]
    assert after["hits"] - before["hits"] >= len(names) - 1


def test_blocks_read_ahead_leave_the_data_cache_when_their_file_is_read_whole(images, trees):
    source = trees.get("plain")
    # One thread is the reader: as many workers as the cores.
    read_ahead = len(os.sched_getaffinity(0)) + 1
    with squashd.open(images.image("zstd-nofrag-noxattr"), read_ahead=read_ahead) as image:
        names, _ = _read_in_order(image, "small")
        _wait_for(image, "files", len(names) - 1)
        before = image.stats()["cache"]["data"]
        assert before["entries"] >= len(names) - 1 - image.stats()["files_read_ahead"]["passed"]
        for name in names[1:]:
            assert image.read_bytes(f"small/{name}") == (source / "small" / name).read_bytes()
        after = image.stats()["cache"]["data"]
    # Each file's block was copied out and dropped: the cache keeps room for blocks that are
    # shared (fragment blocks) rather than blocks no one reads again. That is not counted as
    # evicting them, and none was decompressed again.
    assert after["entries"] == 0, (before, after)
    assert after["resident_bytes"] == 0, (before, after)
    assert after["evictions"] == before["evictions"], (before, after)
    assert after["loads"] == before["loads"], (before, after)


def test_without_read_ahead_the_reader_decompresses_every_file(images):
    with squashd.open(images.image("zstd-nofrag-noxattr"), read_ahead=0) as image:
        names, _ = _read_in_order(image, "small")
        before = image.stats()["cache"]["data"]
        for name in names[1:]:
            image.read_bytes(f"small/{name}")
        after = image.stats()
    assert after["files_read_ahead"] == {"queued": 0, "files": 0, "chunks": 0, "dirs": 0,
                                         "next_dirs": 0, "missed": 0, "passed": 0, "helped": 0}
    assert after["cache"]["data"]["loads"] - before["loads"] == len(names) - 1


def _wait_for(image, key, count):
    """Waits until `count` of `key` are counted; for "files", a file the reader came to before
    a worker did (its read-ahead dropped, counted as "passed") counts as done."""
    deadline = time.monotonic() + 20
    while True:
        ahead = image.stats()["files_read_ahead"]
        if ahead[key] + (ahead["passed"] if key == "files" else 0) >= count:
            return
        assert time.monotonic() < deadline, ahead
        time.sleep(0.01)


def test_after_a_directorys_last_file_its_subdirectories_first_files_are_read_ahead(tmp_path):
    if shutil.which("mksquashfs") is None:
        print("SKIPPED: mksquashfs (squashfs-tools) is not installed")
        pytest.skip("mksquashfs is not installed")
    tree = tmp_path / "tree"
    contents = {}
    for path in ["f0", "f1", "f2", "d0/a", "d0/b", "d1/a", "d2/a", "d2/b", "d2/c", "d2/e/x"]:
        contents[path] = os.urandom(5000 + len(contents))
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_bytes(contents[path])
    image_path = tmp_path / "tree.sqfs"
    subprocess.run(["mksquashfs", str(tree), str(image_path), "-comp", "zstd", "-no-fragments",
                    "-quiet", "-no-progress"], check=True, stdout=subprocess.DEVNULL)
    with squashd.open(image_path, read_ahead=2) as image:
        assert image.read_bytes("f0") == contents["f0"]
        assert image.read_bytes("f1") == contents["f1"]
        _wait_for(image, "files", 2)
        assert image.stats()["files_read_ahead"]["dirs"] == 0, "nothing below before the last file"
        image.read_bytes("f2")
        # d0's two files, d1's one, d2's first two (not d2/e's: one level down only).
        _wait_for(image, "files", 2 + 2 + 1 + 2)
        assert image.stats()["files_read_ahead"]["dirs"] == 3
        before = image.stats()["cache"]["data"]
        # Reads that queue nothing more to decompress: the step from the root into d1 shows a
        # stack's walk (d2, d2/e, then d1), whose next directory is d0, read ahead already.
        for path in ["d1/a", "d0/a"]:
            assert image.read_bytes(path) == contents[path]
        after = image.stats()["cache"]["data"]
    # The subdirectories' first files were decompressed ahead: hits, no block decompressed.
    assert after["loads"] == before["loads"]
    assert after["hits"] - before["hits"] >= 2


def test_a_directory_read_in_order_with_read_ahead_decompresses_each_block_once(tmp_path):
    """The reader and the workers share a directory's files out (claims): every file's bytes
    come back, and the blocks decompressed are those a reader alone decompresses (a block can
    be loaded twice only in the instant a worker starts it as the reader comes to its file)."""
    # 4 KiB blocks: files of several blocks, and tail ends shared in fragment blocks.
    image_path, contents = random_files_image(
        tmp_path, 60, lambda i: 300 + (i * 2654435761) % 30000, lambda i: f"f{i:02}")
    loads = {}
    for read_ahead in (0, 2):
        with squashd.open(image_path, read_ahead=read_ahead) as image:
            for name in sorted(image.listdir("d")):
                assert image.read_bytes(f"d/{name}") == contents[name], name
            stats = image.stats()
        loads[read_ahead] = stats["cache"]["data"]["loads"]
        ahead = stats["files_read_ahead"]
        if read_ahead:
            assert ahead["queued"] > 0, ahead
            # Each queued file was read ahead (by a worker, or by the reader while a worker had
            # the file it came to: "helped") or left to the reader ("passed"), not both.
            assert ahead["helped"] <= ahead["files"], ahead
            assert ahead["files"] + ahead["passed"] <= ahead["queued"], ahead
    assert loads[2] <= loads[0] + 3, loads


def test_read_ahead_workers_run_below_the_reader(images):
    """Workers of read-ahead across files that outnumber the cores other than the reader's
    (`read_ahead=` above the cores) run 3 nice levels below the thread that reads, so that the
    reader, whose work no thread can share, keeps its core. (With fewer, each has a core of its
    own and runs at the reader's priority: test_read_ahead_walk.py.)"""
    def nice_of(task):
        stat = (task / "stat").read_text()
        return int(stat[stat.rindex(")") + 2:].split()[16])

    own = os.getpriority(os.PRIO_PROCESS, 0)
    if own > 16:
        print("SKIPPED: this process runs at nice 17 or more")
        pytest.skip("no room below this process's nice value")
    # One thread is the reader: as many workers as the cores.
    read_ahead = len(os.sched_getaffinity(0)) + 1
    with squashd.open(images.image("zstd-nofrag-noxattr"), read_ahead=read_ahead) as image:
        names, _ = _read_in_order(image, "small")
        image.read_bytes(f"small/{names[1]}")
        _wait_for(image, "files", 1)
        niced = []
        for task in Path("/proc/self/task").iterdir():
            # A thread of an earlier image (or of the test runner) may end meanwhile.
            try:
                if (task / "comm").read_text().strip().startswith("squashd-files"):
                    niced.append(nice_of(task))
            except FileNotFoundError:
                continue
    # Each worker lowers its priority when it takes its first job: at least one has.
    assert own + 3 in niced, (own, niced)
    assert all(n in (own, own + 3) for n in niced), (own, niced)
    assert os.getpriority(os.PRIO_PROCESS, 0) == own, "the reading thread is left as it was"
