#!/usr/bin/env python3
"""What one random 4 KiB read that misses the page cache costs, on several mounts of one image.

    sudo RUNS=5 N=2000 python3 bench/tools/ab_misses.py IMAGE FILE VARIANT...

VARIANT as in ab_reads.py (`kernel`, `squashfuse`, or `NAME=BIN[,OPTIONS][@ENV=VALUE...]`).
The image is read once first (its pages cached, as in E2 after the sequential reads). Then for
every run and every variant, in turn: a fresh mount, the file's pages dropped
(POSIX_FADV_DONTNEED), and one 4 KiB page read from each of N distinct random blocks of 128 KiB
(POSIX_FADV_RANDOM, as fio sets): every read is a block miss. Prints the wall time per miss,
the reader's CPU time and the serving daemon's (utime + stime from /proc) per miss, and the
medians. E2's random figure counts passes of fio's random map (each pass drops the file's
pages, then misses every block once); this is the cost of those misses, without the pass
granularity.
"""

import os
import random
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ab_reads import Variant, scratch_dir  # noqa: E402

BLOCK = 128 << 10


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def daemon_pids(mnt):
    out = subprocess.run(["pgrep", "-f", f" mount .* {mnt}( |$)"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def misses(path, n, seed, pids):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        rng = random.Random(seed)
        blocks = rng.sample(range(os.fstat(fd).st_size // BLOCK), n)
        offsets = [b * BLOCK + 4096 * rng.randrange(BLOCK // 4096) for b in blocks]
        d0, r0, t0 = sum(cpu_seconds(p) for p in pids), os.times(), time.perf_counter()
        for off in offsets:
            os.pread(fd, 4096, off)
        wall, r1 = time.perf_counter() - t0, os.times()
        # The block fills the last reads asked for end within milliseconds.
        time.sleep(0.5)
        daemon = sum(cpu_seconds(p) for p in pids) - d0
    finally:
        os.close(fd)
    reader = r1.user + r1.system - r0.user - r0.system
    return {"wall_us": wall * 1e6 / n, "reader_cpu_us": reader * 1e6 / n, "daemon_cpu_us": daemon * 1e6 / n}


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    image, name = sys.argv[1], sys.argv[2]
    variants = [Variant(v) for v in sys.argv[3:]]
    runs, n = int(os.environ.get("RUNS", "5")), int(os.environ.get("N", "2000"))
    with open(image, "rb") as f:
        while f.read(1 << 20):
            pass
    results = {v.name: [] for v in variants}
    with scratch_dir("ab-misses-", variants) as work:
        for r in range(runs):
            for v in variants:
                with v.mounted(image, work) as mnt:
                    row = misses(os.path.join(mnt, name), n, r, daemon_pids(mnt) if v.binary else [])
                row["load"] = os.getloadavg()[0]
                results[v.name].append(row)
                print(f"run {r + 1} {v.name:12s} load {row['load']:5.2f}  per miss: wall {row['wall_us']:5.0f} us, "
                      f"reader CPU {row['reader_cpu_us']:4.0f} us, daemon CPU {row['daemon_cpu_us']:4.0f} us", flush=True)
    print("medians per miss:")
    for v in variants:
        rows = results[v.name]
        med = {k: statistics.median(x[k] for x in rows) for k in ("wall_us", "reader_cpu_us", "daemon_cpu_us")}
        print(f"  {v.name:12s} wall {med['wall_us']:.0f} us, CPU {med['reader_cpu_us'] + med['daemon_cpu_us']:.0f} us "
              f"(reader {med['reader_cpu_us']:.0f}, daemon {med['daemon_cpu_us']:.0f})")


if __name__ == "__main__":
    main()
