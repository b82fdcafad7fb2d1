"""The file systems under test, how to tell whether this machine has them, and how to
mount and unmount an image with each, always with the tool's own defaults.

Every mount made here is recorded, and `cleanup()` (called from a `finally` in run.py) takes
down whatever is left, so an interrupted run leaves no mount, loop device or daemon behind.
"""

import ctypes
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from .common import WORK_DIR, first_line, is_root, log, pids_with_args, rss_bytes, run

_live_mounts = set()
_live_procs = {}


def mounted(path):
    """Whether `path` is a mountpoint now (per /proc/mounts)."""
    path = os.path.realpath(path)
    with open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 1 and fields[1].replace("\\040", " ") == path:
                return True
    return False


def wait_mounted(path, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not mounted(path):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} did not appear mounted within {timeout:.0f} s")
        time.sleep(0.005)


class System:
    """One file system implementation: kernel, squashfuse or squashd."""

    name = "?"
    label = "?"
    fuse = False

    def __init__(self):
        self.skip_reason = None
        self.version = None

    def mount(self, image, mnt):
        raise NotImplementedError

    def unmount(self, mnt):
        cmd = ["fusermount3", "-u", mnt] if self.fuse else ["umount", mnt]
        p = run(cmd, check=False)
        if p.returncode != 0 and mounted(mnt):
            # Busy after a killed run: detach lazily rather than leave it behind.
            run(["umount", "-l", mnt], check=False)
        _live_mounts.discard(mnt)

    def daemon_pids(self, image):
        """Pids of the processes serving `image` (FUSE only)."""
        return []

    def counters(self, mnt):
        """The file system's own counters for a mount, where it can report them."""
        return None

    def backing_files(self, image, mnt):
        """The files a mount of `image` reads from, by role, for page-cache accounting."""
        return {"image": image}

    def mounted_at(self, image, mnt):
        """Context manager: `image` mounted on `mnt` for the duration of a `with`."""
        return _Mounted(self, image, mnt)


class _Mounted:
    def __init__(self, system, image, mnt):
        self.system, self.image, self.mnt = system, image, mnt

    def __enter__(self):
        os.makedirs(self.mnt, exist_ok=True)
        _live_mounts.add((self.system, self.mnt))
        self.system.mount(self.image, self.mnt)
        return self.mnt

    def __exit__(self, *exc):
        try:
            self.system.unmount(self.mnt)
        finally:
            _live_mounts.discard((self.system, self.mnt))
        return False


class Kernel(System):
    name = "kernel"
    label = "kernel squashfs (loop)"

    def __init__(self):
        super().__init__()
        self.version = "Linux " + os.uname().release
        if not is_root():
            self.skip_reason = "not root: loop mounts need root"
        elif not os.path.exists("/dev/loop-control"):
            self.skip_reason = "no /dev/loop-control: loop devices unavailable"
        else:
            with open("/proc/filesystems") as f:
                has = any(line.split()[-1] == "squashfs" for line in f if line.strip())
            if not has:
                run(["modprobe", "squashfs"], check=False)
                with open("/proc/filesystems") as f:
                    has = any(line.split()[-1] == "squashfs" for line in f if line.strip())
            if not has:
                self.skip_reason = "the kernel has no squashfs support"

    def mount(self, image, mnt):
        # mount(8) sets up the loop device (autoclear) and frees it at umount.
        run(["mount", "-t", "squashfs", "-o", "loop,ro", image, mnt])


class Squashfuse(System):
    name = "squashfuse"
    fuse = True

    def __init__(self, binary):
        super().__init__()
        self.binary = binary
        self.label = os.path.basename(binary)
        if not os.path.exists(binary) and not _which(binary):
            self.skip_reason = f"{binary} not found (Debian package squashfuse)"
        elif not os.path.exists("/dev/fuse"):
            self.skip_reason = "no /dev/fuse"
        else:
            self.version = _squashfuse_version(binary)
            self.label = f"{os.path.basename(binary)} {self.version}"

    def mount(self, image, mnt):
        # squashfuse_ll daemonizes itself once the mount is made.
        run([self.binary, image, mnt])
        wait_mounted(mnt)

    def daemon_pids(self, image):
        return pids_with_args(os.path.basename(self.binary), image)


class Squashd(System):
    name = "squashd"
    fuse = True

    def __init__(self, binary, options=None, name=None, label=None, cpu=None):
        super().__init__()
        self.binary = binary
        self.options = options
        self.cpu = cpu
        if name:
            self.name = name
        self.label = label or "squashd"
        self.version = first_line([binary, "--version"])
        self.has_mount = _exit_ok([binary, "mount", "--help"])
        self.has_serve = _exit_ok([binary, "serve", "--help"])
        self.has_status = _exit_ok([binary, "status", "--help"])
        if not os.path.exists("/dev/fuse"):
            self.skip_reason = "no /dev/fuse"
        elif not self.has_mount:
            self.skip_reason = "squashd mount not available yet"

    def mount(self, image, mnt):
        # `squashd mount` detaches once the mount answers; default budgets and threads. The
        # control socket only answers `squashd status` (for the counters beside the times).
        options = f"control={self._socket(mnt)}" + (f",{self.options}" if self.options else "")
        pin = ["taskset", "-c", str(self.cpu)] if self.cpu is not None else []
        run(pin + [self.binary, "mount", image, mnt, "-o", options])
        wait_mounted(mnt)

    @staticmethod
    def _socket(mnt):
        return mnt.rstrip("/") + ".control"

    def daemon_pids(self, image):
        return pids_with_args("squashd", image)

    def counters(self, mnt):
        """The mount's counters: `squashd status --json` on its control socket."""
        if not self.has_status:
            return None
        status = squashd_status(self.binary, self._socket(mnt))
        if status is None:
            return None
        images = status.get("images", status) if isinstance(status, dict) else status
        if isinstance(images, list):
            for entry in images:
                if isinstance(entry, dict) and entry.get("mountpoint") == mnt:
                    return entry
        return None


def _has_erofs():
    """Whether the kernel mounts EROFS (loading the module if it must)."""
    def listed():
        with open("/proc/filesystems") as f:
            return any(line.split()[-1] == "erofs" for line in f if line.strip())
    if not listed():
        run(["modprobe", "erofs"], check=False)
    return listed()


def _kernel_at_least(major, minor):
    m = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (major, minor)


class SquashdKernel(Squashd):
    """squashd's kernel path: `squashd mount IMG MNT -o kernel,control=SOCK` translates the
    image's metadata into an EROFS metadata image and mounts the kernel's EROFS on it, file data
    read from squashd's blob file system. The mount command returns once the mount answers.
    Unmounted with umount(8): it is an erofs mount, and the squashd process exits by itself once
    the kernel lets go of its blob."""

    fuse = False

    def __init__(self, binary, variant=None, env=None, extra_options=None):
        """`variant`: the name of another build or setting (`run.py --kernel-variant`), shown as
        squashd_kernel_VARIANT; `env`: variables added to the environment of its mounts;
        `extra_options`: mount options added after `kernel` (e.g. `uring=on`)."""
        name = f"squashd_kernel_{variant}" if variant else "squashd_kernel"
        label = "squashd, kernel path (EROFS)" + (f", {variant}" if variant else "")
        super().__init__(binary, options="kernel", name=name, label=label)
        self.env = env or {}
        self.extra_options = extra_options
        if variant:
            self.version = f"{self.version} ({binary}" + "".join(f", {k}={v}" for k, v in self.env.items()) + ")"
        self.last_mount_seconds = None
        if self.skip_reason:
            return
        if not is_root():
            self.skip_reason = "not root: the kernel path mounts EROFS"
        elif not _kernel_at_least(6, 12):
            self.skip_reason = f"kernel {os.uname().release}: EROFS mounts regular files from Linux 6.12"
        elif not _has_erofs():
            self.skip_reason = "the kernel has no EROFS support"

    def mount(self, image, mnt):
        start = time.perf_counter()
        options = f"kernel,control={self._socket(mnt)}" + (f",{self.extra_options}" if self.extra_options else "")
        run([self.binary, "mount", image, mnt, "-o", options],
            env=dict(os.environ, **self.env) if self.env else None)
        self.last_mount_seconds = time.perf_counter() - start
        if not mounted(mnt):
            raise RuntimeError(f"squashd mount -o kernel returned but {mnt} is not mounted")

    def mount_info(self, mnt):
        """Time from `squashd mount` to the mount answering, and what the translation gave."""
        c = self.counters(mnt) or {}
        pids = [p for p in pids_with_args("squashd", "") if _cmdline_has(p, mnt)]
        return {"mount_seconds": self.last_mount_seconds, "engine": c.get("engine"),
                "translation": c.get("translation"),
                # The daemon's peak RSS so far (the translation's peak memory is within it) and now.
                "daemon_hwm_bytes": sum(_status_bytes(p, "VmHWM") for p in pids) or None,
                "daemon_rss_bytes": sum(rss_bytes(p) for p in pids) or None}

    def backing_files(self, image, mnt):
        """The image, and the files of the blob file system EROFS reads (the metadata image and
        the blob): with direct I/O none of their pages should be cached."""
        out = {"image": image}
        source = _mount_source(mnt)
        if source and os.path.isdir(os.path.dirname(source)):
            d = os.path.dirname(source)
            for name in sorted(os.listdir(d)):
                out[f"blob fs: {name}"] = os.path.join(d, name)
        return out

    def unmount(self, mnt):
        pids = [p for p in pids_with_args("squashd", "") if _cmdline_has(p, mnt)]
        super().unmount(mnt)
        # The daemon exits by itself once the kernel lets go of the blob; wait for it, so that
        # the next mount does not share the machine with a dying one.
        deadline = time.monotonic() + 10
        while any(os.path.exists(f"/proc/{p}") for p in pids) and time.monotonic() < deadline:
            time.sleep(0.01)
        left = [p for p in pids if os.path.exists(f"/proc/{p}")]
        blobs = [f"/run/squashd/mount-{p}" for p in pids if mounted(f"/run/squashd/mount-{p}")]
        if blobs:
            log(f"WARNING: blob file system(s) {blobs} still mounted after umount {mnt}")
            _leftover_notes.append(f"blob file system(s) {blobs} still mounted after umount {mnt}")
        if left:
            log(f"WARNING: squashd {left} still running 10 s after umount {mnt}")
            _leftover_notes.append(f"squashd process(es) {left} still running 10 s after umount {mnt}")


def _mount_source(mnt):
    """The source (device or file) of the mount on `mnt`, per /proc/mounts."""
    path = os.path.realpath(mnt)
    with open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 1 and fields[1].replace("\\040", " ") == path:
                return fields[0].replace("\\040", " ")
    return None


def _cachestat(path):
    """Bytes of `path` in the page cache by cachestat(2) (Linux 6.5+), or None."""
    class Range(ctypes.Structure):
        _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]

    class Stat(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint64) for n in
                    ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")]

    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        st = Stat()
        # 451: cachestat in the one syscall table every architecture shares for new calls.
        if libc.syscall(451, fd, ctypes.byref(Range(0, 0)), ctypes.byref(st), 0) != 0:
            return None
        return st.nr_cache * os.sysconf("SC_PAGE_SIZE")
    finally:
        os.close(fd)


def cached_bytes(path):
    """Bytes of `path` in the page cache, or None when it cannot tell. cachestat(2) first: fincore
    (util-linux 2.38) maps the file, and mapping a FUSE file opened FOPEN_DIRECT_IO (the kernel
    path's blob) drops its page cache first, so fincore would always read 0 there."""
    n = _cachestat(path)
    if n is not None:
        return n
    p = run(["fincore", "--bytes", "--noheadings", "--output", "RES", path], check=False)
    try:
        return int(p.stdout.split()[0]) if p.returncode == 0 else None
    except (ValueError, IndexError):
        return None


def _status_bytes(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _cmdline_has(pid, needle):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return needle.encode() in f.read()
    except OSError:
        return False


# Anything odd seen while unmounting (processes that did not exit): reported with the results.
_leftover_notes = []

MS_RDONLY = 1


class Erofs(System):
    """The kernel's EROFS on a `mkfs.erofs --chunksize=1048576 --blobdev=BLOB META SRC` image of
    the same tree (images.build_erofs), the reference of issue 15. Mounted file-backed with
    mount(2) on META itself and `device=BLOB` (mount(8) would put a loop device under the file,
    and EROFS then refuses a file as extra device); no loop device. `images` maps a squashfs
    image path to the sidecar of its EROFS equivalent."""

    name = "erofs"
    label = "kernel EROFS (mkfs.erofs metadata + blob)"

    def __init__(self):
        super().__init__()
        self.version = "Linux " + os.uname().release
        self.images = {}
        if not is_root():
            self.skip_reason = "not root: mount(2) needs root"
        elif not _kernel_at_least(6, 12):
            self.skip_reason = f"kernel {os.uname().release}: EROFS mounts regular files from Linux 6.12"
        elif not _has_erofs():
            self.skip_reason = "the kernel has no EROFS support"
        else:
            self.version = (first_line(["mkfs.erofs", "--version"]) or "mkfs.erofs ?") + ", Linux " + os.uname().release
            if not shutil.which("mkfs.erofs"):
                self.skip_reason = "mkfs.erofs not found (Debian package erofs-utils)"

    def backing_files(self, image, mnt):
        ref = self.images.get(image) or {}
        return {"metadata image": ref.get("meta"), "blob": ref.get("blob")}

    def mount(self, image, mnt):
        ref = self.images.get(image)
        if not ref:
            raise RuntimeError(f"no EROFS image built for {image}")
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
        rc = libc.mount(ref["meta"].encode(), mnt.encode(), b"erofs", MS_RDONLY,
                        f"device={ref['blob']}".encode())
        if rc != 0:
            err = ctypes.get_errno()
            raise RuntimeError(f"mount(2) erofs {ref['meta']} on {mnt} (device={ref['blob']}): {os.strerror(err)}")


def loop_devices(backed_by=None):
    """Loop devices attached now (with a backing file), as "loopN:FILE"; with `backed_by` (path
    prefixes), only those whose backing file lies under one of them: other work on the machine
    (test suites) attaches loop devices of its own meanwhile."""
    out = []
    for p in glob.glob("/sys/block/loop*/loop/backing_file"):
        try:
            with open(p) as f:
                backing = f.read().strip()
        except OSError:
            continue
        if backed_by is None or any(backing.startswith(b) for b in backed_by):
            out.append(f"{p.split('/')[3]}:{backing}")
    return sorted(out)


def squashd_status(binary, socket_path):
    """`squashd status --json` of the daemon or mount listening on `socket_path`, parsed; None
    when it does not answer."""
    p = run([binary, "status", "--json", "--socket", socket_path], check=False)
    if p.returncode != 0:
        return None
    try:
        return json.loads(p.stdout)
    except ValueError:
        return None


def _squashfuse_version(binary):
    """The version squashfuse prints (on stderr, after its usage text on stdout)."""
    try:
        p = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    m = re.search(r"squashfuse (\d[\w.]*)", p.stdout + p.stderr)
    return m.group(1) if m else "?"


def _which(name):
    for d in os.environ.get("PATH", "").split(":"):
        if d and os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    return None


def _exit_ok(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class ServeDaemon:
    """`squashd serve --config FILE` serving many images from one process (issue 4).

    Everything that depends on the serve interface is in this class: the TOML config, readiness
    (READY=1 on NOTIFY_SOCKET, with polling of the mountpoints as a fallback) and shutdown."""

    def __init__(self, binary, pairs, timeout=120.0, options=None):
        self.binary, self.pairs, self.timeout = binary, pairs, timeout
        # `options = "kernel"` per image: the kernel path (erofs mounts, unmounted by umount(8)).
        # A dict gives each image its own options (E7: each its own hash tree).
        self.options = options
        every = options.values() if isinstance(options, dict) else [options]
        kernel = any(o and "kernel" in o.split(",") for o in every)
        self.unmounter = _UmountUnmounter if kernel else _FuseUnmounter
        self.ready_seconds = None
        self.proc = None
        self.dir = tempfile.mkdtemp(prefix="serve-", dir=WORK_DIR)
        self.socket = os.path.join(self.dir, "control.sock")

    def config_text(self):
        lines = [f"socket = {json.dumps(self.socket)}", ""]
        for image, mnt in self.pairs:
            lines += ["[[image]]", f"path = {json.dumps(image)}", f"mountpoint = {json.dumps(mnt)}"]
            options = self.options.get(image) if isinstance(self.options, dict) else self.options
            if options:
                lines.append(f"options = {json.dumps(options)}")
            lines.append("")
        return "\n".join(lines)

    def start(self):
        """Starts the daemon; returns once every image is mounted (READY=1 or all mountpoints)."""
        config = os.path.join(self.dir, "serve.toml")
        with open(config, "w") as f:
            f.write(self.config_text())
        notify_path = os.path.join(self.dir, "notify.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(notify_path)
        # READY=1 wakes the wait at once; the timeout only paces the fallback checks (the daemon
        # died, or it never notifies), which cost a read of /proc/mounts per image.
        sock.settimeout(0.5)
        env = dict(os.environ, NOTIFY_SOCKET=notify_path)
        for _, mnt in self.pairs:
            _live_mounts.add((self.unmounter, mnt))
        start = time.perf_counter()
        self.proc = subprocess.Popen(
            [self.binary, "serve", "--config", config],
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(self.dir, "serve.log"), "w"),
            env=env,
        )
        _live_procs[self.proc.pid] = self.proc
        deadline = time.monotonic() + self.timeout
        try:
            while True:
                try:
                    if b"READY=1" in sock.recv(4096):
                        self.ready_seconds = time.perf_counter() - start
                        return
                except socket.timeout:
                    pass
                if all(mounted(m) for _, m in self.pairs):
                    self.ready_seconds = time.perf_counter() - start
                    return
                if self.proc.poll() is not None:
                    raise RuntimeError(f"squashd serve exited with {self.proc.returncode}: {self.log_tail()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"squashd serve not ready within {self.timeout:.0f} s: {self.log_tail()}")
        finally:
            sock.close()

    def log_tail(self):
        try:
            with open(os.path.join(self.dir, "serve.log")) as f:
                return f.read()[-400:].strip()
        except OSError:
            return ""

    def rss(self):
        """RSS of the daemon and of any process it started (none expected)."""
        if not self.proc:
            return 0
        return sum(rss_bytes(p) for p in [self.proc.pid, *_descendants(self.proc.pid)])

    def processes(self):
        return 1 + len(_descendants(self.proc.pid)) if self.proc else 0

    def blob_mounts(self):
        """Mounts under the daemon's directory (its blob file system, kernel path)."""
        with open("/proc/mounts") as f:
            return [line.split()[1] for line in f if len(line.split()) > 1 and line.split()[1].startswith(self.dir)]

    def engines(self):
        """How many images each engine serves, per `squashd status --json`."""
        status = squashd_status(self.binary, self.socket) or {}
        out = {}
        for i in status.get("images", []):
            out[i.get("engine") or "?"] = out.get(i.get("engine") or "?", 0) + 1
        return out

    def counters(self):
        """Totals over every image from `squashd status --json`: requests served, decompressions,
        bytes read, and the shared cache's hit ratios."""
        status = squashd_status(self.binary, self.socket)
        if status is None:
            return None
        images = status.get("images", [])
        shared = status.get("shared_cache", {})
        return {
            "images": len(images),
            "requests": sum(i.get("requests", 0) for i in images),
            "metadata_loads": sum(i["cache"]["metadata"]["loads"] for i in images),
            "data_loads": sum(i["cache"]["data"]["loads"] for i in images),
            "bytes_read": sum(i["bytes_read"] for i in images),
            "metadata_hit_ratio": shared.get("metadata", {}).get("hit_ratio"),
            "data_hit_ratio": shared.get("data", {}).get("hit_ratio"),
            "budget_bytes": sum(shared.get(t, {}).get("capacity_bytes", 0) for t in ("metadata", "data", "compressed")),
        }

    def stop(self):
        """SIGTERM (serve detaches everything), then make sure nothing is left."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            _live_procs.pop(self.proc.pid, None)
        for _, mnt in self.pairs:
            if mounted(mnt):
                log(f"WARNING: {mnt} still mounted after squashd serve stopped")
                _leftover_notes.append(f"{mnt} still mounted after squashd serve stopped")
                self.unmounter.unmount(mnt)
            _live_mounts.discard((self.unmounter, mnt))
        for m in self.blob_mounts():
            log(f"WARNING: {m} still mounted after squashd serve stopped")
            _leftover_notes.append(f"{m} still mounted after squashd serve stopped")
            _FuseUnmounter.unmount(m)
        # Its config, log and sockets: every run used to leave a directory of them behind.
        shutil.rmtree(self.dir, ignore_errors=True)


class _FuseUnmounterClass(System):
    fuse = True


_FuseUnmounter = _FuseUnmounterClass()


class _UmountUnmounterClass(System):
    fuse = False


_UmountUnmounter = _UmountUnmounterClass()


def _descendants(pid):
    """Pids of every process below `pid`."""
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def cleanup():
    """Unmounts everything this run mounted and stops the daemons it started."""
    for pid, proc in list(_live_procs.items()):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        _live_procs.pop(pid, None)
    for system, mnt in list(_live_mounts):
        if mounted(mnt):
            log(f"cleanup: unmounting {mnt}")
            system.unmount(mnt)
        _live_mounts.discard((system, mnt))


def leftovers():
    """Mounts and loop devices under bench/work still present (should be none)."""
    left = []
    with open("/proc/mounts") as f:
        for line in f:
            if WORK_DIR in line:
                left.append(line.split()[1])
    p = run(["losetup", "-a"], check=False)
    left += [line for line in p.stdout.splitlines() if WORK_DIR in line]
    return left + _leftover_notes
