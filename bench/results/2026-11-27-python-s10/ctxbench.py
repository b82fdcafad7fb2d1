import os, sys, time, threading, zstandard as zs
data = open('/work/wt/python7/bench/work/python/large-src/data','rb').read(48<<20)
B = 128<<10
cctx = zs.ZstdCompressor(level=15)
blocks = [cctx.compress(data[i:i+B]) for i in range(0, len(data), B)]
mode = sys.argv[1]
pool = [zs.ZstdDecompressor() for _ in range(4)]
lock = threading.Lock()
def work(cpu, out):
    os.sched_setaffinity(0, {cpu})
    mine = zs.ZstdDecompressor()
    t0 = time.thread_time()
    for rep in range(3):
        for b in blocks:
            if mode == 'own':
                mine.decompress(b, max_output_size=B)
            else:
                with lock: d = pool.pop(0)   # FIFO: contexts rotate between threads
                d.decompress(b, max_output_size=B)
                with lock: pool.append(d)
    out[cpu] = time.thread_time() - t0
out = {}
ts = [threading.Thread(target=work, args=(c, out)) for c in (0, 1)]
[t.start() for t in ts]; [t.join() for t in ts]
print(mode, {k: round(v, 3) for k, v in out.items()}, 'MB/s per thread', round(3*len(data)/1e6/max(out.values())))
