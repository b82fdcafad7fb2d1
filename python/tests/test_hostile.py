"""Hostile and damaged images (the fuzz corpus's seeds and a fixture image, truncated, with
bytes flipped in each of their tables, with superblock fields set to what no image holds, at
offsets) give OSError, never another exception, a hang or a crash of the interpreter. The
cases run in a child interpreter, whose death by a signal is a crash."""

from __future__ import annotations

import json
import random
import struct
import subprocess
import sys
from pathlib import Path

from conftest import CORPUS, skip

#: Superblock fields: name, offset, struct format.
FIELDS = [
    ("inode_count", 4, "<I"),
    ("block_size", 12, "<I"),
    ("fragment_count", 16, "<I"),
    ("block_log", 22, "<H"),
    ("id_count", 26, "<H"),
    ("bytes_used", 40, "<Q"),
    ("id_table", 48, "<Q"),
    ("xattr_table", 56, "<Q"),
    ("inode_table", 64, "<Q"),
    ("directory_table", 72, "<Q"),
    ("fragment_table", 80, "<Q"),
    ("export_table", 88, "<Q"),
]
PADDING = 4096


def regions(img: bytes):
    """The image's tables, as (start, end), from its superblock."""
    starts = sorted(
        {struct.unpack_from("<Q", img, at)[0] for at in (48, 56, 64, 72, 80, 88)}
        | {96, len(img)}
    )
    return [(a, b) for a, b in zip(starts, starts[1:]) if 0 < a < b <= len(img)] + [(0, 96)]


def mutants(name: str, img: bytes, rng: random.Random, flips: int, fields: bool):
    for cut in sorted({0, 10, 95, 96, 100, len(img) // 2, len(img) - 1} | {a + 7 for a, _ in regions(img)}):
        if cut < len(img):
            yield f"{name}-cut{cut}", img[:cut]
    for start, end in regions(img):
        for k in range(flips):
            b = bytearray(img)
            for _ in range(1 + k * 3):
                at = rng.randrange(start, end)
                b[at] ^= 1 << rng.randrange(8)
            yield f"{name}-flip{start}-{k}", bytes(b)
    for field, at, fmt in FIELDS if fields else []:
        size = struct.calcsize(fmt)
        for value in (0, (1 << (8 * size)) - 1, len(img) + 1):
            b = bytearray(img)
            struct.pack_into(fmt, b, at, value & ((1 << (8 * size)) - 1))
            yield f"{name}-{field}-{value}", bytes(b)


def test_hostile_images_raise_oserror_only(images, tmp_path):
    bases = {p.stem: p.read_bytes() for p in sorted((CORPUS / "open_walk_read").glob("*.sqfs"))}
    if not bases:
        skip(f"no seed images in {CORPUS}")
    # A larger image too (700 entries, directory indexes, xattrs), less often: each of its
    # cases reads all of it.
    bases["fixture-gzip"] = images.image("gzip").read_bytes()
    rng = random.Random(28)
    cases = []
    for name, img in bases.items():
        flips = 1 if name == "fixture-gzip" else 3
        # The superblock's checks do not depend on the compressor: a few images suffice.
        fields = name in ("fixture-gzip", "gzip", "xz", "zstd", "uncompressed")
        for i, (label, data) in enumerate(mutants(name, img, rng, flips, fields)):
            path = tmp_path / f"{label}.img"
            if i % 3 == 2:
                # At an offset, after real bytes that are not an image.
                path.write_bytes(b"\x7fELF" * (PADDING // 4) + data)
                cases.append((str(path), PADDING))
            else:
                path.write_bytes(data)
                cases.append((str(path), None))
    listing = tmp_path / "cases.json"
    listing.write_text(json.dumps(cases))
    worker = Path(__file__).with_name("hostile_worker.py")
    done = subprocess.run(
        [sys.executable, str(worker), str(listing)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stderr[-4000:]}"
    counts = json.loads(done.stdout)
    assert counts["cases"] == len(cases) > 600
    # Damage was found, reported as errors of the image, naming it and the byte.
    assert counts["refused_at_open"] > len(cases) // 10
    assert counts["errnos"].get("5", 0) > 100, counts["errnos"]
    assert any(".img" in m and "at byte" in m for m in counts["messages"]), counts["messages"]


def test_the_fuzz_seeds_read_whole(images):
    """The seeds themselves are sound images: every one opens and walks without an error."""
    seeds = sorted((CORPUS / "open_walk_read").glob("*.sqfs"))
    if not seeds:
        skip(f"no seed images in {CORPUS}")
    import squashd

    for seed in seeds:
        with squashd.open(seed) as image:
            errors = []
            files = [f for _, _, fs in image.walk("/", onerror=errors.append) for f in fs]
            assert files and not errors, seed
