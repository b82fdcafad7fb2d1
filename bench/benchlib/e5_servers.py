"""E5's loopback servers and the FUSE stack it compares squashd with: nginx serving a directory,
the delaying proxy in front of it (bench/tools/delay_proxy.py), and httpdirfs (the server's
directory as files) under squashfuse_ll. Each is a context manager that stops what it started on
exit, whatever happened, and `stop_all()` (run.py's `finally`) stops anything still running."""

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from .common import BENCH_DIR, WORK_DIR, log, run
from .mounts import mounted, wait_mounted

PROXY = os.path.join(BENCH_DIR, "tools", "delay_proxy.py")
_live = []  # objects with .stop(), in the order started


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(port, timeout=0.5):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"HEAD / HTTP/1.0\r\n\r\n")
            return s.recv(64).startswith(b"HTTP/")
    except OSError:
        return False


def _stop_proc(proc, name):
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log(f"{name} ignored SIGTERM: killing it")
            proc.kill()
            proc.wait()


class _Managed:
    def __enter__(self):
        _live.append(self)
        try:
            self.start()
        except BaseException:
            self.stop()
            _live.remove(self)
            raise
        return self

    def __exit__(self, *exc):
        try:
            self.stop()
        finally:
            if self in _live:
                _live.remove(self)
        return False


class Nginx(_Managed):
    """Debian's nginx in the foreground (`daemon off; master_process off`), serving `root` on
    127.0.0.1 with ranges and ETags (its defaults) and directory listings (`autoindex`, which
    httpdirfs reads). Its configuration, logs and pid stay in a temporary directory."""

    def __init__(self, root):
        self.root = os.path.realpath(root)
        self.proc = None
        self.port = None
        self.state = None

    @staticmethod
    def binary():
        return shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)

    def _config(self):
        s = self.state
        return f"""daemon off;
master_process off;
worker_processes 1;
pid "{s}/nginx.pid";
error_log "{s}/error.log" warn;
events {{ worker_connections 1024; }}
http {{
    default_type application/octet-stream;
    access_log off;
    client_body_temp_path "{s}/body";
    proxy_temp_path "{s}/proxy";
    fastcgi_temp_path "{s}/fastcgi";
    uwsgi_temp_path "{s}/uwsgi";
    scgi_temp_path "{s}/scgi";
    sendfile on;
    keepalive_requests 1000000;
    keepalive_timeout 600s;
    server {{
        listen 127.0.0.1:{self.port};
        root "{self.root}";
        autoindex on;
    }}
}}
"""

    def start(self):
        binary = self.binary()
        if not binary:
            raise RuntimeError("nginx is not installed (scripts/setup.sh installs nginx-light)")
        self.state = tempfile.mkdtemp(prefix="e5-nginx-", dir=WORK_DIR)
        for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            os.makedirs(os.path.join(self.state, sub))
        conf = os.path.join(self.state, "nginx.conf")
        for _ in range(8):  # another process may take the port between _free_port and bind
            self.port = _free_port()
            with open(conf, "w") as f:
                f.write(self._config())
            self.proc = subprocess.Popen([binary, "-p", self.state, "-c", conf, "-e", f"{self.state}/error.log"],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.proc.poll() is None and not _answers(self.port):
                time.sleep(0.02)
            if self.proc.poll() is None and _answers(self.port):
                return
            _stop_proc(self.proc, "nginx")
            err = open(os.path.join(self.state, "error.log")).read()
            if "Address already in use" not in err:
                raise RuntimeError(f"nginx did not start: {err.strip()[-300:]}")
        raise RuntimeError("nginx found no free port on 127.0.0.1")

    def stop(self):
        _stop_proc(self.proc, "nginx")
        if self.state:
            shutil.rmtree(self.state, ignore_errors=True)


class DelayProxy(_Managed):
    """bench/tools/delay_proxy.py in front of `target_port`: `rtt_ms` added to every round trip
    (and one RTT to a new connection's first bytes, as a TCP handshake would). Written in Python:
    it forwards at most about 0.5-1 GB/s on this machine, which bounds the bandwidth figures."""

    def __init__(self, target_port, rtt_ms, max_seconds):
        self.target_port, self.rtt_ms, self.max_seconds = target_port, rtt_ms, max_seconds
        self.proc = None
        self.port = None

    def start(self):
        self.proc = subprocess.Popen(
            ["python3", PROXY, "--listen", "127.0.0.1:0", "--target", f"127.0.0.1:{self.target_port}",
             "--rtt-ms", str(self.rtt_ms), "--max-seconds", str(int(self.max_seconds))],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if not line.isdigit():
            self.stop()
            raise RuntimeError(f"delay_proxy did not start: {line} {self.proc.stderr.read()[-300:]}")
        self.port = int(line)

    def stop(self):
        _stop_proc(self.proc, "delay_proxy")

    def url(self, name=""):
        return f"http://127.0.0.1:{self.port}/{name}"


def unmount(mnt):
    """umount (root unmounts FUSE mounts too), lazily if it is busy."""
    if mounted(mnt):
        if run(["umount", mnt], check=False).returncode != 0 and mounted(mnt):
            run(["umount", "-l", mnt], check=False)


def _pids_on(mnt, program):
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv and os.path.basename(argv[0].decode(errors="replace")) == program and mnt.encode() in argv:
                out.append(int(name))
    return out


def wait_exit(pids, timeout=10.0):
    """Waits for processes that end by themselves once their mount is gone; kills stragglers."""
    deadline = time.monotonic() + timeout
    while any(os.path.exists(f"/proc/{p}") for p in pids) and time.monotonic() < deadline:
        time.sleep(0.01)
    for p in pids:
        if os.path.exists(f"/proc/{p}"):
            log(f"WARNING: process {p} still running {timeout:.0f} s after its unmount: killing it")
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass


class HttpdirfsSquashfuse(_Managed):
    """(b): httpdirfs mounts the server's directory (its defaults otherwise: no disk cache), then
    squashfuse_ll mounts the image file inside it. `mount_seconds` is the time both took, until
    squashfuse_ll's mount is up."""

    def __init__(self, dir_url, name, http_mnt, mnt, squashfuse, cache_dir=None):
        self.dir_url, self.name, self.http_mnt, self.mnt = dir_url, name, http_mnt, mnt
        self.squashfuse = squashfuse
        self.cache_dir = cache_dir  # httpdirfs --cache --cache-location (removed when stopped)
        self.mount_seconds = None

    def start(self):
        for d in (self.http_mnt, self.mnt):
            os.makedirs(d, exist_ok=True)
        start = time.perf_counter()
        # --no-range-check: httpdirfs 1.2.5 refuses nginx ("does not support HTTP range requests")
        # although nginx answers ranged GETs with 206 and sends Accept-Ranges: bytes.
        cache = []
        if self.cache_dir:
            shutil.rmtree(self.cache_dir, ignore_errors=True)
            os.makedirs(self.cache_dir)
            cache = ["--cache", "--cache-location", self.cache_dir]
        run(["httpdirfs", "--no-range-check", *cache, self.dir_url, self.http_mnt], timeout=120)
        wait_mounted(self.http_mnt, timeout=60)
        run([self.squashfuse, os.path.join(self.http_mnt, self.name), self.mnt], timeout=300)
        wait_mounted(self.mnt, timeout=60)
        self.mount_seconds = time.perf_counter() - start

    def stop(self):
        pids = _pids_on(self.mnt, os.path.basename(self.squashfuse)) + _pids_on(self.http_mnt, "httpdirfs")
        unmount(self.mnt)
        unmount(self.http_mnt)
        wait_exit(pids)
        if self.cache_dir:
            shutil.rmtree(self.cache_dir, ignore_errors=True)


def stop_all():
    """Stops whatever is still running (called from run.py's `finally`)."""
    for obj in reversed(list(_live)):
        try:
            obj.stop()
        except Exception as e:  # noqa: BLE001 - keep stopping the rest
            log(f"WARNING: stopping {type(obj).__name__}: {e}")
        if obj in _live:
            _live.remove(obj)


class SquashdMount(_Managed):
    """`squashd mount SOURCE MNT -o fuse,control=SOCK[,OPTIONS]` (a URL or a local file); it
    returns once the mount answers. Stopping unmounts and waits for the process to exit, so that
    whatever it writes at exit (its disk cache) is done before the next mount."""

    def __init__(self, binary, source, mnt, options=""):
        self.binary, self.source, self.mnt, self.options = binary, source, mnt, options
        self.socket = mnt.rstrip("/") + ".control"
        self.mount_seconds = None

    def start(self):
        os.makedirs(self.mnt, exist_ok=True)
        opts = f"fuse,control={self.socket}" + (f",{self.options}" if self.options else "")
        start = time.perf_counter()
        p = run([self.binary, "mount", self.source, self.mnt, "-o", opts], check=False, timeout=300)
        self.mount_seconds = time.perf_counter() - start
        if p.returncode != 0:
            raise RuntimeError(f"squashd mount {self.source}: exit {p.returncode}: {p.stderr.strip()[-300:]}")
        if not mounted(self.mnt):
            raise RuntimeError(f"squashd mount {self.source} returned but {self.mnt} is not mounted")

    def status(self):
        """This mount's entry of `squashd status --json` (None if it does not answer)."""
        p = run([self.binary, "status", "--json", "--socket", self.socket], check=False, timeout=30)
        try:
            images = json.loads(p.stdout).get("images") or [None]
        except ValueError:
            return None
        img = images[0] or {}
        return {"remote": img.get("remote"), "fuse_requests": img.get("requests"), "bytes_read": img.get("bytes_read")}

    def stop(self):
        pids = _pids_on(self.mnt, "squashd")
        unmount(self.mnt)
        wait_exit(pids, timeout=60)


class CurlKernel(_Managed):
    """(a): `curl -o FILE URL` of the whole image, then the kernel's `mount -t squashfs -o loop,ro`."""

    def __init__(self, url, download, mnt):
        self.url, self.download, self.mnt = url, download, mnt
        self.curl_seconds = self.mount_seconds = None

    def start(self):
        os.makedirs(self.mnt, exist_ok=True)
        os.makedirs(os.path.dirname(self.download), exist_ok=True)
        start = time.perf_counter()
        run(["curl", "-sS", "-f", "-o", self.download, self.url], timeout=900)
        self.curl_seconds = time.perf_counter() - start
        run(["mount", "-t", "squashfs", "-o", "loop,ro", self.download, self.mnt], timeout=120)
        self.mount_seconds = time.perf_counter() - start

    def stop(self):
        unmount(self.mnt)
        if os.path.exists(self.download):
            os.remove(self.download)
