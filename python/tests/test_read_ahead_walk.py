"""Read-ahead across directories: once a walk that reads every file has stepped from one
directory into the next, its order (`os.walk`'s, or a stack's: subdirectories backwards) is
known, and the window of files read ahead goes on past a directory's last file into the
directories the walk enters next."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

import squashd

# Directories in the order of their names; b has a subdirectory, which a walk enters right
# after b (before c).
FILES = ["a/f0", "a/f1", "a/f2", "b/f0", "b/f1", "b/sub/f0", "b/sub/f1", "c/f0", "c/f1", "c/f2"]


@pytest.fixture(scope="module")
def walk_image(tmp_path_factory):
    if shutil.which("mksquashfs") is None:
        print("SKIPPED: mksquashfs (squashfs-tools) is not installed")
        pytest.skip("mksquashfs is not installed")
    tmp = tmp_path_factory.mktemp("walk")
    tree = tmp / "tree"
    contents = {}
    for i, path in enumerate(FILES):
        contents[path] = os.urandom(5000 + i)
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_bytes(contents[path])
    image_path = tmp / "tree.sqfs"
    # No fragments: each file has a data block of its own, so "read ahead" is per file.
    subprocess.run(["mksquashfs", str(tree), str(image_path), "-comp", "zstd", "-no-fragments",
                    "-quiet", "-no-progress"], check=True, stdout=subprocess.DEVNULL)
    return image_path, contents


def _settle(image, queued):
    """Waits until the workers have read ahead (or passed) the `queued` files."""
    deadline = time.monotonic() + 20
    while True:
        ahead = image.stats()["files_read_ahead"]
        if ahead["queued"] == queued and ahead["files"] + ahead["passed"] >= queued:
            return ahead
        assert time.monotonic() < deadline, ahead
        time.sleep(0.01)


def _read_without_loads(image, contents, paths):
    """Reads `paths` and asserts that not one block was decompressed for them."""
    before = image.stats()["cache"]["data"]
    for path in paths:
        assert image.read_bytes(path) == contents[path], path
    after = image.stats()["cache"]["data"]
    assert after["loads"] == before["loads"], (paths, before, after)
    assert after["hits"] - before["hits"] >= len(paths)


@pytest.mark.parametrize("order", ["os.walk", "stack"])
def test_the_next_directories_of_a_walk_are_read_ahead(walk_image, order):
    image_path, contents = walk_image
    # The directories in the walk's order: os.walk takes subdirectories in the listing's
    # order, a stack of scandir calls the last pushed first.
    dirs = ["a", "b", "b/sub", "c"] if order == "os.walk" else ["c", "b", "b/sub", "a"]
    with squashd.open(image_path, read_ahead=2) as image:
        first, second, third, fourth = dirs
        for name in ["f0", "f1", "f2"]:
            image.read_bytes(f"{first}/{name}")
        # The step into the second directory teaches the walk's order: from its first file
        # on, the window runs through its other file and on into the next two directories
        # (queued besides: the first directory's f1 and f2).
        image.read_bytes(f"{second}/f0")
        ahead = _settle(image, 2 + 1 + 2 + 3)
        assert ahead["next_dirs"] == 2, ahead
        assert ahead["missed"] == 0, ahead
        _read_without_loads(image, contents, [f"{second}/f1"] + [f"{third}/f{i}" for i in range(2)]
                            + [f"{fourth}/f{i}" for i in range(3)])
        assert image.stats()["files_read_ahead"]["missed"] == 0


def test_a_walk_that_goes_elsewhere_is_counted_as_missed_and_followed_again(walk_image):
    image_path, contents = walk_image
    with squashd.open(image_path, read_ahead=2) as image:
        for path in ["a/f0", "a/f1", "a/f2", "b/f0"]:
            image.read_bytes(path)
        _settle(image, 2 + 1 + 2 + 3)
        # Not where an os.walk goes after b (nor a stack): the prediction missed.
        assert image.read_bytes("a/f0") == contents["a/f0"]
        ahead = image.stats()["files_read_ahead"]
        assert ahead["missed"] == 1, ahead
        # Read in order from here, a's files are read ahead again.
        _settle(image, ahead["queued"])
        _read_without_loads(image, contents, ["a/f1", "a/f2"])


def test_subdirectories_between_two_files_do_not_stop_read_ahead(tmp_path):
    """A package's listing has files and subpackages alternating: two files read one after
    the other with many subdirectories between them are neighbours, and the files queued after
    them stay queued."""
    if shutil.which("mksquashfs") is None:
        print("SKIPPED: mksquashfs (squashfs-tools) is not installed")
        pytest.skip("mksquashfs is not installed")
    tree = tmp_path / "tree"
    contents = {}
    # Files all queued when a0 is read (fewer than the window's): no later queueing (and
    # loads by workers) while the reads below count loads.
    names = ["a0"] + [f"z{i:02}" for i in range(31)]
    for i, name in enumerate(names):
        contents[name] = os.urandom(5000 + i)
        (tree / "pkg" / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / "pkg" / name).write_bytes(contents[name])
    for i in range(6):
        (tree / "pkg" / f"m{i}").mkdir()
    image_path = tmp_path / "tree.sqfs"
    subprocess.run(["mksquashfs", str(tree), str(image_path), "-comp", "zstd", "-no-fragments",
                    "-quiet", "-no-progress"], check=True, stdout=subprocess.DEVNULL)
    with squashd.open(image_path, read_ahead=2) as image:
        image.read_bytes("pkg/a0")
        # Six subdirectories (m0..m5) lie between a0 and z00 in the listing.
        image.read_bytes("pkg/z00")
        ahead = _settle(image, image.stats()["files_read_ahead"]["queued"])
        assert ahead["queued"] == 31, ahead
        _read_without_loads(image, {f"pkg/{n}": c for n, c in contents.items()},
                            [f"pkg/z{i:02}" for i in range(1, 31)])


def _one_directory_image(tmp_path, sizes):
    """An image of directory pkg holding files f000, f001... of `sizes` bytes (random), each
    with blocks of its own; returns its path and the files' contents by path."""
    if shutil.which("mksquashfs") is None:
        print("SKIPPED: mksquashfs (squashfs-tools) is not installed")
        pytest.skip("mksquashfs is not installed")
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    contents = {}
    for i, size in enumerate(sizes):
        contents[f"pkg/f{i:03}"] = os.urandom(size)
        (tree / "pkg" / f"f{i:03}").write_bytes(contents[f"pkg/f{i:03}"])
    image_path = tmp_path / "tree.sqfs"
    subprocess.run(["mksquashfs", str(tree), str(image_path), "-comp", "zstd", "-no-fragments",
                    "-quiet", "-no-progress"], check=True, stdout=subprocess.DEVNULL)
    return image_path, contents


def test_the_window_holds_a_hundred_small_files(tmp_path):
    """Files of a few KiB (most of a Python environment's) are queued 128 ahead, not 32: 32 such
    files were about a millisecond of the reader's work, which a worker loses to any other
    thread given its core."""
    image_path, contents = _one_directory_image(tmp_path, [5000 + i for i in range(120)])
    with squashd.open(image_path, read_ahead=2) as image:
        assert image.read_bytes("pkg/f000") == contents["pkg/f000"]
        # The other 119 files (585 KB): within the window's 128 files and 8 MiB.
        ahead = _settle(image, 119)
        assert ahead["queued"] == 119, ahead
        _read_without_loads(image, contents, [f"pkg/f{i:03}" for i in range(1, 120)])


def test_the_window_is_bounded_in_bytes(tmp_path):
    """Large files are queued up to 8 MiB ahead (each file's size, up to 16 blocks), not 128 of
    them: what the workers decompress ahead waits in the data cache, which the walk's fragment
    blocks need too. Not 4 MiB: that held two large files' first blocks, too few for the
    workers to keep ahead of a reader where a package's shared libraries lie."""
    image_path, contents = _one_directory_image(tmp_path, [300_000] * 30)
    with squashd.open(image_path, read_ahead=2) as image:
        assert image.read_bytes("pkg/f000") == contents["pkg/f000"]
        # 27 files of 300,000 bytes fit in 8 MiB (8,388,608 bytes), 28 do not.
        ahead = _settle(image, 27)
        assert ahead["queued"] == 27, ahead
        # Read on in order, the window moves on by batches and stays within its bytes.
        for i in range(1, 30):
            assert image.read_bytes(f"pkg/f{i:03}") == contents[f"pkg/f{i:03}"]
        assert image.stats()["files_read_ahead"]["queued"] == 29


def _worker_threads():
    """The read-ahead-across-files workers of this process: their nice values by name."""
    found = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as comm_file:
                comm = comm_file.read().strip()
            with open(f"/proc/self/task/{tid}/stat") as stat_file:
                stat = stat_file.read()
        except OSError:
            continue
        if comm.startswith("squashd-files-"):
            # Fields after the command's closing parenthesis: state is 0, nice is 16.
            found[comm] = int(stat[stat.rindex(")") + 2:].split()[16])
    return found


def test_the_reader_is_one_of_the_threads_decompressing_ahead(tmp_path):
    """`read_ahead=2` is one worker and the reader (which decompresses what the workers have not
    done when it comes to a file), the worker at the reader's priority: a worker per core made
    three threads on two cores, and the reader got only a share of its core."""
    cores = len(os.sched_getaffinity(0))
    if cores < 2:
        print("SKIPPED: needs 2 cores")
        pytest.skip("needs 2 cores")
    image_path, contents = _one_directory_image(tmp_path, [5000 + i for i in range(40)])
    with squashd.open(image_path, read_ahead=2) as image:
        assert image.read_bytes("pkg/f000") == contents["pkg/f000"]
        _settle(image, 39)
        workers = _worker_threads()
        assert list(workers) == ["squashd-files-0"], workers
        assert workers["squashd-files-0"] == os.getpriority(os.PRIO_PROCESS, 0), workers
        _read_without_loads(image, contents, [f"pkg/f{i:03}" for i in range(1, 40)])
    # More threads than cores: one fewer workers still, as many as the cores.
    with squashd.open(image_path, read_ahead=cores + 1) as image:
        assert image.read_bytes("pkg/f000") == contents["pkg/f000"]
        _settle(image, 39)
        assert len(_worker_threads()) == cores, _worker_threads()
