"""The package's calls behave as their os/io/pathlib models: names, errors, walks, file
objects, extraction."""

from __future__ import annotations

import errno
import io
import os
import stat

import pytest

import squashd
from conftest import IS_ROOT


@pytest.fixture(scope="module")
def image(images):
    with squashd.open(images.image("zstd-nofrag-noxattr")) as image:
        yield image


@pytest.fixture(scope="module")
def source(trees):
    return trees.get("plain")


def test_names_are_str_with_surrogates_or_bytes_as_given(image, source):
    names = image.listdir("/")
    assert names == sorted(os.listdir(source), key=os.fsencode)
    assert "caf\udce9" in names and "\udcff\udcfe-dir" in names and "unicodé ☃" in names
    assert image.listdir(b"/") == sorted(os.listdir(os.fsencode(source)))
    assert image.listdir("\udcff\udcfe-dir") == ["\udc80"]
    assert image.listdir(b"\xff\xfe-dir") == [b"\x80"]
    assert image.read_bytes(b"\xff\xfe-dir/\x80") == image.read_bytes("\udcff\udcfe-dir/\udc80")
    assert image.readlink(b"rel") == b"a.txt" and image.readlink("rel") == "a.txt"
    # os.PathLike and the default path.
    assert image.listdir() == names
    assert image.listdir(type("P", (), {"__fspath__": lambda self: "/deep"})()) == ["a", "h3", "up"]
    with pytest.raises(TypeError):
        image.listdir(42)


def test_errors_are_the_ones_os_raises(image):
    with pytest.raises(FileNotFoundError) as e:
        image.stat("no/such")
    assert e.value.errno == errno.ENOENT and e.value.filename == "no/such"
    assert image.name in str(e.value)
    with pytest.raises(NotADirectoryError):
        image.listdir("a.txt")
    with pytest.raises(NotADirectoryError):
        image.stat("a.txt/x")
    with pytest.raises(NotADirectoryError):
        image.stat("a.txt/")
    with pytest.raises(IsADirectoryError):
        image.read_bytes("deep")
    with pytest.raises(IsADirectoryError):
        image.open("deep")
    with pytest.raises(FileNotFoundError):
        image.read_bytes("dangling")
    with pytest.raises(OSError) as e:
        image.stat("loop1")
    assert e.value.errno == errno.ELOOP
    with pytest.raises(OSError) as e:
        image.readlink("a.txt")
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError) as e:
        image.read_bytes("fifo")
    assert e.value.errno == errno.EINVAL
    with pytest.raises(FileNotFoundError):
        squashd.open("/no/such/image.sqfs")
    with pytest.raises(ValueError):
        image.open("a.txt", "w")


def test_symlinks_are_followed_inside_the_image(image):
    assert image.read_bytes("chain") == b"A\n"
    assert image.read_bytes("abs") == image.read_bytes("files/rand-4096")
    assert image.read_bytes("deep/up") == b"A\n"
    assert image.read_bytes("dirlink/b/c/d/e/leaf") == b"deep leaf\n"
    assert image.read_bytes("deep/a/../../a.txt") == b"A\n"
    assert image.read_bytes("/../../a.txt") == b"A\n"
    assert image.stat("dirlink").st_ino == image.stat("deep/a").st_ino
    assert stat.S_ISLNK(image.lstat("dirlink").st_mode)
    assert image.stat("dirlink", follow_symlinks=False) == image.lstat("dirlink")
    assert image.exists("chain") and not image.exists("dangling") and not image.exists("loop1")
    assert image.exists("dangling", follow_symlinks=False)
    assert image.is_dir("dirlink") and image.is_symlink("dirlink") and not image.is_file("dirlink")
    assert image.is_file("rel") and not image.is_dir("nope") and not image.is_symlink("nope")


def outcome(test, follow):
    try:
        return test(follow_symlinks=follow)
    except OSError as e:
        return type(e), e.errno


def test_scandir_entries_are_like_os_direntry(image, source):
    with image.scandir("/") as it:
        entries = {e.name: e for e in it}
    ref = {e.name: e for e in os.scandir(source)}
    assert entries.keys() == ref.keys()
    for name, entry in entries.items():
        assert entry.path == "/" + name
        # An absolute symlink points into the image, not into the source tree's host.
        for follow in (True, False) if name != "abs" else (False,):
            for test in ("is_dir", "is_file"):
                assert outcome(getattr(entry, test), follow) == outcome(getattr(ref[name], test), follow), name
        assert entry.is_symlink() == ref[name].is_symlink()
        assert entry.stat(follow_symlinks=False) == image.lstat(name)
        assert entry.inode() == image.lstat(name).st_ino
        assert os.fspath(entry) == entry.path
    assert entries["dirlink"].stat() == image.stat("deep/a")
    assert entries["abs"].is_file() and entries["abs"].stat() == image.stat("files/rand-4096")
    with pytest.raises(FileNotFoundError):
        entries["dangling"].stat()
    assert [e.path for e in image.scandir(b"deep")] == [b"deep/a", b"deep/h3", b"deep/up"]


def test_walk_is_os_walk(image, source):
    def normalized(walk, top):
        return [(os.path.relpath(d, top), sorted(ds), sorted(fs)) for d, ds, fs in walk]

    for topdown in (True, False):
        ours = normalized(image.walk("/", topdown=topdown), "/")
        theirs = normalized(os.walk(source, topdown=topdown), source)
        assert sorted(ours) == sorted(theirs)
        if topdown:
            assert ours[0][0] == "."
        else:
            assert ours[-1][0] == "."
    ours = normalized(image.walk(b"/", followlinks=True), b"/")
    theirs = normalized(os.walk(os.fsencode(source), followlinks=True), os.fsencode(source))
    assert sorted(ours) == sorted(theirs)
    # Pruning in place, as os.walk allows top-down.
    seen = []
    for d, ds, fs in image.walk("/"):
        seen.append(d)
        ds[:] = [x for x in ds if x != "big"]
    assert "/big" not in seen and "/deep/a/b" in seen
    errors = []
    assert list(image.walk("no/such", onerror=errors.append)) == []
    assert isinstance(errors[0], FileNotFoundError)


def test_file_objects_are_seekable_buffered_readers(image, source):
    expected = (source / "files" / "rand-1000000").read_bytes()
    with image.open("files/rand-1000000") as f:
        assert isinstance(f, io.BufferedReader) and f.readable() and f.seekable()
        assert f.size == len(expected)
        assert f.read(10) == expected[:10]
        assert f.seek(-100, io.SEEK_END) == len(expected) - 100
        assert f.read() == expected[-100:]
        assert f.read() == b""
        f.seek(500_000)
        buf = bytearray(300_000)
        assert f.readinto(buf) == 300_000 and bytes(buf) == expected[500_000:800_000]
        f.seek(len(expected) + 10)
        assert f.read(5) == b""
        with pytest.raises(OSError):
            f.seek(-1)
    assert f.closed
    with pytest.raises(ValueError):
        f.read()
    raw = image.open("files/text-131073", buffering=0)
    assert isinstance(raw, io.RawIOBase)
    assert raw.read() == (source / "files" / "text-131073").read_bytes()
    with image.open("files/text-131073", "r", encoding="ascii") as t:
        assert isinstance(t, io.TextIOWrapper)
        assert t.read() == (source / "files" / "text-131073").read_text("ascii")
    # Files opened stay readable when the image is closed.
    other = squashd.open(image.name)
    f = other.open("a.txt")
    other.close()
    assert other.closed and f.read() == b"A\n"
    with pytest.raises(ValueError):
        other.listdir("/")


def test_xattrs(images):
    with squashd.open(images.image("gzip")) as image:
        assert sorted(image.listxattr("a.txt")) == ["user.binary", "user.plain"]
        assert image.getxattr("a.txt", "user.binary") == b"\x00\xff\x01"
        assert image.getxattr(b"rel", b"user.plain") == b"value"
        assert image.listxattr("rel", follow_symlinks=False) == []
        assert image.listxattr(b"deep") == [b"user.dir"]
        with pytest.raises(OSError) as e:
            image.getxattr("a.txt", "user.none")
        assert e.value.errno == errno.ENODATA


def test_extract_is_the_trees_and_stays_inside_dest(image, source, tmp_path):
    report = image.extract("/", tmp_path / "all")
    assert report["files"] > 600 and report["symlinks"] == 9 and report["hard_links"] == 2
    for rel in ["a.txt", "files/rand-1000000", "sparse/middle", "deep/a/b/c/d/e/leaf"]:
        assert (tmp_path / "all" / rel).read_bytes() == (source / rel).read_bytes(), rel
    assert os.readlink(tmp_path / "all" / "abs") == "/files/rand-4096"
    assert os.stat(tmp_path / "all" / "h1").st_ino == os.stat(tmp_path / "all" / "deep" / "h3").st_ino
    assert os.stat(tmp_path / "all" / "a.txt").st_mtime == 3_000_000_000
    assert stat.S_IMODE(os.stat(tmp_path / "all" / "perms" / "m4755").st_mode) == 0o4755
    # Holes stay holes.
    assert os.stat(tmp_path / "all" / "sparse" / "all-hole").st_blocks == 0
    # A path: under the same relative path, with the directories leading to it.
    image.extract("deep/a/b", tmp_path / "part")
    assert sorted(os.listdir(tmp_path / "part")) == ["deep"]
    assert (tmp_path / "part/deep/a/b/c/d/e/leaf").read_bytes() == b"deep leaf\n"
    image.extract(b"files/rand-1", tmp_path / "one")
    assert os.listdir(tmp_path / "one" / "files") == ["rand-1"]
    # A symlink in the destination is never written through.
    outside = tmp_path / "outside"
    outside.mkdir()
    trap = tmp_path / "trap"
    (trap / "deep").mkdir(parents=True)
    os.symlink(outside, trap / "deep" / "a")
    with pytest.raises(OSError):
        image.extract("deep/a/b", trap)
    with pytest.raises(FileExistsError):
        image.extract("a.txt", tmp_path / "all")
    os.symlink(outside / "a.txt", tmp_path / "one" / "a.txt")
    with pytest.raises(FileExistsError):
        image.extract("a.txt", tmp_path / "one")
    assert os.listdir(outside) == []
    with pytest.raises(OSError) as e:
        image.extract("deep/../a.txt", tmp_path / "dots")
    assert e.value.errno == errno.EINVAL


@pytest.mark.skipif(not IS_ROOT, reason="owners and device nodes need root")
def test_extract_as_root_keeps_owners_and_devices(images, tmp_path):
    with squashd.open(images.image("gzip")) as image:
        image.extract("/", tmp_path / "x")
    st = os.lstat(tmp_path / "x" / "owned")
    assert (st.st_uid, st.st_gid) == (1234, 5678)
    assert os.lstat(tmp_path / "x" / "rel").st_uid == 4000
    dev = os.lstat(tmp_path / "x" / "blockdev")
    assert stat.S_ISBLK(dev.st_mode) and dev.st_rdev == os.makedev(259, 70000)
    assert os.getxattr(tmp_path / "x" / "small" / "s01", "trusted.t") == b"trusted value"


def test_stats_count_what_was_read(images):
    with squashd.open(images.image("gzip"), cache={"data": 1 << 20, "metadata": 1 << 20}) as image:
        before = image.stats()
        image.read_bytes("files/rand-1000000")
        after = image.stats()
    assert after["cache"]["data"]["capacity_bytes"] == 1 << 20
    assert after["cache"]["metadata"]["capacity_bytes"] == 1 << 20
    assert after["cache"]["data"]["misses"] > before["cache"]["data"]["misses"]
    assert after["bytes_read"] > before["bytes_read"] + 900_000
    assert after["remote"] is None and after["image"] == image.name
    with pytest.raises(ValueError):
        squashd.open(images.image("gzip"), cache={"bogus": 1})
