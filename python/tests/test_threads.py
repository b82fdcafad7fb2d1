"""One Image read by many threads at once: every thread gets the right bytes, and the GIL is
released while the image is read."""

from __future__ import annotations

import hashlib
import os
import random
import threading
import time

import squashd


def test_threads_reading_one_image_get_the_right_bytes(images, trees):
    source = trees.get("plain")
    files = [
        os.path.relpath(os.path.join(d, f), source)
        for d, _, fs in os.walk(source)
        for f in fs
        if os.path.isfile(os.path.join(d, f)) and not os.path.islink(os.path.join(d, f))
    ]
    expected = {f: (source / f).read_bytes() for f in files}
    # Small caches: threads evict each other's blocks and load the same blocks at once.
    image = squashd.open(images.image("zstd-nofrag-noxattr"), cache={"data": 1 << 20, "metadata": 256 << 10})
    failures = []
    barrier = threading.Barrier(8)

    def reader(seed):
        rng = random.Random(seed)
        barrier.wait()
        try:
            for _ in range(300):
                name = rng.choice(files)
                want = expected[name]
                if rng.random() < 0.3:
                    got = image.read_bytes(name)
                    if got != want:
                        failures.append((name, "whole"))
                else:
                    at = rng.randrange(len(want) + 1)
                    n = rng.randrange(1, 400_000)
                    with image.open(name) as f:
                        f.seek(at)
                        if f.read(n) != want[at : at + n]:
                            failures.append((name, at, n))
                if rng.random() < 0.05:
                    list(image.walk("/"))
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(repr(e))

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    stats = image.stats()["cache"]["data"]
    assert stats["evictions"] > 0 and stats["resident_bytes"] <= 1 << 20


def test_one_large_file_read_by_threads_in_pieces(images, trees):
    source = trees.get("huge")
    want = (source / "files" / "rand-1000000").read_bytes() * 1
    with squashd.open(images.image("zstd-huge")) as image:
        pieces = [None] * 16
        size = len(want)

        def read(i):
            with image.open("files/rand-1000000", buffering=0) as f:
                f.seek(i * size // 16)
                pieces[i] = f.read((i + 1) * size // 16 - i * size // 16)

        threads = [threading.Thread(target=read, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert hashlib.sha256(b"".join(pieces)).digest() == hashlib.sha256(want).digest()


def test_reads_release_the_gil(images):
    """A thread spinning in Python keeps running while another is inside one long read."""
    image = squashd.open(images.image("zstd-huge"), read_ahead=0, cache={"data": 1 << 20})
    inside = threading.Event()
    done = threading.Event()
    elapsed = []

    def read():
        inside.set()
        t = time.perf_counter()
        data = image.read_bytes("huge/text-32m")
        elapsed.append(time.perf_counter() - t)
        done.set()
        assert len(data) == 32 << 20

    reader = threading.Thread(target=read)
    reader.start()
    inside.wait()
    spins = 0
    while not done.is_set():
        spins += 1
    reader.join()
    # A read that held the GIL would leave this loop no turn before it ends: a handful of
    # spins at most. Released, the loop runs the whole time (millions of spins per second).
    print(f"{spins} spins during a read of {elapsed[0]:.3f} s")
    assert spins > 10_000, (spins, elapsed)
