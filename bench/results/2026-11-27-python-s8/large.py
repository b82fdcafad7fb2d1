import sys, os, time, threading, resource, json
import squashd
MIB = 1 << 20
threads = int(sys.argv[2])
image = squashd.open(sys.argv[1], read_ahead=0)
size = image.stat("data").st_size
barrier = threading.Barrier(threads + 1)
def reader(i):
    start, end = i * size // threads, (i + 1) * size // threads
    with image.open("data", buffering=0) as f:
        f.seek(start); barrier.wait()
        while start < end:
            n = len(f.read(min(MIB, end - start)))
            if n == 0: break
            start += n
ws = [threading.Thread(target=reader, args=(i,)) for i in range(threads)]
for w in ws: w.start()
r0 = resource.getrusage(resource.RUSAGE_SELF)
barrier.wait(); t = time.perf_counter()
for w in ws: w.join()
wall = time.perf_counter() - t
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"t": threads, "wall": round(wall, 3), "user": round(r1.ru_utime - r0.ru_utime, 3), "sys": round(r1.ru_stime - r0.ru_stime, 3), "minflt": r1.ru_minflt - r0.ru_minflt, "load": os.getloadavg()[0]}))
