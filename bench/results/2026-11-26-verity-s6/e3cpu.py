"""E3-like start of one serve daemon (69 service images), alternating plain / verity; prints
ready-and-listed wall, the daemon's whole-life CPU (rusage of the child, µs resolution)."""
import json, os, sys, time, resource, statistics
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from benchlib.mounts import ServeDaemon, mounted, _live_mounts, _live_procs
from benchlib.common import drop_caches, WORK_DIR
from benchlib import e7_verity
binary, path, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
images = json.load(open(os.path.join(WORK_DIR, "services/index.json")))["images"]
entries = json.load(open(os.path.join(WORK_DIR, "e7/trees.json")))
res = {False: [], True: []}
phases = {}
for r in range(runs):
    for verified in ((False, True) if os.environ.get("ONLY") is None else (os.environ["ONLY"] == "1",)):
        pairs = [(img, os.path.join(WORK_DIR, "mnt", f"probe/{i:02d}")) for i, img in enumerate(images)]
        for _, m in pairs: os.makedirs(m, exist_ok=True)
        prefix = "kernel," if path == "kernel" else ""
        options = {img: prefix + (e7_verity.verity_options(entries[img]) if verified else "verity=off") for img in images}
        d = ServeDaemon(binary, pairs, options=options)
        if os.environ.get("WARM") != "1": drop_caches()
        if verified and os.environ.get("PREWARM_TREES") == "1":
            for img in images:
                open(entries[img]["tree"], "rb").read()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter(); d.start()
        for _, m in pairs: os.listdir(m)
        secs = time.perf_counter() - t
        import re
        def sec(t):
            m = re.match(r"([0-9.]+)(ns|µs|ms|s)", t); v = float(m.group(1))
            return v * {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1}[m.group(2)]
        ph = {}
        try:
            for line in open(os.path.join(d.dir, "serve.log")):
                parts = line.split()
                if line.startswith("ATTACH"):
                    for k in ("open", "verity", "image", "mount"):
                        ph[k] = ph.get(k, 0) + sec(parts[parts.index(k) + 1])
                if line.startswith("FUSE"):
                    ph["fmount"] = ph.get("fmount", 0) + sec(parts[2]); ph["probe"] = ph.get("probe", 0) + sec(parts[4])
        except OSError as e:
            print(e)
        phases.setdefault(verified, []).append(ph)
        d.stop()
        for _, m in pairs:
            if mounted(m): d.unmounter.unmount(m)
            _live_mounts.discard((d.unmounter, m))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        res[verified].append((secs, cpu, after.ru_utime - before.ru_utime))
for v in (False, True):
    s = res[v]
    print(f"{path} {'verity' if v else 'plain '} list median {statistics.median(x[0] for x in s)*1000:.1f} ms  cpu median {statistics.median(x[1] for x in s)*1000:.1f} ms (user {statistics.median(x[2] for x in s)*1000:.1f})  all {[round(x[0]*1000) for x in s]}")
for v in (False, True):
    if phases[v] and phases[v][0]:
        print("phases", v, {k: round(statistics.median(p.get(k, 0) for p in phases[v]) * 1000, 2) for k in phases[v][0]})
print("load", open('/proc/loadavg').read().split()[:3])
