"""The source tree the fixture images are made from, and what its files should hold."""

from __future__ import annotations

import os
import random
import socket
import stat

MIB = 1 << 20
#: The huge sparse file: past 4 GiB (where 32-bit sizes and offsets wrap), with data across
#: the boundary and at its end.
HUGE_LEN = (4 << 30) + 300_017
HUGE_PIECES = [(0, 4096, 500), ((4 << 30) - 100_000, 200_000, 501), (HUGE_LEN - 1000, 1000, 502)]


def rand(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


def text(seed: int, n: int) -> bytes:
    words = [b"squash", b"image", b"block", b"fragment", b"inode", b"xattr", b"\n"]
    r = random.Random(seed)
    out = bytearray()
    while len(out) < n:
        out += r.choice(words) + b" "
    return bytes(out[:n])


def _write(path: bytes, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def build(root: str, *, as_root: bool, huge: bool = False) -> None:
    """Makes the tree at `root` (a new directory)."""
    r = os.fsencode(root)
    j = lambda *parts: os.path.join(r, *parts)  # noqa: E731
    os.mkdir(r)
    _write(j(b"a.txt"), b"A\n")
    _write(j(b"empty"), b"")
    os.mkdir(j(b"files"))
    sizes = [1, 4095, 4096, 4097, 131071, 131072, 131073, 3 * 131072, 1_000_000]
    for i, size in enumerate(sizes):
        _write(j(b"files", b"rand-%d" % size), rand(100 + i, size))
        _write(j(b"files", b"text-%d" % size), text(i, size))
    os.mkdir(j(b"small"))
    for i in range(30):
        n = 1 + (i * 997) % 3000
        _write(j(b"small", b"s%02d" % i), rand(1000 + i, n) if i % 2 else text(i, n))
    # Names: not UTF-8, latin-1, spaces, the longest allowed.
    _write(j(b"caf\xe9"), b"latin-1 name\n")
    os.mkdir(j(b"\xff\xfe-dir"))
    _write(j(b"\xff\xfe-dir", b"\x80"), b"non-UTF-8 in a non-UTF-8 dir\n")
    _write(j(b"with space"), b"space\n")
    _write(j("unicodé ☃".encode()), b"utf-8 name\n")
    _write(j(b"n" * 255), b"a 255-byte name\n")
    # A directory large enough for a directory index.
    os.mkdir(j(b"big"))
    for i in range(600):
        name = b"e%05d%s" % (i, b"x" * (i % 23))
        if i % 97 == 3:
            _write(j(b"big", name), text(i, 10 + i % 300))
        else:
            _write(j(b"big", name), b"")
    os.makedirs(j(b"deep", b"a", b"b", b"c", b"d", b"e"))
    _write(j(b"deep", b"a", b"b", b"c", b"d", b"e", b"leaf"), b"deep leaf\n")
    # Symlinks: relative, absolute (inside the image), dangling, to a directory, a loop, up.
    os.symlink(b"a.txt", j(b"rel"))
    os.symlink(b"/files/rand-4096", j(b"abs"))
    os.symlink(b"nowhere", j(b"dangling"))
    os.symlink(b"deep/a", j(b"dirlink"))
    os.symlink(b"loop2", j(b"loop1"))
    os.symlink(b"loop1", j(b"loop2"))
    os.symlink(b"../a.txt", j(b"deep", b"up"))
    os.symlink(b"rel", j(b"chain"))
    os.symlink(b"x" * 1000, j(b"long-target"))
    # Hard links, one in another directory.
    _write(j(b"h1"), rand(7, 5000))
    os.link(j(b"h1"), j(b"h2"))
    os.link(j(b"h1"), j(b"deep", b"h3"))
    # Sparse files.
    os.mkdir(j(b"sparse"))
    with open(j(b"sparse", b"middle"), "wb") as f:
        f.write(rand(200, 100_000))
        f.seek(3 * MIB + 5)
        f.write(rand(201, 50_000))
        f.truncate(5 * MIB + 3)
    with open(j(b"sparse", b"hole-first"), "wb") as f:
        f.seek(2 * MIB)
        f.write(text(5, 70_000))
    with open(j(b"sparse", b"all-hole"), "wb") as f:
        f.truncate(3 * MIB)
    if huge:
        os.mkdir(j(b"huge"))
        # Compressible and large: one read of it keeps a core decompressing for a while.
        _write(j(b"huge", b"text-32m"), text(32, 32 * MIB))
        with open(j(b"huge", b"sparse"), "wb") as f:
            for at, n, seed in HUGE_PIECES:
                f.seek(at)
                f.write(rand(seed, n))
            f.truncate(HUGE_LEN)
    # Extended attributes.
    os.setxattr(j(b"a.txt"), b"user.plain", b"value")
    os.setxattr(j(b"a.txt"), b"user.binary", b"\x00\xff\x01")
    os.setxattr(j(b"deep"), b"user.dir", b"on a directory")
    os.setxattr(j(b"files", b"rand-1"), b"user.long", rand(9, 3000))
    # Special files, permissions, owners.
    os.mkfifo(j(b"fifo"))
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(j(b"socket"))
    sock.close()
    os.mkdir(j(b"perms"))
    for mode in (0o4755, 0o2711, 0o600, 0o444, 0o000):
        path = j(b"perms", b"m%o" % mode)
        _write(path, b"mode\n")
        os.chmod(path, mode)
    os.mkdir(j(b"perms", b"sticky"))
    os.chmod(j(b"perms", b"sticky"), 0o1777)
    if as_root:
        os.mknod(j(b"chardev"), 0o644 | stat.S_IFCHR, os.makedev(1, 3))
        os.mknod(j(b"blockdev"), 0o600 | stat.S_IFBLK, os.makedev(259, 70000))
        os.setxattr(j(b"small", b"s01"), b"trusted.t", b"trusted value")
        _write(j(b"owned"), b"owned\n")
        os.chown(j(b"owned"), 1234, 5678)
        os.chown(j(b"rel"), 4000, 4001, follow_symlinks=False)
        os.chown(j(b"deep", b"a"), 65534, 65534)
    # Modification times: varied, one past 2038.
    for i, (dirpath, dirnames, filenames) in enumerate(os.walk(r)):
        for k, name in enumerate(sorted(dirnames + filenames)):
            os.utime(os.path.join(dirpath, name), (0, 1_000_000_000 + i * 1000 + k), follow_symlinks=False)
    os.utime(j(b"a.txt"), (0, 3_000_000_000))
    os.utime(r, (0, 1_500_000_000))
