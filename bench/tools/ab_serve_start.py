#!/usr/bin/env python3
"""A/B of `squashd serve` start-up on the 69 service images (E3-style), alternating variants:
drop_caches, start the daemon with a config of every image, time until READY=1 (NOTIFY_SOCKET)
and until an `ls` of every root has ended. Medians of 5 (RUNS=N for more).

    sudo python3 bench/tools/ab_serve_start.py "" "threads=1" "ENV:MALLOC_ARENA_MAX=2"

A variant is per-image mount options, ENV:NAME=VALUE for the daemon's environment, or BIN:PATH for
another squashd binary (to compare two builds); the last two take the images' options after a
`+` (BIN:/tmp/old+kernel). The images
are those bench/run.py built in bench/work/services (IMAGES_DIR=DIR for others).

WALK=1 also walks every mount (parallel `find`s) after the listing, then reads the daemon's
VmRSS and VmHWM and, from `squashd status --json`, the rings' memory and each mount's transport
(for `uring=on` against `uring=off`: issue 27's memory check)."""
import glob, json, os, socket, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SQUASHD = os.environ.get("SQUASHD", os.path.join(REPO, "target", "release", "squashd"))
IMAGES = sorted(glob.glob(os.path.join(os.environ.get("IMAGES_DIR") or os.path.join(REPO, "bench", "work", "services"),
                                       "*.sqfs")))
WALK = os.environ.get("WALK") == "1"


def walk_and_measure(binary, work, pid, mounts):
    """Walks every mount, then: (VmRSS, VmHWM, ring bytes, transports seen) of the daemon."""
    for p in [subprocess.Popen(["find", m], stdout=subprocess.DEVNULL) for m in mounts]:
        p.wait()
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    kib = lambda name: int(fields[name].split()[0]) * 1024  # noqa: E731
    status = json.loads(subprocess.run([binary, "status", "--json", "--socket", os.path.join(work, "control.sock")],
                                       capture_output=True, text=True, check=True).stdout)
    if os.environ.get("SMAPS") == "1":
        print(f"  RSS by mapping kind: {rss_by_kind(pid)}", flush=True)
    images = status["images"]
    transports = sorted({i["transport"] for i in images})
    return kib("VmRSS"), kib("VmHWM"), sum(i.get("ring_memory_bytes", 0) for i in images), transports


def rss_by_kind(pid):
    """The daemon's resident KiB by kind of mapping (SMAPS=1): thread stacks (2 MiB + guard),
    malloc arenas and the heap, the rings' mappings (io_uring), 128 KiB payload buffers, the
    binary and libraries, and the rest."""
    kinds, kind = {}, None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and not line.startswith(("Rss", "Size")) and ":" not in head[0]:
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                size, name = (hi - lo) >> 10, (head[5] if len(head) > 5 else "")
                kind = ("io_uring" if "io_uring" in name else "heap" if name == "[heap]"
                        else "files" if name.startswith("/") else "stack" if size in (2052, 2048)
                        else "payload" if size == 128 else "arena" if size in (65536, 132) or size > 60000
                        else "other")
            elif head[0] == "Rss:" and kind:
                kinds[kind] = kinds.get(kind, 0) + int(head[1])
    return dict(sorted(kinds.items()))


def run(work, variant):
    env = dict(os.environ)
    opts, binary = variant, SQUASHD
    if variant.startswith(("ENV:", "BIN:")):
        # ENV:NAME=VALUE or BIN:PATH, then optionally +OPTIONS for the images.
        kind, rest = variant[:4], variant[4:]
        rest, _, opts = rest.partition("+")
        if kind == "ENV:":
            name, value = rest.split("=", 1)
            env[name] = value
        else:
            binary = rest
    lines, mounts = [f"socket = {json.dumps(os.path.join(work, 'control.sock'))}", ""], []
    for i, image in enumerate(IMAGES):
        mnt = os.path.join(work, f"m{i:02d}")
        os.makedirs(mnt, exist_ok=True)
        mounts.append(mnt)
        lines += ["[[image]]", f"path = {json.dumps(image)}", f"mountpoint = {json.dumps(mnt)}"]
        lines += [f"options = {json.dumps(opts)}"] if opts else []
    config = os.path.join(work, "serve.toml")
    with open(config, "w") as f:
        f.write("\n".join(lines) + "\n")
    notify = os.path.join(work, "notify.sock")
    if os.path.exists(notify):
        os.unlink(notify)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(notify)
    sock.settimeout(60)
    subprocess.run("sync; echo 3 > /proc/sys/vm/drop_caches", shell=True, check=True)
    env["NOTIFY_SOCKET"] = notify
    start = time.perf_counter()
    daemon = subprocess.Popen([binary, "serve", "--config", config], stderr=subprocess.DEVNULL, env=env)
    try:
        sock.recv(100)
        ready = time.perf_counter() - start
        for p in [subprocess.Popen(["ls", m], stdout=subprocess.DEVNULL) for m in mounts]:
            p.wait()
        listed = time.perf_counter() - start
        threads = len(os.listdir(f"/proc/{daemon.pid}/task"))
        memory = walk_and_measure(binary, work, daemon.pid, mounts) if WALK else None
    finally:
        daemon.terminate()
        daemon.wait()
        sock.close()
    return ready, listed, threads, memory


def main():
    variants = sys.argv[1:] or [""]
    if not IMAGES:
        sys.exit("no images in bench/work/services: run bench/run.py first")
    results = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="ab-serve-") as work:
        for _ in range(int(os.environ.get("RUNS", "5"))):
            for v in variants:
                results[v].append(run(work, v))
    for v, runs in results.items():
        print(f"{v or 'default':30s} ready {1000 * statistics.median(r[0] for r in runs):6.1f} ms"
              f" ({1000 * min(r[0] for r in runs):.1f}-{1000 * max(r[0] for r in runs):.1f})"
              f"  listed {1000 * statistics.median(r[1] for r in runs):6.1f} ms  threads {runs[0][2]}"
              + ("" if not WALK else
                 f"  after walking: VmRSS {statistics.median(r[3][0] for r in runs) / 2**20:5.1f} MiB"
                 f" ({min(r[3][0] for r in runs) / 2**20:.1f}-{max(r[3][0] for r in runs) / 2**20:.1f})"
                 f"  VmHWM {statistics.median(r[3][1] for r in runs) / 2**20:5.1f} MiB"
                 f"  rings {runs[0][3][2] / 2**20:.1f} MiB  transports {','.join(runs[0][3][3])}"))


if __name__ == "__main__":
    main()
