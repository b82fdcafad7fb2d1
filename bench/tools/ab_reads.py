#!/usr/bin/env python3
"""E2-style reads of one file on several mounts of one image, alternating, for A/B work.

    sudo RUNS=3 python3 bench/tools/ab_reads.py IMAGE FILE VARIANT...

VARIANT is `kernel` (the kernel's squashfs, loop mount), `squashfuse`, or
`NAME=BIN[,OPTIONS][@ENV=VALUE@ENV=VALUE...]`: `BIN mount IMAGE MNT -o OPTIONS,control=SOCK`
(e.g. `fill=target/release/squashd,kernel@SQUASHD_WHOLE_BLOCKS=fill`). For every run and every
variant, in turn: a fresh mount, drop_caches, `fio --rw=read --bs=128k` (cold), again with
`--invalidate=1`, then `--rw=randread --bs=4k --time_based --runtime=RANDOM` (default 10 s;
fio drops the file's pages first); then the squashd mount's `status --json` counters and
the page cache held of the file and of the blob file system's files (cachestat). Prints each run and the medians,
with the load average beside them; `OUT=FILE` also writes the raw runs as JSON.
"""

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def drop_caches():
    sh(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def fio(path, size, rw, bs, invalidate, runtime=None):
    cmd = ["fio", "--name=ab", f"--filename={path}", "--readonly", f"--rw={rw}", f"--bs={bs}",
           "--ioengine=psync", "--iodepth=1", "--numjobs=1", f"--size={size}",
           f"--invalidate={invalidate}", "--output-format=json"]
    if runtime:
        cmd += ["--time_based", f"--runtime={runtime}"]
    out = sh(cmd).stdout
    job = json.loads(out[out.index("{"):])["jobs"][0]["read"]
    return job


def cpu_seconds(pid):
    """utime + stime of process `pid` (all its threads), in seconds; None without a pid."""
    if pid is None:
        return None
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fincore(path):
    """Bytes of `path` in the page cache: the suite's measure (cachestat(2); fincore(1) maps the
    file, and mapping the kernel path's direct-I/O blob drops its page cache first)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from benchlib.mounts import cached_bytes
    return cached_bytes(path)


def mount_source(mnt):
    with open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            if fields[1] == os.path.realpath(mnt):
                return fields[0]
    return None


class Variant:
    def __init__(self, spec):
        self.spec = spec
        self.env = {}
        if spec in ("kernel", "squashfuse"):
            self.name, self.binary, self.options = spec, None, None
            return
        self.name, rest = spec.split("=", 1)
        rest, *envs = rest.split("@")
        self.binary, _, self.options = rest.partition(",")
        for e in envs:
            k, v = e.split("=", 1)
            self.env[k] = v

    def mount(self, image, mnt):
        if self.name == "kernel":
            sh(["mount", "-t", "squashfs", "-o", "loop,ro", image, mnt])
        elif self.name == "squashfuse":
            sh(["squashfuse_ll", image, mnt])
        else:
            opts = f"control={mnt}.sock" + (f",{self.options}" if self.options else "")
            sh([self.binary, "mount", image, mnt, "-o", opts], env=dict(os.environ, **self.env))

    def counters(self, mnt):
        if not self.binary:
            return None
        p = subprocess.run([self.binary, "status", "--json", "--socket", f"{mnt}.sock"],
                           capture_output=True, text=True)
        try:
            return json.loads(p.stdout)["images"][0]
        except (ValueError, KeyError, IndexError):
            return None

    @contextlib.contextmanager
    def mounted(self, image, work):
        """The image freshly mounted on `work/NAME`, unmounted on the way out."""
        mnt = os.path.join(work, self.name)
        os.makedirs(mnt, exist_ok=True)
        self.mount(image, mnt)
        try:
            yield mnt
        finally:
            self.unmount(mnt)

    def daemon_pid(self, mnt):
        """The pid of the squashd mount serving `mnt`, or None (kernel, squashfuse)."""
        if not self.binary:
            return None
        p = subprocess.run(["pgrep", "-f", f"{self.binary} mount .* {mnt}"], capture_output=True, text=True)
        pids = p.stdout.split()
        return int(pids[0]) if pids else None

    def unmount(self, mnt):
        source = mount_source(mnt)
        sh(["umount", mnt])
        # A squashd mount's daemon exits once the kernel lets go of its blob.
        deadline = time.monotonic() + 10
        while self.binary and time.monotonic() < deadline:
            if subprocess.run(["pgrep", "-f", f"{self.binary} mount .* {mnt}"],
                              capture_output=True).returncode != 0:
                break
            time.sleep(0.02)
        return source


@contextlib.contextmanager
def scratch_dir(prefix, variants):
    """A scratch directory for the variants' mount points; on the way out, whatever is still
    mounted there is lazily unmounted and the directory removed."""
    work = tempfile.mkdtemp(prefix=prefix)
    try:
        yield work
    finally:
        for v in variants:
            mnt = os.path.join(work, v.name)
            if os.path.ismount(mnt):
                subprocess.run(["umount", "-l", mnt])
        subprocess.run(["rm", "-rf", work])


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    image, name = sys.argv[1], sys.argv[2]
    variants = [Variant(v) for v in sys.argv[3:]]
    runs = int(os.environ.get("RUNS", "3"))
    random_s = int(os.environ.get("RANDOM", "10"))
    skip_seq = os.environ.get("SEQ", "1") == "0"
    results = {v.name: [] for v in variants}
    with scratch_dir("ab-reads-", variants) as work:
        for r in range(runs):
            for v in variants:
                with v.mounted(image, work) as mnt:
                    f = os.path.join(mnt, name)
                    size = os.path.getsize(f)
                    drop_caches()
                    load = os.getloadavg()[0]
                    row = {"load": load}
                    if not skip_seq:
                        row["seq_cold"] = fio(f, size, "read", "128k", 1)["bw_bytes"] / 2**20
                        row["seq_inval"] = fio(f, size, "read", "128k", 1)["bw_bytes"] / 2**20
                    before = v.counters(mnt)
                    pid = v.daemon_pid(mnt)
                    cpu_before = cpu_seconds(pid)
                    row["rand_iops"] = fio(f, size, "randread", "4k", 1, random_s)["iops"]
                    if cpu_before is not None:
                        row["daemon_cpu_s"] = cpu_seconds(pid) - cpu_before
                    after = v.counters(mnt)
                    row["file_cached"] = fincore(f)
                    source = mount_source(mnt)
                    if source and source.startswith("/run/squashd"):
                        d = os.path.dirname(source)
                        row["blob_fs_cached"] = {n: fincore(os.path.join(d, n)) for n in os.listdir(d)}
                    if after:
                        row["requests_rand"] = after["requests"] - (before or after)["requests"]
                        row["data_loads_rand"] = (after["cache"]["data"]["loads"]
                                                  - (before or after)["cache"]["data"]["loads"])
                        row["counters"] = after
                        if row.get("daemon_cpu_s") is not None and row["requests_rand"]:
                            row["cpu_us_per_request"] = row["daemon_cpu_s"] * 1e6 / row["requests_rand"]
                results[v.name].append(row)
                seq = "" if skip_seq else f"seq cold {row['seq_cold']:7.0f} MiB/s  inval {row['seq_inval']:7.0f} MiB/s  "
                print(f"run {r + 1} {v.name:12s} load {load:5.2f}  {seq}rand {row['rand_iops'] / 1000:6.1f}k IOPS"
                      + (f"  requests {row['requests_rand']} loads {row['data_loads_rand']}"
                         if "requests_rand" in row else "")
                      + (f"  daemon CPU {row['daemon_cpu_s']:.2f} s ({row['cpu_us_per_request']:.1f} us/request)"
                         if "cpu_us_per_request" in row else "")
                      + f"  file cached {(row['file_cached'] or 0) >> 20} MiB"
                      + ("  blob fs cached " + ", ".join(f"{k} {(b or 0) >> 20} MiB" for k, b in
                                                        row.get("blob_fs_cached", {}).items())
                         if row.get("blob_fs_cached") else ""), flush=True)
    print("medians:")
    base = results[variants[0].name]
    for v in variants:
        rows = results[v.name]
        med = {k: statistics.median(x[k] for x in rows) for k in ("seq_cold", "seq_inval", "rand_iops",
                                                                   "cpu_us_per_request")
               if rows and k in rows[0]}
        ratio = {k: med[k] / statistics.median(x[k] for x in base) for k in med}
        print(f"  {v.name:12s} " + "  ".join(f"{k} {med[k]:.0f} ({ratio[k]:.2f}x {variants[0].name})" for k in med))
    if os.environ.get("OUT"):
        with open(os.environ["OUT"], "w") as f:
            json.dump({"image": image, "file": name, "runs": runs, "random_seconds": random_s,
                       "variants": [v.spec for v in variants], "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
