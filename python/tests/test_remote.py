"""Images on an HTTP server (a loopback server with ranges, stopped by the test) and in S3
(s3s-fs, when scripts/setup.sh installed it): read through squashd's remote source, compared
with unsquashfs's extraction."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import squashd
from compare import compare
from conftest import skip
from httpserver import RangeServer


@pytest.fixture
def served(images, tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    shutil.copy(images.image("gzip"), root / "img.sqfs")
    with RangeServer(root) as server:
        yield server


def test_http_image_reads_like_the_local_one(images, served, tmp_path):
    url = f"{served.url}/img.sqfs"
    with squashd.open(url) as image:
        assert image.name == url
        compare(image, images.unsquashed("gzip"), kernel=False)
        stats = image.stats()
    assert stats["remote"]["requests"] >= 2 and stats["remote"]["bytes_fetched"] > 0
    assert all(method == "GET" and rng.startswith("bytes=") for method, _, rng in served.requests)
    with pytest.raises(OSError):
        squashd.open(f"{served.url}/missing.sqfs")


def test_disk_cache_serves_a_second_open(images, served, tmp_path):
    url = f"{served.url}/img.sqfs"
    cache = tmp_path / "cache"
    # No read-ahead: what is fetched is what the reads need, the same both times.
    with squashd.open(url, disk_cache=cache, read_ahead=0) as image:
        first = image.read_bytes("files/rand-1000000")
    asked = len(served.requests)
    with squashd.open(url, disk_cache=cache, read_ahead=0) as image:
        assert image.read_bytes("files/rand-1000000") == first
        assert image.stats()["remote"]["disk_cache_hits"] > 0
    # The second open asks only for the first unit (size and version); the rest is on disk.
    assert len(served.requests) - asked <= 1
    assert any(cache.iterdir())


CLOSE_CHILD = """
import sys, shutil, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from httpserver import RangeServer
import squashd
www = Path(tempfile.mkdtemp())
shutil.copy(sys.argv[1], www / "img.sqfs")
with RangeServer(www) as server:
    for _ in range(5):
        image = squashd.open(server.url + "/img.sqfs")
        image.read_bytes("files/rand-1000000")
        image.close()
shutil.rmtree(www)
print("closed")
"""


def test_closing_does_not_wait_for_read_ahead_holding_the_gil(images):
    """Read-ahead threads fetching from a server that runs in the same interpreter (it needs
    the GIL to answer) must not be joined by close() with the GIL held: that hung. In a child,
    whose hang is a timeout here."""
    done = subprocess.run(
        [sys.executable, "-c", CLOSE_CHILD, str(images.image("gzip")), str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "closed", done.stderr[-2000:]


def test_fsspec_chained_http_url(images, served):
    fsspec = pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp", reason="fsspec's HTTP file system parses ::http:// URLs")
    url = f"squashfs://files/text-131073::{served.url}/img.sqfs"
    with fsspec.open(url, "rb") as f:
        data = f.read()
    assert data == (images.unsquashed("gzip") / "files" / "text-131073").read_bytes()
    # squashd's source fetched it: ranged GETs only, never the whole object.
    assert all(rng for _, _, rng in served.requests)


def find_s3s_fs():
    for candidate in [shutil.which("s3s-fs"), os.path.expanduser("~/.cargo/bin/s3s-fs")]:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def test_s3_image(images, tmp_path, monkeypatch):
    program = find_s3s_fs()
    if program is None:
        skip("s3s-fs is not installed (scripts/setup.sh installs it)")
    root = tmp_path / "s3"
    (root / "bucket").mkdir(parents=True)
    shutil.copy(images.image("gzip"), root / "bucket" / "img.sqfs")
    log = open(tmp_path / "s3s-fs.log", "w+")
    key, secret = "TESTPYSQUASHD", "s3cr3t-" + os.urandom(8).hex()
    child = subprocess.Popen(
        [program, "--host", "127.0.0.1", "--port", "0", "--access-key", key, "--secret-key", secret, str(root)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "RUST_LOG": "s3s_fs=info", "NO_COLOR": "1"},
    )
    try:
        endpoint = None
        deadline = time.time() + 10
        while endpoint is None and time.time() < deadline and child.poll() is None:
            time.sleep(0.05)
            log.seek(0)
            for line in log.read().splitlines():
                if "http://127.0.0.1:" in line:
                    endpoint = "http://" + line.split("http://", 1)[1].split()[0].rstrip("/")
        if endpoint is None:
            log.seek(0)
            skip(f"s3s-fs did not start: {log.read()[-500:]}")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
        monkeypatch.setenv("AWS_REGION", "us-east-1")
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        with squashd.open("s3://bucket/img.sqfs") as image:
            compare(image, images.unsquashed("gzip"), kernel=False)
        fsspec = pytest.importorskip("fsspec")
        fs = fsspec.filesystem("squashfs", fo="s3://bucket/img.sqfs", target_protocol="s3")
        assert fs.cat("a.txt") == b"A\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        log.close()
