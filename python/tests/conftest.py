"""Fixtures: images made with the real mksquashfs from the tree in tree.py, their unsquashfs
extraction, the kernel's squashfs mount of them (as root), and an HTTP server with ranges."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, Optional

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import tree  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "fuzz" / "corpus"
IS_ROOT = os.geteuid() == 0

#: name: (tree, mksquashfs options, offset in the file)
VARIANTS: Dict[str, tuple] = {
    "gzip": ("plain", ["-comp", "gzip"], 0),
    "xz": ("plain", ["-comp", "xz", "-b", "256K"], 0),
    "lzo": ("plain", ["-comp", "lzo"], 0),
    "lz4": ("plain", ["-comp", "lz4", "-Xhc"], 0),
    "zstd-huge": ("huge", ["-comp", "zstd", "-b", "1M"], 0),
    "gzip-4k-uncompressed-meta": ("plain", ["-comp", "gzip", "-b", "4K", "-noI", "-noD", "-always-use-fragments"], 0),
    "zstd-nofrag-noxattr": ("plain", ["-comp", "zstd", "-no-fragments", "-no-xattrs"], 0),
    "zstd-offset": ("plain", ["-comp", "zstd"], 12345),
}


def skip(reason: str) -> None:
    """Skips the test, saying why in the words the project's tests use."""
    print(f"SKIPPED: {reason}")
    pytest.skip(reason)


def have(program: str) -> bool:
    return shutil.which(program) is not None


def random_files_image(tmp_path: Path, count: int, size_of, name_of) -> tuple:
    """An image (zstd, 4 KiB blocks) whose directory `d` holds `count` files of random bytes,
    file i named `name_of(i)` and `size_of(i)` bytes long: the image's path and each file's
    bytes by name. Skips the test when mksquashfs is missing."""
    if not have("mksquashfs"):
        skip("mksquashfs (squashfs-tools) is not installed")
    tree_dir = tmp_path / "tree" / "d"
    tree_dir.mkdir(parents=True)
    contents = {}
    for i in range(count):
        contents[name_of(i)] = os.urandom(size_of(i))
        (tree_dir / name_of(i)).write_bytes(contents[name_of(i)])
    image_path = tmp_path / "tree.sqfs"
    subprocess.run(["mksquashfs", str(tree_dir.parent), str(image_path), "-comp", "zstd", "-b", "4K",
                    "-quiet", "-no-progress"], check=True, stdout=subprocess.DEVNULL)
    return image_path, contents


@pytest.fixture(scope="session")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("squashd-py")


class Trees:
    """Source trees, built on first use."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.built: Dict[str, Path] = {}

    def get(self, name: str) -> Path:
        if name not in self.built:
            path = self.work / f"tree-{name}"
            tree.build(str(path), as_root=IS_ROOT, huge=name == "huge")
            self.built[name] = path
        return self.built[name]


@pytest.fixture(scope="session")
def trees(work: Path) -> Trees:
    if not have("mksquashfs") or not have("unsquashfs"):
        skip("mksquashfs and unsquashfs (squashfs-tools) are not installed")
    return Trees(work)


class Images:
    """Images made with mksquashfs, one per variant, made on first use."""

    def __init__(self, work: Path, trees: Trees) -> None:
        self.work = work
        self.trees = trees
        self.made: Dict[str, Path] = {}
        self.extracted: Dict[str, Path] = {}

    def image(self, variant: str) -> Path:
        if variant not in self.made:
            source, options, offset = VARIANTS[variant]
            path = self.work / f"{variant}.sqfs"
            args = ["mksquashfs", str(self.trees.get(source)), str(path), "-noappend", "-quiet", "-no-progress"]
            if offset:
                args += ["-offset", str(offset)]
            subprocess.run(args + options, check=True, stdout=subprocess.DEVNULL)
            self.made[variant] = path
        return self.made[variant]

    def unsquashed(self, variant: str) -> Path:
        """The variant's image extracted by unsquashfs."""
        if variant not in self.extracted:
            out = self.work / f"unsquashed-{variant}"
            args = ["unsquashfs", "-no-progress", "-d", str(out)]
            offset = VARIANTS[variant][2]
            if offset:
                args += ["-offset", str(offset)]
            subprocess.run(args + [str(self.image(variant))], check=True, stdout=subprocess.DEVNULL)
            self.extracted[variant] = out
        return self.extracted[variant]


@pytest.fixture(scope="session")
def images(work: Path, trees: Trees) -> Images:
    return Images(work, trees)


@contextlib.contextmanager
def kernel_mount(image: Path, where: Path, offset: int = 0) -> Iterator[Path]:
    """The kernel's squashfs mount of `image` (loop, read-only), unmounted afterwards; skips
    the test where that cannot be done."""
    if not IS_ROOT:
        skip("the kernel's squashfs mount needs root")
    where.mkdir(exist_ok=True)
    options = "loop,ro" + (f",offset={offset}" if offset else "")
    done = subprocess.run(
        ["mount", "-t", "squashfs", "-o", options, str(image), str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        skip(f"cannot mount {image} with the kernel's squashfs: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


def corpus(name: str) -> Path:
    path = CORPUS / name
    if not path.exists():
        skip(f"{path} is missing")
    return path


def appimage_of(image: Path, out: Path) -> Path:
    """A type-2 AppImage holding `image`: /bin/true marked AI\\x02 at byte 8, as
    fuzz/make_corpus.sh makes one."""
    runtime = Path("/bin/true").read_bytes()
    out.write_bytes(runtime[:8] + b"AI\x02" + runtime[11:] + image.read_bytes())
    return out


def image_offset_in(path: Path, image: Path) -> Optional[int]:
    """Where `image`'s bytes start in `path`, if they are there whole."""
    data = path.read_bytes()
    at = data.find(image.read_bytes())
    return None if at < 0 else at
