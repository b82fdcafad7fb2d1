#!/usr/bin/env python3
"""The round-trip cost of each FUSE transport (issue 27): a storm of lstat() calls on cold entries.

Each run: drop_caches, a fresh `squashd mount -f IMAGE MNT -o fuse,uring=MODE,control=SOCK` (so the
kernel has no dentry of it), then P worker processes call os.lstat() on every path of the image (the
list comes from `unsquashfs -l`, worker i takes every P-th path), all released at once. Every path
is looked up once (entry and attribute timeouts are infinite, so a LOOKUP answers both and nothing
is asked twice): about one FUSE request per entry. Printed per run and as medians over the runs:
wall time of the storm, the daemon's requests (`squashd status --json`: all requests, and those
that came over the ring), requests per second, and the daemon's CPU (utime+stime from /proc) per
request. The modes alternate (off, on, off, on, ...) so that a change of load hits both.

    sudo python3 bench/tools/stat_storm.py [RUNS] [P ...]     e.g.  stat_storm.py 5 1 2

IMAGE=... (default bench/work/usr-quick.sqfs of the main checkout), SQUASHD=... (default this
worktree's release build), MODES="off on" (a mode may name another build: "on@/tmp/old-squashd",
to compare two builds in the same interleaved run). enable_uring is set to 1 for the run and to
N after (also on failure or Ctrl-C)."""
import json, os, signal, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SQUASHD = os.environ.get("SQUASHD", os.path.join(REPO, "target", "release", "squashd"))
IMAGE = os.environ.get("IMAGE", "/work/main/bench/work/usr-quick.sqfs")
MODES = os.environ.get("MODES", "off on").split()
PARAM = "/sys/module/fuse/parameters/enable_uring"
TCK = os.sysconf("SC_CLK_TCK")

WORKER = r"""
import os, sys
root, listing = sys.argv[1], sys.argv[2]
paths = [os.path.join(root, p) for p in open(listing).read().split("\0") if p]
sys.stdout.write("r"); sys.stdout.flush()
sys.stdin.read(1)
for p in paths:
    os.lstat(p)
"""


def image_paths(image):
    """Every path in the image, relative to its root, parents before children."""
    out = subprocess.run(["unsquashfs", "-d", "", "-l", image], capture_output=True, text=True, check=True).stdout
    return [line[1:] for line in out.splitlines() if line.startswith("/") and len(line) > 1]


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)


def status(binary, sock):
    out = subprocess.run([binary, "status", "--socket", sock, "--json"], capture_output=True, text=True, check=True)
    image = json.loads(out.stdout)["images"][0]
    return image["transport"], image["requests"], image.get("ring_requests", 0)


def one_run(work, variant, listings):
    mode, _, binary = variant.partition("@")
    binary = binary or SQUASHD
    mnt, sock = os.path.join(work, "mnt"), os.path.join(work, "ctl.sock")
    os.makedirs(mnt, exist_ok=True)
    subprocess.run("sync; echo 3 > /proc/sys/vm/drop_caches", shell=True, check=True)
    daemon = subprocess.Popen([binary, "mount", "-f", IMAGE, mnt, "-o", f"fuse,uring={mode},control={sock}"],
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if os.path.ismount(mnt) and os.path.exists(sock):
                break
            time.sleep(0.05)
        else:
            raise SystemExit(f"{mnt}: not mounted after 10 s")
        _, req0, ring0 = status(binary, sock)
        workers = [subprocess.Popen([sys.executable, "-c", WORKER, mnt, listing], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE) for listing in listings]
        for w in workers:
            w.stdout.read(1)
        load = os.getloadavg()[0]
        cpu0 = cpu_ticks(daemon.pid)
        start = time.perf_counter()
        for w in workers:
            w.stdin.write(b"g")
            w.stdin.close()
        for w in workers:
            if w.wait() != 0:
                raise SystemExit("a worker failed")
        wall = time.perf_counter() - start
        cpu = (cpu_ticks(daemon.pid) - cpu0) / TCK
        transport, req1, ring1 = status(binary, sock)
    finally:
        subprocess.run(["umount", mnt], check=False)
        daemon.wait()
    requests = req1 - req0
    return dict(mode=variant, transport=transport, wall=wall, requests=requests, ring=ring1 - ring0,
                rps=requests / wall, cpu=cpu, us_per_req=1e6 * cpu / max(requests, 1), load=load)


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    procs = [int(p) for p in sys.argv[2:]] or [1, 2]
    with open(PARAM) as f:
        before = f.read().strip()
    restore = lambda *_: open(PARAM, "w").write("N")  # noqa: E731
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        with open(PARAM, "w") as f:
            f.write("1")
        paths = image_paths(IMAGE)
        print(f"image {IMAGE}: {len(paths)} paths; squashd {SQUASHD}; enable_uring was {before}, set to 1")
        with tempfile.TemporaryDirectory(prefix="stat-storm-") as work:
            for p in procs:
                listings = []
                for i in range(p):
                    listing = os.path.join(work, f"paths-{p}-{i}")
                    with open(listing, "w") as f:
                        f.write("\0".join(paths[i::p]))
                    listings.append(listing)
                results = []
                for run in range(runs):
                    for mode in (MODES if run % 2 == 0 else MODES[::-1]):
                        r = one_run(work, mode, listings)
                        results.append(r)
                        print(f"P={p} run={run} uring={mode} {r['transport']:8s} wall {r['wall']:.3f} s"
                              f"  requests {r['requests']} (ring {r['ring']})  {r['rps']:,.0f} req/s"
                              f"  daemon CPU {r['cpu']:.2f} s = {r['us_per_req']:.1f} us/req  load {r['load']:.1f}",
                              flush=True)
                for mode in MODES:
                    rs = [r for r in results if r["mode"] == mode]
                    med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
                    print(f"MEDIAN P={p} uring={mode} ({len(rs)} runs): wall {med('wall'):.3f} s"
                          f" ({min(r['wall'] for r in rs):.3f}-{max(r['wall'] for r in rs):.3f})"
                          f"  requests {med('requests'):.0f}  {med('rps'):,.0f} req/s"
                          f"  daemon CPU {med('cpu'):.2f} s = {med('us_per_req'):.1f} us/req"
                          f"  load {med('load'):.1f}", flush=True)
    finally:
        restore()
        print("enable_uring set back to N")


if __name__ == "__main__":
    main()
