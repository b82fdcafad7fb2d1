"""The fsspec file system under the protocol "squashfs": registered by the package's entry
point, archive-style construction, chained URLs, and fsspec's reading calls."""

from __future__ import annotations

import pytest

fsspec = pytest.importorskip("fsspec")

import squashd  # noqa: E402
from squashd.fsspec import SquashFileSystem  # noqa: E402


@pytest.fixture(scope="module")
def img(images):
    return images.image("gzip")


@pytest.fixture(scope="module")
def ref(images):
    return images.unsquashed("gzip")


def test_the_entry_point_registers_the_protocol():
    assert fsspec.get_filesystem_class("squashfs") is SquashFileSystem


def test_reading_calls(img, ref):
    fs = fsspec.filesystem("squashfs", fo=str(img))
    assert isinstance(fs.image, squashd.Image)
    assert fs.ls("", detail=False) == fs.image.listdir("/")
    names = {i["name"] for i in fs.ls("deep")}
    assert names == {"deep/a", "deep/h3", "deep/up"}
    info = fs.info("files/rand-1000000")
    assert info["type"] == "file" and info["size"] == 1_000_000
    assert fs.info("deep")["type"] == "directory"
    link = fs.info("dirlink")
    assert link["islink"] and link["type"] == "directory" and link["destination"] == "deep/a"
    assert fs.cat("a.txt") == b"A\n"
    data = (ref / "files" / "rand-1000000").read_bytes()
    assert fs.cat_file("files/rand-1000000", start=10, end=20) == data[10:20]
    assert fs.cat_file("files/rand-1000000", start=-5) == data[-5:]
    with fs.open("files/rand-1000000", "rb") as f:
        f.seek(999_990)
        assert f.read() == data[999_990:]
    with fs.open("files/text-4096", "rt") as f:
        assert f.read() == (ref / "files" / "text-4096").read_text()
    assert fs.exists("a.txt") and not fs.exists("nope") and fs.isdir("deep") and fs.isfile("h1")
    found = fs.find("deep")
    assert "deep/a/b/c/d/e/leaf" in found and "deep/h3" in found
    assert set(fs.glob("files/rand-13107*")) == {"files/rand-131071", "files/rand-131072", "files/rand-131073"}
    assert fs.du("files") == sum(p.stat().st_size for p in (ref / "files").iterdir())
    walked = {root: files for root, _, files in fs.walk("")}
    assert sorted(walked["deep/a/b/c/d/e"]) == ["leaf"]
    with pytest.raises(FileNotFoundError):
        fs.info("nope")
    with pytest.raises(FileNotFoundError):
        fs.cat("nope")
    with pytest.raises(ValueError):
        fs.open("a.txt", "wb")


def test_chained_urls(img, ref):
    for outer in (str(img), f"file://{img}"):
        with fsspec.open(f"squashfs://files/text-131072::{outer}", "rb") as f:
            assert f.read() == (ref / "files" / "text-131072").read_bytes()
    fs, path = fsspec.core.url_to_fs(f"squashfs://deep::{img}")
    assert path == "deep" and fs.isdir(path)


def test_other_outer_file_systems_read_through_fsspecs_file(img, ref):
    memory = fsspec.filesystem("memory")
    memory.pipe("/imgs/img.sqfs", img.read_bytes())
    try:
        with fsspec.open("squashfs://files/text-4097::memory://imgs/img.sqfs", "rb") as f:
            assert f.read() == (ref / "files" / "text-4097").read_bytes()
        fs = fsspec.filesystem("squashfs", fo="memory://imgs/img.sqfs")
        assert fs.image.name.endswith("img.sqfs") and fs.cat("a.txt") == b"A\n"
    finally:
        memory.rm("/imgs", recursive=True)


def test_a_file_object_or_an_image_as_fo(img):
    with open(img, "rb") as f:
        fs = SquashFileSystem(fo=f, skip_instance_cache=True)
        assert fs.cat("a.txt") == b"A\n"
    with squashd.open(img) as image:
        assert SquashFileSystem(fo=image, skip_instance_cache=True).cat("h2") == image.read_bytes("h1")
