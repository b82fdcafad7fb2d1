"""One large file read in 1 MiB reads by THREADS threads (each its half), as bench/python_read.py's
large part does, printing wall, CPU, minor faults and the data cache's counters as JSON.
usage: large.py IMAGE THREADS READ_AHEAD(- for the default)"""
import json, os, resource, sys, threading, time
import squashd
img, threads = sys.argv[1], int(sys.argv[2])
ra = None if sys.argv[3] == "-" else int(sys.argv[3])
MIB = 1 << 20
image = squashd.open(img, read_ahead=ra)
size = image.stat("data").st_size
barrier = threading.Barrier(threads + 1)
got = [0] * threads
#: each reader thread's CPU, run-queue wait, and voluntary switches (GIL and futex waits) over its reads
per_thread = [None] * threads
def thread_sched():
    run, wait = (int(x) / 1e9 for x in open("/proc/thread-self/schedstat").read().split()[:2])
    vol = next(int(l.split()[1]) for l in open("/proc/thread-self/status") if l.startswith("voluntary_ctxt"))
    return run, wait, vol
def reader(i):
    start, end = i * size // threads, (i + 1) * size // threads
    with image.open("data", buffering=0) as f:
        f.seek(start)
        barrier.wait()
        s0 = thread_sched()
        while start < end:
            n = len(f.read(min(MIB, end - start)))
            if n == 0:
                break
            got[i] += n
            start += n
        s1 = thread_sched()
        per_thread[i] = [round(s1[0] - s0[0], 3), round(s1[1] - s0[1], 3), s1[2] - s0[2]]
ws = [threading.Thread(target=reader, args=(i,)) for i in range(threads)]
for w in ws:
    w.start()
r0 = resource.getrusage(resource.RUSAGE_SELF)
barrier.wait()
t = time.perf_counter()
for w in ws:
    w.join()
wall = time.perf_counter() - t
r1 = resource.getrusage(resource.RUSAGE_SELF)
dc = image.stats()["cache"]["data"]
assert sum(got) == size
print(json.dumps({"wall": round(wall, 3), "cpu": round(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, 3),
  "sys": round(r1.ru_stime - r0.ru_stime, 3), "minflt": r1.ru_minflt - r0.ru_minflt,
  "load": round(os.getloadavg()[0], 1), "threads": per_thread,
  "dc": {k: dc.get(k) for k in ("loads", "loaded_bytes", "hits", "misses", "evictions", "resident_bytes")}}))
