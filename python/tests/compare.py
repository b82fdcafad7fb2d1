"""Compares what the package reads from an image with a reference tree: the kernel's mount of
the image, or unsquashfs's extraction of it."""

from __future__ import annotations

import os
import stat
from typing import Dict, List, Tuple

import squashd

#: Files larger than this are compared at sampled ranges, not whole.
WHOLE_LIMIT = 64 << 20


def reference_entries(root: bytes) -> List[bytes]:
    """Every path below `root`, relative, in walk order (symlinks not followed)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for name in dirnames + filenames:
            out.append(os.path.normpath(os.path.join(rel, name)))
    return out


def xattrs_of(path: bytes) -> Dict[bytes, bytes]:
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:
        return {}
    return {os.fsencode(n): os.getxattr(path, n, follow_symlinks=False) for n in names}


def ranges(size: int) -> List[Tuple[int, int]]:
    """Where to compare a file too large to compare whole."""
    from tree import HUGE_PIECES

    picks = [(at, n) for at, n, _ in HUGE_PIECES if at + n <= size]
    picks += [(size // 3, 70_000), (max(size - 5, 0), 5), ((4 << 30) - 10, 20)]
    return [(a, n) for a, n in picks if a < size]


def same_contents(image: squashd.Image, rel: bytes, path: bytes, size: int) -> None:
    if size <= WHOLE_LIMIT:
        with open(path, "rb") as f:
            expected = f.read()
        assert image.read_bytes(rel) == expected, rel
        with image.open(rel, "rb") as f:
            assert f.read() == expected, rel
        return
    with open(path, "rb") as ref, image.open(rel, "rb") as got:
        for at, n in ranges(size):
            ref.seek(at)
            got.seek(at)
            assert got.read(n) == ref.read(n), (rel, at, n)


def compare(image: squashd.Image, root: os.PathLike, *, kernel: bool) -> int:
    """Compares every entry below `root` with the image; `kernel`: `root` is the kernel's
    mount, whose every stat field must match. Returns how many entries were compared."""
    root_b = os.fsencode(root)
    rels = reference_entries(root_b)
    assert rels, "the reference tree is empty"
    if kernel:
        assert image.stat("/") == stat_subset(os.stat(root_b), image.stat("/"))
    listed = 0
    for rel in rels:
        path = os.path.join(root_b, rel)
        ref = os.lstat(path)
        got = image.lstat(rel)
        assert stat.S_IFMT(got.st_mode) == stat.S_IFMT(ref.st_mode), rel
        assert got.st_mode == ref.st_mode, rel
        assert got.st_mtime == ref.st_mtime, rel
        if not stat.S_ISDIR(ref.st_mode):
            assert got.st_size == ref.st_size, rel
        if os.geteuid() == 0:
            assert (got.st_uid, got.st_gid) == (ref.st_uid, ref.st_gid), rel
        if kernel:
            # (A stat_result compares its first ten fields only.)
            assert got == stat_subset(ref, got), rel
            extra = ("st_blocks", "st_blksize", "st_rdev", "st_mtime_ns", "st_atime", "st_ctime")
            assert [getattr(got, f) for f in extra] == [getattr(ref, f) for f in extra], rel
        if stat.S_ISLNK(ref.st_mode):
            assert image.readlink(rel) == os.readlink(path), rel
        elif stat.S_ISREG(ref.st_mode):
            same_contents(image, rel, path, ref.st_size)
        elif stat.S_ISDIR(ref.st_mode):
            assert image.listdir(rel) == sorted(os.listdir(path)), rel
            names = [e.name for e in image.scandir(rel)]
            assert names == image.listdir(rel), rel
            listed += 1
        if not stat.S_ISLNK(ref.st_mode):
            assert {n: image.getxattr(rel, n) for n in image.listxattr(rel)} == xattrs_of(path), rel
    assert listed > 0
    return len(rels)


def stat_subset(ref: os.stat_result, got: os.stat_result) -> os.stat_result:
    """`ref` with the image's `st_dev` (which names the image, not a device), for comparing
    whole stat results."""
    fields = list(ref)
    fields[2] = got.st_dev
    return os.stat_result(
        tuple(fields)
        + (ref.st_atime, ref.st_mtime, ref.st_ctime, ref.st_atime_ns, ref.st_mtime_ns,
           ref.st_ctime_ns, ref.st_blksize, ref.st_blocks, ref.st_rdev)
    )


def hard_link_groups(names_to_ino: Dict[bytes, int]) -> List[List[bytes]]:
    groups: Dict[int, List[bytes]] = {}
    for name, ino in names_to_ino.items():
        groups.setdefault(ino, []).append(name)
    return sorted(sorted(g) for g in groups.values() if len(g) > 1)


def same_hard_links(image: squashd.Image, root: os.PathLike) -> None:
    """Names that share an inode in the reference share one in the image, and no others."""
    root_b = os.fsencode(root)
    ref: Dict[bytes, int] = {}
    got: Dict[bytes, int] = {}
    for rel in reference_entries(root_b):
        st = os.lstat(os.path.join(root_b, rel))
        if stat.S_ISDIR(st.st_mode):
            continue
        ref[rel] = st.st_ino
        got[rel] = image.lstat(rel).st_ino
    assert hard_link_groups(got) == hard_link_groups(ref)
    assert any(len(g) == 3 for g in hard_link_groups(got)), "the tree's three hard links"
