#!/usr/bin/env python3
"""A/B of E7's (b), sequential cold reads of data's file verified and not: for every round and
every variant in turn, a fresh mount (E7's mount systems and options), drop_caches, fio's
sequential read (psync, 128 KiB, as E7), then the daemon's CPU for the read and the mount's
counters (verity, read-ahead, data cache). Prints each run, the medians, and the per-round
verified/plain ratio of each build and path, with the load average at start and end.

    sudo python3 bench/tools/seq_verity_probe.py RUNS VARIANT...

A VARIANT is BINARY:PATH:MODE, PATH fuse or kernel, MODE plain (verity=off) or verity (the
tree and root hash of bench/work/e7/trees.json, as E7 gives them); BINARY@K=V@K=V sets
variables in that variant's mount's environment. ENV=K=V,K=V adds variables
to every mount's environment. PERF=DIR records `perf record -g` of each daemon during its read
into DIR/ROUND-VARIANT.data."""
import json, os, statistics, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from benchlib import e7_verity  # noqa: E402
from benchlib.common import WORK_DIR, drop_caches  # noqa: E402
from benchlib.experiments import _fio  # noqa: E402
from benchlib.mounts import Squashd, pids_with_args, _cmdline_has  # noqa: E402


def cpu_seconds(pids):
    total = 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def disk_reads():
    """(read requests completed, sectors read) of the disk holding bench/work, from /sys/block."""
    dev = os.stat(WORK_DIR).st_dev
    name = os.path.basename(os.path.realpath(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"))
    stat = f"/sys/block/{name}/stat"
    if not os.path.exists(stat):
        stat = f"/sys/class/block/{name}/stat"
    fields = open(stat).read().split()
    return int(fields[0]), int(fields[2])


def system(binary, path, verified, entry):
    extra = e7_verity.verity_options(entry) if verified else "verity=off"
    if path == "kernel":
        return e7_verity._KernelPath(binary, extra, "seqprobe_kernel", "kernel")
    return Squashd(binary, options=extra, name="seqprobe_fuse")


def pick(counters):
    """The counters that say where a sequential read's work went."""
    c = counters or {}
    out = {}
    if c.get("verity"):
        v = c["verity"]
        out["verified_blocks"] = v.get("verified_blocks")
        out["hash_block_loads"] = v.get("hash_block_loads")
        for k in ("data_block_hashes", "hash_hints"):
            if k in v:
                out[k] = v[k]
    ra = c.get("read_ahead") or {}
    for k in ("loads", "used", "wasted", "busy_cuts"):
        if k in ra:
            out[f"ra_{k}"] = ra[k]
    data = (c.get("cache") or {}).get("data") or {}
    for k in ("hits", "misses", "loads", "waits"):
        if k in data:
            out[f"data_{k}"] = data[k]
    return out


def main():
    runs = int(sys.argv[1])
    variants = [tuple(v.rsplit(":", 2)) for v in sys.argv[2:]]
    data = json.load(open(os.path.join(WORK_DIR, "data.sqfs.json")))
    entry = json.load(open(os.path.join(WORK_DIR, "e7/trees.json")))[data["path"]]
    env = dict(kv.split("=", 1) for kv in os.environ.get("ENV", "").split(",") if kv)
    os.environ.update(env)
    perf_dir = os.environ.get("PERF")
    mnt = os.path.join(WORK_DIR, "mnt", "seqprobe")
    os.makedirs(mnt, exist_ok=True)
    results = {v: [] for v in variants}
    load_start = open("/proc/loadavg").read().split()[:3]
    for r in range(runs):
        for v in variants:
            binary, path, mode = v
            binary, *envs = binary.split("@")
            extra_env = dict(e.split("=", 1) for e in envs)
            saved = {k: os.environ.get(k) for k in extra_env}
            os.environ.update(extra_env)
            s = system(binary, path, mode == "verity", entry)
            with s.mounted_at(data["path"], mnt):
                for k, old in saved.items():
                    if old is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = old
                pids = [p for p in pids_with_args(os.path.basename(binary), "") if _cmdline_has(p, mnt)]
                drop_caches()
                load = os.getloadavg()[0]
                perf = None
                if perf_dir:
                    os.makedirs(perf_dir, exist_ok=True)
                    out = os.path.join(perf_dir, f"{r + 1}-{os.path.basename(binary)}-{path}-{mode}.data")
                    perf = subprocess.Popen(["perf", "record", "-g", *os.environ.get("PERF_EVENTS", "").split(), "-o", out, "-p", ",".join(map(str, pids))],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(0.5)
                cpu0 = cpu_seconds(pids)
                disk0 = disk_reads()
                res = _fio(os.path.join(mnt, data["file"]), data["file_bytes"], "read", "128k", 1)
                cpu = cpu_seconds(pids) - cpu0
                disk1 = disk_reads()
                if perf:
                    perf.send_signal(2)
                    perf.wait()
                counters = pick(s.counters(mnt))
            bw = res["bw_bytes"] / 2**20
            counters["disk_reads"] = disk1[0] - disk0[0]
            counters["disk_mib"] = (disk1[1] - disk0[1]) // 2048
            results[v].append({"bw": bw, "cpu": cpu, "load": load, **counters})
            print(f"run {r + 1}/{runs} {':'.join(v)}: {bw:5.0f} MiB/s, daemon CPU {cpu:.2f} s, load {load:.2f}, "
                  + " ".join(f"{k}={x}" for k, x in counters.items()), file=sys.stderr, flush=True)
    print("medians:")
    for v in variants:
        bws = [x["bw"] for x in results[v]]
        cpus = [x["cpu"] for x in results[v]]
        print(f"  {':'.join(v)}: {statistics.median(bws):.0f} MiB/s ({min(bws):.0f}-{max(bws):.0f}), "
              f"daemon CPU {statistics.median(cpus):.2f} s")
    for v in variants:
        binary, path, mode = v
        plain = (binary, path, "plain")
        if mode == "verity" and plain in results:
            ratios = [a["bw"] / b["bw"] for a, b in zip(results[v], results[plain])]
            print(f"  {binary} {path}: per-round verified/plain median {statistics.median(ratios):.2f}x "
                  f"({min(ratios):.2f}-{max(ratios):.2f}); medians' ratio "
                  f"{statistics.median(x['bw'] for x in results[v]) / statistics.median(x['bw'] for x in results[plain]):.2f}x")
    print("load average at start", load_start, "at end", open("/proc/loadavg").read().split()[:3])
    if os.environ.get("OUT"):
        with open(os.environ["OUT"], "w") as f:
            json.dump({"variants": [":".join(v) for v in variants],
                       "results": {":".join(v): results[v] for v in variants}}, f, indent=1)


if __name__ == "__main__":
    main()
