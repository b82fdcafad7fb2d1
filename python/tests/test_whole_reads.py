"""Whole-file reads (`read_bytes`, `read()` of a file just opened: blocks decompressed straight
into the bytes object) of files of every size class, compared with unsquashfs's extraction;
and paths resolved through directories remembered as their parents, compared with what `os`
says of the same paths in the tree the images were made from."""

from __future__ import annotations

import os
import stat

import pytest

import squashd

#: Files of every size class: empty, under a block, exactly one or several blocks, blocks and
#: a tail end, sparse (holes first, in the middle, only holes), hard-linked.
SIZE_CLASSES = [
    "empty", "a.txt", "h1", "deep/h3", "sparse/middle", "sparse/hole-first", "sparse/all-hole",
    *(f"files/{kind}-{n}" for kind in ("rand", "text")
      for n in (1, 4095, 4096, 4097, 131071, 131072, 131073, 3 * 131072, 1_000_000)),
]


@pytest.mark.parametrize("variant", ["gzip", "zstd-nofrag-noxattr", "gzip-4k-uncompressed-meta", "lz4"])
@pytest.mark.parametrize("read_ahead", [None, 0])
def test_whole_reads_of_every_size_class_are_unsquashfs_bytes(images, variant, read_ahead):
    ref = images.unsquashed(variant)
    with squashd.open(images.image(variant), read_ahead=read_ahead) as image:
        # Twice: the second round finds blocks the first left in the cache (fragment blocks,
        # blocks read ahead) and copies them.
        for round_ in range(2):
            for rel in SIZE_CLASSES:
                with open(os.path.join(ref, rel), "rb") as f:
                    want = f.read()
                assert image.read_bytes(rel) == want, (variant, rel, round_)
                with image.open(rel) as f:
                    assert f.read() == want, (variant, rel, round_)
                    # A read that is not of the whole file goes through the cache.
                    f.seek(len(want) // 3)
                    assert f.read() == want[len(want) // 3:], (variant, rel, round_)


#: Paths whose last component is looked up in a remembered parent, and paths that must be
#: walked from the root anyway: symlinks in the middle and at the end, `..` and `.`, trailing
#: slashes, a file as a parent, names that are not there, loops. ("abs", an absolute symlink,
#: is left out: `os` would follow it out of the tree.)
PATHS = [
    "a.txt", "files/rand-4096", "files/text-1", "files/nope", "files/", "files/.", "files/..",
    "a.txt/x", "a.txt/", "deep/a/b/c/d/e/leaf", "dirlink/b/c/d/e/leaf", "dirlink/b/../b/c",
    "dirlink/..", "dirlink", "dirlink/", "deep/up", "deep/a/../up", "deep/a/..", "deep/h3",
    "rel", "chain", "dangling", "loop1", "loop1/x", "small/s03", "small//s04", "/small/s05",
    "sparse/middle", "big/e00003xxx", "big/nope", "deep/a/b/../../../a.txt", "nope/x",
]


def outcome(call, path):
    try:
        st = call(path)
    except OSError as e:
        return type(e).__name__, e.errno
    return stat.S_IFMT(st.st_mode), None if stat.S_ISDIR(st.st_mode) else st.st_size


def test_paths_through_remembered_parents_resolve_as_os_does(images, trees):
    source = trees.get("plain")
    want = {p: (outcome(os.stat, os.path.join(source, p.lstrip("/"))),
                outcome(os.lstat, os.path.join(source, p.lstrip("/")))) for p in PATHS}
    with squashd.open(images.image("gzip")) as image:
        # Twice in one image: the second round resolves through the parents the first one
        # remembered.
        for round_ in range(2):
            for p in PATHS:
                got = (outcome(image.stat, p), outcome(image.lstat, p))
                assert got == want[p], (p, round_)
    with squashd.open(images.image("gzip")) as image:
        for p in reversed(PATHS):
            assert (outcome(image.stat, p), outcome(image.lstat, p)) == want[p], p
        # Reads through a remembered parent, the last component a symlink to follow.
        assert image.read_bytes("deep/up") == b"A\n"
        assert image.read_bytes("deep/a/../up") == b"A\n"
        assert image.read_bytes("chain") == b"A\n"
        with pytest.raises(IsADirectoryError):
            image.read_bytes("deep/a/..")
