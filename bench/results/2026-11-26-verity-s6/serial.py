"""One serve daemon, 69 images attached one after another through the control socket
(`squashd attach`), page cache dropped first; the sum of attach times per variant."""
import json, os, sys, time, subprocess, statistics, tempfile, signal
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from benchlib.common import drop_caches, WORK_DIR
from benchlib import e7_verity
binary, path, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
images = json.load(open(os.path.join(WORK_DIR, "services/index.json")))["images"]
entries = json.load(open(os.path.join(WORK_DIR, "e7/trees.json")))
res = {False: [], True: []}
phases = {}
for r in range(runs):
    for verified in (False, True):
        d = tempfile.mkdtemp(prefix="serial-", dir="/tmp/v3")
        sock = os.path.join(d, "c.sock")
        cfg = os.path.join(d, "s.toml"); open(cfg, "w").write(f"socket = {json.dumps(sock)}\n")
        p = subprocess.Popen([binary, "serve", "--config", cfg], stderr=open(os.path.join(d, "log"), "w"), env=dict(os.environ, TRACE_ATTACH="1"))
        while not os.path.exists(sock): time.sleep(0.01)
        mnts = []
        drop_caches()
        total = 0.0
        for i, img in enumerate(images):
            m = os.path.join(d, f"m{i}"); os.makedirs(m); mnts.append(m)
            o = ("kernel," if path == "kernel" else "") + (e7_verity.verity_options(entries[img]) if verified else "verity=off")
            t = time.perf_counter()
            subprocess.run([binary, "attach", "--socket", sock, "-o", o, img, m], check=True, stdout=subprocess.DEVNULL)
            total += time.perf_counter() - t
        p.send_signal(signal.SIGTERM); p.wait()
        for m in mnts:
            subprocess.run(["umount", "-l", m], stderr=subprocess.DEVNULL)
        import re
        ph = {"open": 0.0, "verity": 0.0, "image": 0.0, "mount": 0.0}
        def sec(t):
            m = re.match(r"([0-9.]+)(ns|µs|ms|s)", t); v = float(m.group(1))
            return v * {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1}[m.group(2)]
        for line in open(os.path.join(d, "log")):
            if line.startswith("FUSE"):
                parts = line.split()
                ph["fmount"] = ph.get("fmount", 0) + sec(parts[2]); ph["probe"] = ph.get("probe", 0) + sec(parts[4])
            if line.startswith("ATTACH"):
                parts = line.split()
                for k in ("open", "verity", "image", "mount"):
                    ph[k] += sec(parts[parts.index(k) + 1])
        phases.setdefault(verified, []).append(ph)
        subprocess.run(["rm", "-rf", d])
        res[verified].append(total)
for v in (False, True):
    print(f"{path} {'verity' if v else 'plain '} serial attach sum median {statistics.median(res[v])*1000:.1f} ms all {[round(x*1000) for x in res[v]]}")
for v in (False, True):
    print("phases", v, {k: round(statistics.median(p[k] for p in phases[v]) * 1000, 2) for k in phases[v][0]})
print("load", open('/proc/loadavg').read().split()[:3])
