#!/usr/bin/env python3
"""A/B of E7's (c), cold walks of usr verified and not, on squashd's FUSE path: fresh mount,
drop_caches, N concurrent `find`; wall time and the daemon's CPU (utime + stime from /proc
before it is unmounted). Variants run interleaved, round by round; prints medians.

    sudo python3 bench/tools/walk_verity_probe.py RUNS N VARIANT...

A VARIANT is BINARY:MODE, MODE plain (verity=off) or verity (usr's tree and root hash from
bench/work/e7/trees.json, as E7 gives them). IMG=PATH walks another image of trees.json."""
import json, os, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from benchlib import e7_verity  # noqa: E402
from benchlib.common import WORK_DIR, drop_caches, pids_with_args  # noqa: E402


def daemon_of(mnt):
    """The pid of the squashd process serving `mnt` (its command line names the mount point)."""
    pids = pids_with_args("squashd", mnt)
    if not pids:
        raise RuntimeError(f"no squashd process serves {mnt}")
    return pids[0]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one(binary, mode, image, entry, n):
    mnt = tempfile.mkdtemp(prefix="walk-probe.")
    options = e7_verity.verity_options(entry) if mode == "verity" else "verity=off"
    subprocess.run([binary, "mount", image, mnt, "-o", options], check=True)
    try:
        pid = daemon_of(mnt)
        drop_caches()
        start = time.perf_counter()
        finds = [subprocess.Popen(["find", mnt, "-print"], stdout=subprocess.DEVNULL) for _ in range(n)]
        for p in finds:
            p.wait()
        seconds = time.perf_counter() - start
        cpu = cpu_seconds(pid)
    finally:
        subprocess.run(["umount", mnt], check=False)
        os.rmdir(mnt)
    return seconds, cpu


def main():
    runs, n = int(sys.argv[1]), int(sys.argv[2])
    variants = [tuple(v.rsplit(":", 1)) for v in sys.argv[3:]]
    image = os.environ.get("IMG", os.path.join(WORK_DIR, "usr.sqfs"))
    entry = json.load(open(os.path.join(WORK_DIR, "e7/trees.json")))[image]
    results = {v: [] for v in variants}
    for r in range(runs):
        for v in variants:
            results[v].append(one(*v, image, entry, n))
            print(f"run {r + 1}/{runs} {':'.join(v)}: {results[v][-1][0]:.3f} s, "
                  f"daemon CPU {results[v][-1][1]:.2f} s", file=sys.stderr)
    for v in variants:
        walls = [s for s, _ in results[v]]
        cpus = [c for _, c in results[v]]
        print(f"{':'.join(v)} N={n}: walk median {statistics.median(walls):.3f} s "
              f"({min(walls):.3f}-{max(walls):.3f}), daemon CPU median {statistics.median(cpus):.2f} s")
    print("load average", open("/proc/loadavg").read().split()[:3])


if __name__ == "__main__":
    main()
