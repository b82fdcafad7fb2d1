"""E5 (issue 16): remote images over loopback with 20 ms of round trip added by
bench/tools/delay_proxy.py in front of nginx, on usr and data.

Systems: `squashd_http` (`squashd mount http://... -o fuse`), `curl_kernel` ((a): curl the whole
image, then the kernel's loop mount), `httpdirfs` ((b): httpdirfs of the server's directory under
squashfuse_ll), and `squashd_local` (`squashd mount FILE -o fuse`, the same image on local disk).
Phases, each run in turn (--runs):

1. `mount`: from the mount command to the first `ls MNT` answering (also squashd through the
   proxy with 0 ms added: what the mount costs besides round trips).
2. `cold`: fresh mount, drop_caches, then E1's cold N=1 `find MNT` of usr and E2's sequential
   cold read of data's 1 GiB file (128 KiB reads, as fio does in E2, timed every 64 MiB).
3. `disk`: squashd_http with `disk_cache=DIR,disk_cache_size=4GiB`: a first mount fills it (the
   walk or the read), unmount, drop_caches, a second mount walks or reads again.
4. `evict`: the same on data with a budget smaller than what the read fetches (128 MiB).

After every phase that had a disk cache: `du -sb DIR` against its budget plus one fetch unit.
The served files are copies of the images (so the local system's file stays cold), read into the
server's page cache after every drop_caches: the server answers from memory, as a busy one would.
"""

import os
import shutil
import subprocess
import time

from .common import WORK_DIR, drop_caches, log, run
from .e5_servers import CurlKernel, DelayProxy, HttpdirfsSquashfuse, Nginx, SquashdMount

RTT_MS = 20
UNIT = 1 << 20  # squashd's default fetch unit
BIG_BUDGET, SMALL_BUDGET = "4GiB", "128MiB"
WALK_TIMEOUT = 900  # seconds a walk or a read may take before it counts as failed
MARK = 64 << 20  # the sequential read notes the time every MARK bytes
E5_DIR = os.path.join(WORK_DIR, "e5")


def _bytes(size):
    return int(size[:-3]) << {"KiB": 10, "MiB": 20, "GiB": 30}[size[-3:]]


def _mnt(name):
    path = os.path.join(WORK_DIR, "mnt", f"e5-{name}")
    os.makedirs(path, exist_ok=True)
    return path


def _served_copy(image):
    """A copy of `image` in the served directory (reused while size and mtime match)."""
    served = os.path.join(E5_DIR, "served")
    os.makedirs(served, exist_ok=True)
    dst = os.path.join(served, os.path.basename(image))
    st = os.stat(image)
    try:
        d = os.stat(dst)
        if d.st_size == st.st_size and int(d.st_mtime) == int(st.st_mtime):
            return dst
    except OSError:
        pass
    log(f"E5: copying {image} to the served directory")
    shutil.copy2(image, dst)
    return dst


def _cold(served):
    """drop_caches (the client's side cold), then the served file read into the page cache."""
    drop_caches()
    with open(served, "rb") as f:
        while f.read(8 << 20):
            pass


def _ls(mnt):
    p = run(["ls", mnt], timeout=120)
    if not p.stdout.strip():
        raise RuntimeError(f"ls {mnt}: empty")


def _walk(mnt):
    start = time.perf_counter()
    run(["find", mnt, "-print"], capture=False, timeout=WALK_TIMEOUT)
    return {"seconds": time.perf_counter() - start}


def _read(path):
    """Reads `path` sequentially in 128 KiB reads; seconds, bytes and (bytes, seconds) every MARK."""
    buf = bytearray(128 << 10)
    marks, total = [], 0
    start = time.perf_counter()
    deadline = start + WALK_TIMEOUT
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            n = os.readv(fd, [buf])
            if n == 0:
                break
            total += n
            if total % MARK == 0:
                now = time.perf_counter()
                marks.append((total, now - start))
                if now > deadline:
                    raise RuntimeError(f"reading {path} took over {WALK_TIMEOUT} s")
    finally:
        os.close(fd)
    seconds = time.perf_counter() - start
    half = [m for m in marks if m[0] >= total // 2]
    second_half = (total - half[0][0]) / (seconds - half[0][1]) if half and seconds > half[0][1] else None
    return {"seconds": seconds, "bytes": total, "bw_bytes": total / seconds, "bw_second_half_bytes": second_half,
            "marks": marks}


def _du(path):
    p = run(["du", "-sb", path], check=False)
    try:
        return int(p.stdout.split()[0])
    except (ValueError, IndexError):
        return 0


def _output(cmd):
    """stdout and stderr of a command (versions are printed on either)."""
    p = run(cmd, check=False, timeout=30)
    return p.stdout + p.stderr


class _Run:
    """One run's measurements, appended to `out`."""

    def __init__(self, out, squashd, squashfuse, proxy, proxy0, images, served, run_no):
        self.out, self.squashd, self.squashfuse = out, squashd, squashfuse
        self.proxy, self.proxy0 = proxy, proxy0
        self.images, self.served, self.run_no = images, served, run_no

    def record(self, phase, key, system, value):
        self.out[phase].setdefault(key, {}).setdefault(system, []).append(dict(value, run=self.run_no))

    def attempt(self, phase, key, system, fn):
        tool = {"httpdirfs": "httpdirfs", "httpdirfs_cache": "httpdirfs", "curl_kernel": "curl"}.get(system)
        if tool in self.out["skipped"]:
            return
        try:
            value = fn()
        except Exception as e:  # noqa: BLE001 - one system's failure must not stop the rest
            log(f"E5 {phase} {key} {system}: failed: {e}")
            self.out["failures"].append(f"run {self.run_no}, {phase} {key} {system}: {e}")
            return
        self.record(phase, key, system, value)
        log(f"E5 run {self.run_no} {phase:5s} {key:4s} {system:18s} "
            + "  ".join(f"{k} {v:.3f}" for k, v in value.items() if isinstance(v, float) and k.endswith("seconds"))
            + (f"  {value['bw_bytes'] / 2**20:.0f} MiB/s" if value.get("bw_bytes") else ""))

    def mount_to_ls(self, key):
        name = os.path.basename(self.images[key])
        mnt = _mnt(key)

        def squashd(proxy):
            def go():
                _cold(self.served[key])
                start = time.perf_counter()
                with SquashdMount(self.squashd, proxy.url(name), mnt) as m:
                    _ls(mnt)
                    seconds = time.perf_counter() - start
                    return {"seconds": seconds, "rtts": seconds * 1000 / RTT_MS, "status": m.status()}
            return go

        def curl():
            _cold(self.served[key])
            dl = os.path.join(E5_DIR, "download", name)
            start = time.perf_counter()
            with CurlKernel(self.proxy.url(name), dl, mnt) as c:
                _ls(mnt)
                return {"seconds": time.perf_counter() - start, "curl_seconds": c.curl_seconds}

        def httpdirfs():
            _cold(self.served[key])
            start = time.perf_counter()
            with HttpdirfsSquashfuse(self.proxy.url(), name, _mnt("httpdirfs"), mnt, self.squashfuse):
                _ls(mnt)
                return {"seconds": time.perf_counter() - start}

        def local():
            drop_caches()
            start = time.perf_counter()
            with SquashdMount(self.squashd, self.images[key], mnt):
                _ls(mnt)
                return {"seconds": time.perf_counter() - start}

        for system, fn in (("squashd_http", squashd(self.proxy)), ("squashd_http_0ms", squashd(self.proxy0)),
                           ("curl_kernel", curl), ("httpdirfs", httpdirfs), ("squashd_local", local)):
            self.attempt("mount", key, system, fn)

    def _work(self, key, mnt):
        return _walk(mnt) if key == "usr" else _read(os.path.join(mnt, self.out["data_file"]))

    def cold(self, key):
        name = os.path.basename(self.images[key])
        mnt = _mnt(key)

        def squashd(source, served, options=""):
            def go():
                with SquashdMount(self.squashd, source, mnt, options) as m:
                    (_cold(served) if served else drop_caches())
                    value = self._work(key, mnt)
                    return dict(value, mount_seconds=m.mount_seconds, status=m.status())
            return go

        def httpdirfs(cache_dir=None):
            def go():
                with HttpdirfsSquashfuse(self.proxy.url(), name, _mnt("httpdirfs"), mnt, self.squashfuse,
                                         cache_dir) as h:
                    _cold(self.served[key])
                    return dict(self._work(key, mnt), mount_seconds=h.mount_seconds)
            return go

        systems = [("squashd_http", squashd(self.proxy.url(name), self.served[key])),
                   ("httpdirfs", httpdirfs()), ("squashd_local", squashd(self.images[key], None)),
                   # Beside (b)'s defaults: httpdirfs with its disk cache (8 MiB segments), empty.
                   ("httpdirfs_cache", httpdirfs(os.path.join(E5_DIR, "httpdirfs-cache")))]
        if key == "data":
            # A diagnosis of the bandwidth: the same with 4 MiB fetch units.
            systems.append(("squashd_http_unit4m", squashd(self.proxy.url(name), self.served[key],
                                                           "fetch_unit=4MiB")))
        for system, fn in systems:
            self.attempt("cold", key, system, fn)

    def disk(self, phase, key, budget):
        """A first mount with a disk cache fills it, a second after drop_caches uses it; du after each."""
        name = os.path.basename(self.images[key])
        mnt = _mnt(key)
        cache = os.path.join(E5_DIR, f"cache-{phase}-{key}")
        shutil.rmtree(cache, ignore_errors=True)
        os.makedirs(cache)
        limit = _bytes(budget) + UNIT
        opts = f"disk_cache={cache},disk_cache_size={budget}"

        def check(step):
            size = _du(cache)
            self.out["disk_checks"].append({"run": self.run_no, "phase": phase, "image": key, "step": step,
                                            "budget": budget, "du_bytes": size, "limit_bytes": limit,
                                            "ok": size <= limit})
            if size > limit:
                log(f"E5 {phase} {key}: disk cache {size} bytes after {step}: over {budget} + one unit")

        def mount_and_work(step):
            def go():
                _cold(self.served[key])
                with SquashdMount(self.squashd, self.proxy.url(name), mnt, opts) as m:
                    after_mount = m.status()
                    value = self._work(key, mnt)
                    check(f"{step}, mounted")
                    value = dict(value, mount_seconds=m.mount_seconds, status_after_mount=after_mount,
                                 status=m.status())
                check(f"{step}, unmounted")
                return value
            return go

        try:
            for step in ("fill", "warm"):
                self.attempt(phase, key, f"squashd_http_{step}", mount_and_work(step))
        finally:
            shutil.rmtree(cache, ignore_errors=True)


def e5_remote(squashd, squashfuse, usr, data, runs):
    """E5: see the module's doc. Returns the raw runs (report in e5_report)."""
    out = {"rtt_ms": RTT_MS, "unit_bytes": UNIT, "budgets": [BIG_BUDGET, SMALL_BUDGET], "runs": runs,
           "data_file": data["file"], "file_bytes": data["file_bytes"],
           "image_bytes": {"usr": usr["image_bytes"], "data": data["image_bytes"]},
           "mount": {}, "cold": {}, "disk": {}, "evict": {}, "disk_checks": [], "failures": [], "skipped": {}}
    for tool, why in (("nginx", None if Nginx.binary() else "nginx is not installed (scripts/setup.sh)"),
                      ("httpdirfs", None if shutil.which("httpdirfs") else "httpdirfs is not installed (scripts/setup.sh)"),
                      ("curl", None if shutil.which("curl") else "curl is not installed")):
        if why:
            out["skipped"][tool] = why
    if "nginx" in out["skipped"] or not os.path.exists("/dev/fuse"):
        out["skipped"].setdefault("all", "needs nginx and /dev/fuse")
        return out
    images = {"usr": usr["path"], "data": data["path"]}
    served = {k: _served_copy(v) for k, v in images.items()}
    out["versions"] = {"nginx": _output([Nginx.binary(), "-v"]).strip(),
                       "httpdirfs": next((line for line in _output(["httpdirfs", "--version"]).splitlines()
                                          if line.startswith("HTTPDirFS")), "httpdirfs ?"),
                       "curl": run(["curl", "--version"], check=False).stdout.split("\n")[0]}
    # Bounded: the proxies exit by themselves after 3 hours, whatever happens to this process.
    with Nginx(os.path.join(E5_DIR, "served")) as nginx, \
            DelayProxy(nginx.port, RTT_MS, 3 * 3600) as proxy, DelayProxy(nginx.port, 0, 3 * 3600) as proxy0:
        for r in range(runs):
            one = _Run(out, squashd, squashfuse, proxy, proxy0, images, served, r + 1)
            for key in ("usr", "data"):
                one.mount_to_ls(key)
            for key in ("usr", "data"):
                one.cold(key)
            for key in ("usr", "data"):
                one.disk("disk", key, BIG_BUDGET)
            one.disk("evict", "data", SMALL_BUDGET)
    subprocess.run(["rm", "-rf", os.path.join(E5_DIR, "download")], check=False)
    return out
