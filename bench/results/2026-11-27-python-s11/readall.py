import os, sys, time, resource, json
import squashd
img = sys.argv[1]; ra = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2] != "-" else None
order = sys.argv[3] if len(sys.argv) > 3 else "stack"
def sched():
    a = open("/proc/thread-self/schedstat").read().split()
    return int(a[0]) / 1e9, int(a[1]) / 1e9
t0 = time.perf_counter(); r0 = resource.getrusage(resource.RUSAGE_SELF); s0 = sched()
total = files = 0
with squashd.open(img, read_ahead=ra, **({"cache": {"data": int(os.environ["DCACHE"])}} if os.environ.get("DCACHE") else {})) as image:
    if order == "stack":
        stack = ["/"]
        while stack:
            for e in image.scandir(stack.pop()):
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                elif e.is_file(follow_symlinks=False):
                    total += len(image.read_bytes(e.path)); files += 1
    else:
        for root, dirs, names in image.walk("/"):
            for n in names:
                p = root.rstrip("/") + "/" + n
                if image.is_file(p) and not image.is_symlink(p):
                    total += len(image.read_bytes(p)); files += 1
    st = image.stats()
    tcpu = {}
    for t in os.listdir("/proc/self/task"):
        try:
            stat = open(f"/proc/self/task/{t}/stat").read()
        except OSError:
            continue
        comm = stat[stat.index("(")+1:stat.rindex(")")]
        f = stat[stat.rindex(")")+2:].split()
        try:
            ss = open(f"/proc/self/task/{t}/schedstat").read().split()
        except OSError:
            continue
        tcpu[comm] = [round(int(ss[0]) / 1e9, 2), round(int(ss[1]) / 1e9, 2)]
t1 = time.perf_counter(); r1 = resource.getrusage(resource.RUSAGE_SELF); s1 = sched()
fa = st["files_read_ahead"]; dc = st["cache"]["data"]
print(json.dumps({"wall": round(t1 - t0, 3), "cpu": round(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, 2), "sys": round(r1.ru_stime - r0.ru_stime, 2), "minflt": r1.ru_minflt - r0.ru_minflt,
  "rd_cpu": round(s1[0]-s0[0], 2), "rd_rq": round(s1[1]-s0[1], 2), "rd_blk": round((t1-t0)-(s1[0]-s0[0])-(s1[1]-s0[1]), 2),
  "files": files, "load": round(os.getloadavg()[0], 1), "fra": fa,
  "loadedMB": round(dc.get("loaded_bytes", 0)/1e6), "dc": {k: v for k, v in dc.items() if k in ("loads", "hits", "misses", "evictions", "entries", "resident_bytes")}, "waits": dc.get("waits"), "wait_s": round(dc.get("wait_seconds", 0), 2), "tcpu": tcpu}))
