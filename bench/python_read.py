#!/usr/bin/env python3
"""Python readers of SquashFS side by side, in one run (issue 28's performance targets).

1. Every regular file of a Python-environment image read from one thread, the page cache dropped
   before each run: the squashd package (``read_bytes``, and ``open().read()``), PySquashfsImage,
   dissect.squashfs, squashfsspec (one run: it is slow), and Python's ``open().read()`` through a
   ``squashfuse_ll`` mount and through the kernel's squashfs mount. Each run is a fresh process.
2. One large file read in 1 MiB reads by one thread and by two (each its half), image in the page
   cache, squashd's caches cold (a fresh process): with read-ahead off (each read decompressed by
   the thread that asks, so two threads must scale) and on (the default: one thread already
   decompresses on every core).

Run as root (it drops the page cache and mounts), with a Python that has the squashd package and
the peers installed; ``--setup`` makes such a venv at target/bench-venv:

    sudo python3 bench/python_read.py --setup
    sudo target/bench-venv/bin/python bench/python_read.py [--runs 3] [--out FILE.md]

The environment image is ``pip install --target`` of ``--packages`` (default numpy pandas scipy
sympy) packed with ``mksquashfs -comp zstd``; the large file is the environment's shared libraries
concatenated to 256 MiB (``-comp zstd -b 128K``). Both are built in bench/work/python/ and reused.

It writes ``--out`` (default bench/results/DATE-python.md) and prints it: the tables, then a
verdict on each target, which says whether the machine was quiet enough for the figures to stand
(the capacity probe at least 1.8x and no 1-minute load above 0.75 per core). Measuring takes about
3 minutes on two cores (``--no-squashfsspec``: 1 minute less); the first run also downloads the
environment and builds the images (a few minutes; 20 on a machine loaded 12 on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / "bench" / "work" / "python"
VENV = REPO / "target" / "bench-venv"
PEERS = ["PySquashfsImage==0.9.0", "zstandard", "dissect.squashfs==1.12", "backports.zstd", "squashfsspec==0.1.6", "fsspec"]
BIG_LEN = 256 << 20
MIB = 1 << 20


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def drop_caches():
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def load():
    return os.getloadavg()[0]


# ---------------------------------------------------------------- readers (each in a child)


def regular_files_os(root):
    stack = [root]
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                elif e.is_file(follow_symlinks=False):
                    yield e.path


def read_squashd(image_path, how, read_ahead=None):
    import squashd

    total = files = 0
    with squashd.open(image_path, read_ahead=read_ahead) as image:
        stack = ["/"]
        while stack:
            for e in image.scandir(stack.pop()):
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                elif e.is_file(follow_symlinks=False):
                    if how == "read_bytes":
                        data = image.read_bytes(e.path)
                    else:
                        with image.open(e.path) as f:
                            data = f.read()
                    total += len(data)
                    files += 1
    return files, total


def read_pysquashfsimage(image_path):
    from PySquashfsImage import SquashFsImage

    total = files = 0
    with SquashFsImage.from_file(image_path) as image:
        for item in image:
            if item.is_file:
                total += len(item.read_bytes())
                files += 1
    return files, total


def read_dissect(image_path):
    from dissect.squashfs import SquashFS

    total = files = 0
    with open(image_path, "rb") as fh:
        fs = SquashFS(fh)
        stack = [fs.get("/")]
        while stack:
            for inode in stack.pop().iterdir():
                if inode.is_dir():
                    stack.append(inode)
                elif inode.is_file():
                    total += len(inode.open().read())
                    files += 1
    return files, total


def read_squashfsspec(image_path):
    from squashfsspec import SquashFSFileSystem

    fs = SquashFSFileSystem(fo=image_path)
    total = files = 0
    for root, _dirs, names in fs.walk("/"):
        for name in names:
            path = f"{root.rstrip('/')}/{name}"
            if fs.info(path)["type"] != "file":
                continue
            with fs.open(path, "rb") as f:
                total += len(f.read())
            files += 1
    return files, total


def read_mount(mountpoint):
    total = files = 0
    for path in regular_files_os(mountpoint):
        with open(path, "rb") as f:
            total += len(f.read())
        files += 1
    return files, total


def read_large(image_path, threads, read_ahead):
    import squashd

    image = squashd.open(image_path, read_ahead=read_ahead)
    size = image.stat("data").st_size
    barrier = threading.Barrier(threads + 1)
    got = [0] * threads

    def reader(i):
        start, end = i * size // threads, (i + 1) * size // threads
        with image.open("data", buffering=0) as f:
            f.seek(start)
            barrier.wait()
            while start < end:
                n = len(f.read(min(MIB, end - start)))
                if n == 0:
                    break
                got[i] += n
                start += n

    workers = [threading.Thread(target=reader, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    barrier.wait()
    t = time.perf_counter()
    for w in workers:
        w.join()
    return time.perf_counter() - t, sum(got)


def cpu_seconds():
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child(args):
    """One measurement, in this (fresh) process; prints JSON."""
    kind, target = args.child, args.target
    t = time.perf_counter()
    cpu = cpu_seconds()
    if kind == "large":
        seconds, total = read_large(target, args.threads, args.read_ahead)
        print(json.dumps({"seconds": seconds, "bytes": total}))
        return
    if kind == "squashd":
        files, total = read_squashd(target, "read_bytes")
    elif kind == "squashd-no-read-ahead":
        files, total = read_squashd(target, "read_bytes", read_ahead=0)
    elif kind == "squashd-open":
        files, total = read_squashd(target, "open")
    elif kind == "PySquashfsImage":
        files, total = read_pysquashfsimage(target)
    elif kind == "dissect.squashfs":
        files, total = read_dissect(target)
    elif kind == "squashfsspec":
        files, total = read_squashfsspec(target)
    else:
        files, total = read_mount(target)
    print(json.dumps({"seconds": time.perf_counter() - t, "cpu": cpu_seconds() - cpu, "files": files,
                      "bytes": total}))


# ---------------------------------------------------------------- images


def build_env(packages):
    env = WORK / "env"
    stamp = WORK / "env-tree.json"
    want = {"packages": packages, "python": sys.version.split()[0]}
    if env.exists() and stamp.exists() and json.loads(stamp.read_text()).get("recipe") == want:
        return env
    shutil.rmtree(env, ignore_errors=True)
    run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(env), *packages])
    versions = sorted(p.name for p in env.glob("*.dist-info"))
    stamp.write_text(json.dumps({"recipe": want, "installed": versions}, indent=1))
    return env


def build_image(src, image, options):
    stamp = image.with_suffix(".json")
    recipe = {"src": str(src), "options": options, "src_mtime": src.stat().st_mtime}
    if image.exists() and stamp.exists() and json.loads(stamp.read_text()) == recipe:
        return image
    run(["mksquashfs", str(src), str(image), "-noappend", "-quiet", "-no-progress", *options],
        stdout=subprocess.DEVNULL)
    stamp.write_text(json.dumps(recipe))
    return image


def build_large(env):
    """One file of the environment's shared libraries concatenated (again and again) to
    BIG_LEN bytes: real machine code, compressing as such does."""
    src = WORK / "large-src"
    data = src / "data"
    if not (data.exists() and data.stat().st_size == BIG_LEN):
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir(parents=True)
        libs = sorted(p for p in env.rglob("*.so*") if p.is_file())
        with open(data, "wb") as out:
            written = 0
            while written < BIG_LEN:
                for lib in libs:
                    chunk = lib.read_bytes()[: BIG_LEN - written]
                    out.write(chunk)
                    written += len(chunk)
                    if written >= BIG_LEN:
                        break
    return build_image(src, WORK / "large.sqfs", ["-comp", "zstd", "-b", "128K"])


# ---------------------------------------------------------------- measuring


def measure(kind, target, **extra):
    cmd = [sys.executable, __file__, "--child", kind, "--target", str(target)]
    for k, v in extra.items():
        cmd += [f"--{k.replace('_', '-')}", str(v)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{kind}: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


class Mount:
    def __init__(self, cmd, mountpoint):
        self.cmd, self.mountpoint = cmd, mountpoint

    def __enter__(self):
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        run(self.cmd + [str(self.mountpoint)])
        return self.mountpoint

    def __exit__(self, *exc):
        for _ in range(50):
            if subprocess.run(["umount", str(self.mountpoint)], capture_output=True).returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError(f"cannot unmount {self.mountpoint}")


def whole_image_runs(image, runs, with_squashfsspec):
    readers = ["squashd", "squashd-open", "squashd-no-read-ahead", "PySquashfsImage", "dissect.squashfs", "squashfuse_ll", "kernel"]
    results = {r: [] for r in readers}
    for round_ in range(runs):
        for reader in readers:
            if reader == "squashfuse_ll":
                mount = Mount(["squashfuse_ll", str(image)], WORK / "mnt-squashfuse")
            elif reader == "kernel":
                mount = Mount(["mount", "-t", "squashfs", "-o", "loop,ro", str(image)], WORK / "mnt-kernel")
            else:
                mount = None
            if mount:
                with mount as mnt:
                    drop_caches()
                    r = measure("mount", mnt)
            else:
                drop_caches()
                r = measure(reader, image)
            r["load"] = load()
            results[reader].append(r)
            print(f"  run {round_ + 1} {reader:22} {r['seconds']:7.3f} s cpu {r['cpu']:6.3f} s "
                  f"{r['files']} files "
                  f"{r['bytes'] / 1e6:.1f} MB  load {r['load']:.2f}", flush=True)
    if with_squashfsspec:
        drop_caches()
        r = measure("squashfsspec", image)
        r["load"] = load()
        results["squashfsspec"] = [r]
        print(f"  run 1 squashfsspec       {r['seconds']:7.3f} s  load {r['load']:.2f}", flush=True)
    return results


def large_runs(image, runs):
    run(["cat", str(image)], stdout=subprocess.DEVNULL)  # the image in the page cache
    configs = [(1, 0), (2, 0), (1, -1), (2, -1)]
    results = {c: [] for c in configs}
    results["capacity"] = []
    for round_ in range(runs):
        cap = parallel_capacity()
        results["capacity"].append(cap)
        print(f"  run {round_ + 1} capacity probe: sha256 1 thread {cap[1]:.3f} s, 2 threads {cap[2]:.3f} s",
              flush=True)
        for threads, read_ahead in configs:
            extra = {"threads": threads}
            if read_ahead >= 0:
                extra["read_ahead"] = read_ahead
            r = measure("large", image, **extra)
            r["load"] = load()
            results[(threads, read_ahead)].append(r)
            ra = "off" if read_ahead == 0 else "default"
            print(f"  run {round_ + 1} threads {threads} read-ahead {ra:7} {r['seconds']:7.3f} s "
                  f"{r['bytes'] / r['seconds'] / 1e6:7.0f} MB/s  load {r['load']:.2f}", flush=True)
    return results


def parallel_capacity():
    """What two threads get on this machine now, measured with something known to scale:
    hashlib's sha256 of 64 MiB buffers (it releases the GIL), 4 per thread. On two free cores two
    threads take as long as one; on a machine whose cores are taken by others they take twice as
    long, and no reader can show two-thread scaling then."""
    import hashlib

    data = b"\0" * (64 << 20)
    out = {}
    for n in (1, 2):
        threads = [threading.Thread(target=lambda: [hashlib.sha256(data).digest() for _ in range(4)])
                   for _ in range(n)]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        out[n] = time.perf_counter() - t
    return out


def med(rs):
    return statistics.median(r["seconds"] for r in rs)


def span(rs):
    s = [r["seconds"] for r in rs]
    return f"{min(s):.2f}–{max(s):.2f}"


def report(args, env, image, large, whole, big, versions, started):
    lines = []
    w = lines.append
    w("# Python readers of SquashFS (issue 28)\n")
    w(f"Run {started}, {os.uname().nodename}: {os.cpu_count()} cores, kernel {os.uname().release}, "
      f"Python {sys.version.split()[0]}. Command: `{' '.join(['python3'] + sys.argv)}`. Medians of "
      f"{args.runs} runs, interleaved; each run a fresh process, the page cache dropped before it. "
      "The 1-minute load average at the end of each run is beside its figure (the verdict below says "
      "whether the machine was quiet enough to judge).\n")
    w(f"Image: `pip install --target` of {' '.join(args.packages)} ({versions}), "
      f"`mksquashfs ENV env.sqfs -comp zstd`: {whole['squashd'][0]['files']} regular files, "
      f"{whole['squashd'][0]['bytes'] / 1e6:.0f} MB of data, a {image.stat().st_size / 1e6:.0f} MB image.\n")
    w("## Every regular file, one thread, caches dropped\n")
    w("| reader | median s | min–max s | CPU s (this process) | loads | vs fastest pure-Python peer | vs squashfuse_ll |")
    w("|---|---|---|---|---|---|---|")
    peers = [r for r in ("PySquashfsImage", "dissect.squashfs", "squashfsspec") if r in whole]
    fastest_peer = min(med(whole[r]) for r in peers)
    fuse = med(whole["squashfuse_ll"])
    names = {
        "squashd": "squashd package, `image.read_bytes(path)`",
        "squashd-open": "squashd package, `image.open(path).read()`",
        "squashd-no-read-ahead": "squashd package, `read_bytes`, `read_ahead=0`",
        "PySquashfsImage": "PySquashfsImage 0.9.0 (`item.read_bytes()`)",
        "dissect.squashfs": "dissect.squashfs 1.12 (`inode.open().read()`)",
        "squashfsspec": "squashfsspec 0.1.6 (`fs.open(path).read()`), one run",
        "squashfuse_ll": "Python `open().read()` through a squashfuse_ll mount",
        "kernel": "Python `open().read()` through the kernel's squashfs mount",
    }
    for reader, rs in whole.items():
        loads = " ".join(f"{r['load']:.1f}" for r in rs)
        cpu = statistics.median(r["cpu"] for r in rs)
        w(f"| {names[reader]} | {med(rs):.3f} | {span(rs)} | {cpu:.2f} | {loads} | {med(rs) / fastest_peer:.2f}x | "
          f"{med(rs) / fuse:.2f}x |")
    sq = med(whole["squashd"])
    w(f"\nTargets: squashd at most 0.5x the fastest pure-Python peer: **{sq / fastest_peer:.2f}x**; "
      f"at most 0.25x Python through squashfuse_ll: **{sq / fuse:.2f}x**.\n")
    counts = {(r["files"], r["bytes"]) for rs in whole.values() for r in rs}
    w(f"Every reader read the same files and bytes: {'yes' if len(counts) == 1 else counts}.\n")
    w(f"## One large file, 1 MiB reads: two threads against one\n")
    w(f"`data`, {BIG_LEN >> 20} MiB of the environment's shared libraries concatenated, "
      f"`-comp zstd -b 128K` ({large.stat().st_size / 1e6:.0f} MB image); the image in the page cache, "
      "squashd's caches cold; each thread reads its half.\n")
    w("| read-ahead | threads | median s | min–max s | MB/s | loads | speed-up |")
    w("|---|---|---|---|---|---|---|")
    for ra in (0, -1):
        one = med(big[(1, ra)])
        for threads in (1, 2):
            rs = big[(threads, ra)]
            loads = " ".join(f"{r['load']:.1f}" for r in rs)
            label = "off (`read_ahead=0`)" if ra == 0 else "default (one thread per core)"
            w(f"| {label} | {threads} | {med(rs):.3f} | {span(rs)} | {BIG_LEN / med(rs) / 1e6:.0f} | "
              f"{loads} | {one / med(rs):.2f}x |")
    caps = big["capacity"]
    c1 = statistics.median(c[1] for c in caps)
    c2 = statistics.median(c[2] for c in caps)
    w(f"| capacity probe: hashlib sha256 (releases the GIL), 4 × 64 MiB per thread | 1 → 2 | "
      f"{c1:.3f} → {c2:.3f} | | | | {2 * c1 / c2:.2f}x |")
    w("\nThe probe's speed-up is what two threads could get on this machine during the run "
      "(2.00x on two free cores).\n")
    w(verdict(whole, big, fastest_peer, fuse, 2 * c1 / c2))
    w(f"\nThe run took {time.monotonic() - args.clock:.0f} s.\n")
    return "\n".join(lines)


#: A probe speed-up below this, or a 1-minute load above this per core, makes a run "loaded".
QUIET_PROBE = 1.8
QUIET_LOAD_PER_CORE = 0.75


def verdict(whole, big, fastest_peer, fuse, probe):
    """The targets, each met or not, and whether the machine was quiet enough to say."""
    cores = os.cpu_count() or 1
    loads = [r["load"] for rs in list(whole.values()) + [v for k, v in big.items() if k != "capacity"] for r in rs]
    quiet = probe >= QUIET_PROBE and max(loads) <= QUIET_LOAD_PER_CORE * cores
    sq = med(whole["squashd"])
    two = med(big[(1, 0)]) / med(big[(2, 0)])
    targets = [
        ("whole image, one thread, against the fastest pure-Python peer", sq / fastest_peer, "at most", 0.5),
        ("whole image, one thread, against Python through squashfuse_ll", sq / fuse, "at most", 0.25),
        ("one large file, two threads against one (read-ahead off)", two, "at least", 1.6),
    ]
    out = ["## Verdict\n", "| target | this run | goal | met |", "|---|---|---|---|"]
    for what, got, how, goal in targets:
        met = got <= goal if how == "at most" else got >= goal
        out.append(f"| {what} | {got:.2f}x | {how} {goal}x | {'yes' if met else 'no'} |")
    if quiet:
        out.append(f"\nThe machine was quiet (probe {probe:.2f}x, highest 1-minute load {max(loads):.2f} "
                   f"on {cores} cores): these figures stand.")
    else:
        out.append(f"\n**The machine was loaded** (probe {probe:.2f}x, below {QUIET_PROBE}x, or a 1-minute "
                   f"load up to {max(loads):.2f} on {cores} cores, above {QUIET_LOAD_PER_CORE} per core): "
                   "a target not met here is inconclusive, not failed; run again on a quiet machine.")
    return "\n".join(out)


def setup():
    if not VENV.exists():
        run([sys.executable, "-m", "venv", str(VENV)])
    # `python -m pip`: a venv copied from another checkout has bin/pip naming that one's Python.
    pip = [str(VENV / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    run(pip + PEERS)
    run(pip + ["--force-reinstall", "--no-deps", str(REPO / "python")])
    print(f"ready: sudo {VENV / 'bin' / 'python'} bench/python_read.py")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--setup", action="store_true", help="make target/bench-venv with the package and the peers")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--packages", nargs="+", default=["numpy", "pandas", "scipy", "sympy"])
    p.add_argument("--no-squashfsspec", action="store_true", help="leave out squashfsspec (slow)")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / f"{time.strftime('%Y-%m-%d')}-python.md")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--target", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--read-ahead", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)
    if args.setup:
        return setup()
    if os.geteuid() != 0:
        sys.exit("python_read.py: run as root (it drops the page cache and mounts images)")
    started = time.strftime("%Y-%m-%d %H:%M")
    args.clock = time.monotonic()
    WORK.mkdir(parents=True, exist_ok=True)
    env = build_env(args.packages)
    versions = ", ".join(
        d.name.removesuffix(".dist-info") for d in sorted(env.glob("*.dist-info"))
        if d.name.split("-")[0].lower() in {p.lower() for p in args.packages}
    )
    image = build_image(env, WORK / "env.sqfs", ["-comp", "zstd"])
    large = build_large(env)
    print(f"whole image: {image}", flush=True)
    whole = whole_image_runs(image, args.runs, not args.no_squashfsspec)
    print(f"large file: {large}", flush=True)
    big = large_runs(large, args.runs)
    text = report(args, env, image, large, whole, big, versions, started)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
