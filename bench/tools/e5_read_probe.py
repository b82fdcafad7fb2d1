#!/usr/bin/env python3
"""A quick probe of squashd's remote path (issue 16), for A/B comparisons of builds: the data
image's 1 GiB file read sequentially through a FUSE mount of the local file and of the same file
over HTTP behind bench/tools/delay_proxy.py (20 ms of round trip), in turn, after drop_caches;
also the time from `squashd mount URL` to the first listing of the mount.

    sudo python3 bench/tools/e5_read_probe.py SQUASHD [RUNS] [EXTRA_OPTIONS]

It needs the full suite's images served by E5 (bench/work/e5/served/data.sqfs: run
`sudo python3 bench/run.py --only E5` once). EXTRA_OPTIONS go to the remote mount only (e.g.
`fetch_unit=4MiB`). Prints each run and the medians; the full E5 (bench/run.py) is the reference.
"""
import json
import os
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH)
from benchlib.e5_servers import DelayProxy, Nginx  # noqa: E402

SERVED = os.path.join(BENCH, "work", "e5", "served")
MNT = os.path.join(BENCH, "work", "mnt", "e5-probe")


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def mount(squashd, source, sock, extra):
    opts = f"fuse,control={sock}" + (f",{extra}" if extra else "")
    start = time.monotonic()
    subprocess.run([squashd, "mount", source, MNT, "-o", opts], check=True)
    os.listdir(MNT)
    return time.monotonic() - start


def read_file(path):
    """MiB/s over the whole file and over its second half (once read-ahead has grown)."""
    start = time.monotonic()
    half = None
    total = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            chunk = f.read(128 << 10)
            if not chunk:
                break
            total += len(chunk)
            if half is None and total >= 512 << 20:
                half = time.monotonic()
    end = time.monotonic()
    return total / (end - start) / 2**20, (total - (512 << 20)) / (end - half) / 2**20


def remote_counters(squashd, sock):
    out = subprocess.run([squashd, "status", "--socket", sock, "--json"], capture_output=True,
                         text=True, check=True).stdout
    remote = json.loads(out)["images"][0].get("remote") or {}
    return {k: remote.get(k) for k in ("requests", "bytes_fetched", "units_fetched", "units_prefetched")}


def main():
    squashd = os.path.abspath(sys.argv[1])
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    extra = sys.argv[3] if len(sys.argv) > 3 else ""
    os.makedirs(MNT, exist_ok=True)
    median = lambda xs: sorted(xs)[len(xs) // 2]
    second_half = {"local": [], "remote": []}
    mounts = []
    with Nginx(SERVED) as nginx, DelayProxy(nginx.port, 20, 3600) as proxy:
        for run in range(runs):
            for kind, source in (("local", os.path.join(SERVED, "data.sqfs")), ("remote", proxy.url("data.sqfs"))):
                sock = MNT + f".{kind}.sock"
                seconds = mount(squashd, source, sock, extra if kind == "remote" else "")
                drop_caches()
                whole, second = read_file(os.path.join(MNT, "blob"))
                counters = remote_counters(squashd, sock) if kind == "remote" else {}
                subprocess.run(["umount", MNT], check=True)
                time.sleep(0.3)
                second_half[kind].append(second)
                if kind == "remote":
                    mounts.append(seconds)
                print(f"run {run} {kind:6} mount {seconds:.3f} s  {whole:.0f} MiB/s, second half {second:.0f} MiB/s  {counters}",
                      flush=True)
    local, remote = median(second_half["local"]), median(second_half["remote"])
    print(f"medians: second half local {local:.0f} MiB/s, remote {remote:.0f} MiB/s ({remote / local:.2f}x); "
          f"mount to first listing {median(mounts):.3f} s ({median(mounts) / 0.02:.1f} round trips)")


if __name__ == "__main__":
    main()
