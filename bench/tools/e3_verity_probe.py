#!/usr/bin/env python3
"""A/B of E7's (d), E3 with every image verified: one `squashd serve` for the 69 service images,
drop_caches, time until READY=1 and every root is listed, and the daemon's whole-life CPU
(getrusage of the child: start, attach, list, stop). Variants run interleaved, round by round;
prints medians.

    sudo python3 bench/tools/e3_verity_probe.py RUNS VARIANT...

A VARIANT is BINARY:PATH:MODE: PATH fuse or kernel, MODE plain (verity=off), verity (each
image's tree and root hash from bench/work/e7/trees.json, as E7 gives them) or verity-warm (the
same, with every tree read into the page cache after drop_caches: what the trees' reads cost), e.g.
`/tmp/base/squashd:fuse:verity target/release/squashd:fuse:verity`. The images and trees are
those `bench/run.py --only E7` made in bench/work. PREWARM_TREES=1 makes every verity variant
verity-warm."""
import json, os, resource, statistics, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from benchlib import e7_verity  # noqa: E402
from benchlib.common import WORK_DIR, drop_caches  # noqa: E402
from benchlib.mounts import ServeDaemon, _live_mounts, mounted  # noqa: E402


def one(binary, path, verified, images, entries):
    pairs = [(img, os.path.join(WORK_DIR, "mnt", f"e3probe/{i:02d}")) for i, img in enumerate(images)]
    for _, m in pairs:
        os.makedirs(m, exist_ok=True)
    prefix = "kernel," if path == "kernel" else ""
    options = {img: prefix + (e7_verity.verity_options(entries[img]) if verified else "verity=off")
               for img in images}
    daemon = ServeDaemon(binary, pairs, options=options)
    drop_caches()
    if verified == "warm" or (verified and os.environ.get("PREWARM_TREES") == "1"):
        for img in images:
            with open(entries[img]["tree"], "rb") as f:
                f.read()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        daemon.start()
        for _, m in pairs:
            if not os.listdir(m):
                raise RuntimeError(f"{m}: the root lists empty")
        seconds = time.perf_counter() - start
    finally:
        daemon.stop()
        for _, m in pairs:
            if mounted(m):
                daemon.unmounter.unmount(m)
            _live_mounts.discard((daemon.unmounter, m))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds, cpu


def main():
    runs = int(sys.argv[1])
    variants = [tuple(v.rsplit(":", 2)) for v in sys.argv[2:]]
    images = json.load(open(os.path.join(WORK_DIR, "services/index.json")))["images"]
    entries = json.load(open(os.path.join(WORK_DIR, "e7/trees.json")))
    results = {v: [] for v in variants}
    for r in range(runs):
        for v in variants:
            binary, path, mode = v
            verified = {"plain": False, "verity": True, "verity-warm": "warm"}[mode]
            results[v].append(one(binary, path, verified, images, entries))
            print(f"run {r + 1}/{runs} {':'.join(v)}: {results[v][-1][0] * 1000:.1f} ms, "
                  f"CPU {results[v][-1][1] * 1000:.1f} ms", file=sys.stderr)
    for v in variants:
        walls = [s for s, _ in results[v]]
        cpus = [c for _, c in results[v]]
        print(f"{':'.join(v)}: ready+listed median {statistics.median(walls) * 1000:.1f} ms "
              f"({min(walls) * 1000:.1f}-{max(walls) * 1000:.1f}), daemon CPU median "
              f"{statistics.median(cpus) * 1000:.1f} ms")
    print("load average", open("/proc/loadavg").read().split()[:3])


if __name__ == "__main__":
    main()
