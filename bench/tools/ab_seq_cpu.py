#!/usr/bin/env python3
"""Sequential cold reads of one file on several mounts of one image, alternating, for A/B work
on a shared machine: bandwidth, and the CPU time of the reader (fio's) and of the serving
daemon (utime+stime of its processes over the pass), which the load moves less than the wall.

    sudo RUNS=5 python3 bench/tools/ab_seq_cpu.py IMAGE FILE VARIANT...

VARIANT is `kernel` (the kernel's squashfs, loop mount) or `NAME=BIN[,OPTIONS][@ENV=VALUE...]`
(`BIN mount IMAGE MNT -o control=SOCK,OPTIONS`). `@RA=KB` is not passed on: it sets the
read-ahead window (read_ahead_kb) of the EROFS mount's bdi after mounting, a kernel-path
experiment. `RAND_S=S` adds S seconds of 4 KiB random reads. Prints each run and the medians,
with the load average and squashd's counters (data loads, blocks read ahead, busy cuts, blob
requests, the blob's page cache as status shows it)."""
import json, os, statistics, subprocess, sys, tempfile, time

def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)

def drop():
    sh(["sync"]); open("/proc/sys/vm/drop_caches", "w").write("3\n")

def cpu_of(pids):
    t = 0
    for p in pids:
        try:
            f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            t += int(f[11]) + int(f[12])
        except OSError:
            pass
    return t / os.sysconf("SC_CLK_TCK")

def pids_of(mnt):
    out = subprocess.run(["pgrep", "-f", f" mount .* {mnt}( |$)"], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]

def fio(path, size, rw="read", bs="128k", runtime=None):
    cmd = ["fio", "--name=s", f"--filename={path}", "--readonly", f"--rw={rw}", f"--bs={bs}", "--ioengine=psync",
           "--iodepth=1", "--numjobs=1", f"--size={size}", "--invalidate=1", "--output-format=json"]
    if runtime:
        cmd += ["--time_based", f"--runtime={runtime}"]
    out = sh(cmd).stdout
    j = json.loads(out[out.index("{"):])["jobs"][0]
    return j

image, name = sys.argv[1], sys.argv[2]
variants = []
for spec in sys.argv[3:]:
    if spec == "kernel":
        variants.append(("kernel", None, None, {}))
    else:
        n, rest = spec.split("=", 1)
        rest, *envs = rest.split("@")
        b, _, o = rest.partition(",")
        variants.append((n, b, o, dict(e.split("=", 1) for e in envs)))
runs = int(os.environ.get("RUNS", "5"))
rand = int(os.environ.get("RAND_S", "0"))
work = tempfile.mkdtemp(prefix="rp2-seq-")
res = {v[0]: [] for v in variants}
try:
    for r in range(runs):
        for (n, b, o, env) in variants:
            mnt = os.path.join(work, n); os.makedirs(mnt, exist_ok=True)
            if b is None:
                sh(["mount", "-t", "squashfs", "-o", "loop,ro", image, mnt])
            else:
                before_bdi = set(os.listdir("/sys/class/bdi"))
                sh([b, "mount", image, mnt, "-o", f"control={mnt}.sock" + (f",{o}" if o else "")], env=dict(os.environ, **env))
                if "RA" in env:
                    new = [d for d in set(os.listdir("/sys/class/bdi")) - before_bdi if d.startswith("erofs-")]
                    assert len(new) == 1, new
                    open(f"/sys/class/bdi/{new[0]}/read_ahead_kb", "w").write(env["RA"])
            try:
                f = os.path.join(mnt, name); size = os.path.getsize(f)
                drop()
                load = os.getloadavg()[0]
                pids = pids_of(mnt)
                c0 = cpu_of(pids)
                j = fio(f, size)
                c1 = cpu_of(pids)
                row = {"load": load, "bw": j["read"]["bw_bytes"] / 2**20,
                       "reader_cpu": (j["usr_cpu"] + j["sys_cpu"]) / 100 * j["job_runtime"] / 1000,
                       "daemon_cpu": c1 - c0}
                if rand:
                    row["rand"] = fio(f, size, "randread", "4k", rand)["read"]["iops"]
                    row["daemon_cpu_rand"] = cpu_of(pids) - c1
                if b:
                    st = json.loads(subprocess.run([b, "status", "--json", "--socket", f"{mnt}.sock"], capture_output=True, text=True).stdout)["images"][0]
                    ra = st.get("read_ahead", {})
                    row.update(loads=st["cache"]["data"]["loads"], ra=ra.get("loads"), busy=ra.get("busy_cuts"),
                               reqs=st["requests"], blob_cached=(st.get("translation") or {}).get("blob_cached_bytes"))
            finally:
                sh(["umount", mnt])
                deadline = time.monotonic() + 10
                while b and pids_of(mnt) and time.monotonic() < deadline:
                    time.sleep(0.02)
            res[n].append(row)
            print(f"run {r+1} {n:10s} " + " ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)
finally:
    for (n, *_ ) in variants:
        m = os.path.join(work, n)
        if os.path.ismount(m):
            subprocess.run(["umount", "-l", m])
    subprocess.run(["rm", "-rf", work])
print("medians:")
for n, rows in res.items():
    keys = [k for k in rows[0] if isinstance(rows[0][k], (int, float)) and rows[0][k] is not None]
    print(f"  {n:10s} " + "  ".join(f"{k} {statistics.median(x[k] for x in rows if x.get(k) is not None):.2f}" for k in keys))
