"""The four experiments of anchors.md. Each returns a JSON-able dict of raw runs; report.py
turns them into tables and plots. A system that cannot run an experiment gets a skip reason
instead of rows, and the others still run."""

import json
import os
import shutil
import subprocess
import time

from .common import WORK_DIR, drop_caches, is_root, log, meminfo, parallel_commands, rss_bytes, run
from .mounts import ServeDaemon, _FuseUnmounter, _live_mounts, cached_bytes, loop_devices, mounted, wait_mounted


def _mnt(name):
    path = os.path.join(WORK_DIR, "mnt", name)
    os.makedirs(path, exist_ok=True)
    return path


def e1_walks(systems, usr, ns, runs):
    """E1: N concurrent `find MNT -print`, cold (fresh mount, caches dropped) then warm."""
    out = {"image": usr["path"], "entries": usr.get("entries"), "ns": ns, "rows": {}, "skipped": {}, "counters": {}}
    live = [s for s in systems if not s.skip_reason]
    for s in systems:
        if s.skip_reason:
            out["skipped"][s.name] = s.skip_reason
        else:
            out["rows"][s.name] = {"cold": {str(n): [] for n in ns}, "warm": {str(n): [] for n in ns}}
    for r in range(runs):
        for n in ns:
            for s in live:
                if s.name in out["skipped"]:
                    continue
                mnt = _mnt(f"e1-{s.name}")
                try:
                    with s.mounted_at(usr["path"], mnt):
                        if hasattr(s, "mount_info"):
                            info = dict(s.mount_info(mnt), n=n, run=r + 1)
                            out.setdefault("mount", {}).setdefault(s.name, []).append(info)
                        drop_caches()
                        finds = [["find", mnt, "-print"]] * n
                        cold = parallel_commands(finds)
                        after_cold = s.counters(mnt)
                        warm = parallel_commands(finds)
                        after_warm = s.counters(mnt)
                        counters = {"after_cold": after_cold, "after_warm": after_warm} if after_cold else None
                except Exception as e:  # noqa: BLE001 - one system's failure must not stop the rest
                    out["skipped"][s.name] = f"failed: {e}"
                    out["rows"].pop(s.name, None)
                    continue
                out["rows"][s.name]["cold"][str(n)].append(cold)
                out["rows"][s.name]["warm"][str(n)].append(warm)
                if counters is not None:
                    out["counters"].setdefault(s.name, {})[str(n)] = counters
                log(f"E1 run {r + 1}/{runs} N={n:2d} {s.name:10s} cold {cold:7.3f} s  warm {warm:7.3f} s")
    return out


def e1_same_cpu(squashd, pinned, usr, runs):
    """E1 diagnosis: one cold `find`, as in E1, then again with the daemon and `find` both held
    on CPU 0. A FUSE round trip wakes a thread on the other CPU twice; on a VM whose idle CPUs
    halt, each such wake is costly, and the kernel's squashfs makes none. The difference shows
    what the round trips' cross-CPU wakes cost, apart from the work itself."""
    out = {"rows": {squashd.label: [], pinned.label: []}, "requests": {}, "skipped": {}}
    if squashd.skip_reason:
        out["skipped"]["squashd"] = squashd.skip_reason
        return out
    for r in range(runs):
        for s, prefix in ((squashd, []), (pinned, ["taskset", "-c", "0"])):
            mnt = _mnt(f"e1d-{s.name}")
            with s.mounted_at(usr["path"], mnt):
                drop_caches()
                seconds = parallel_commands([prefix + ["find", mnt, "-print"]])
                counters = s.counters(mnt)
            out["rows"][s.label].append(seconds)
            if counters:
                out["requests"][s.label] = counters.get("requests")
            log(f"E1 same-CPU run {r + 1}/{runs} {s.label}: cold {seconds:.3f} s")
    return out


def _fio(path, size, rw, bs, invalidate, runtime=None):
    cmd = [
        "fio", "--name=e2", f"--filename={path}", "--readonly", f"--rw={rw}", f"--bs={bs}",
        "--ioengine=psync", "--iodepth=1", "--numjobs=1", f"--size={size}",
        f"--invalidate={invalidate}", "--output-format=json",
    ]
    if runtime:
        # Whole passes of fio's random map (each block once per pass, the page cache dropped at
        # the start of each), at most three: a fixed run time would cut a pass anywhere between
        # its misses and its hits, so the figure stepped by passes. A system that cannot finish
        # them (squashfuse_ll: one pass takes a minute) is stopped at 3 x `runtime` seconds.
        cmd += ["--loops=3", f"--runtime={3 * runtime}"]
    p = run(cmd)
    job = json.loads(p.stdout[p.stdout.index("{"):])["jobs"][0]["read"]
    return {"bw_bytes": job["bw_bytes"], "iops": job["iops"]}


def e2_reads(systems, data, runs, random_runtime):
    """E2: fio psync 128 KiB sequential reads (cold, invalidated, warm) and 4 KiB random reads."""
    kinds = ["seq_cold", "seq_invalidated", "seq_warm", "rand_4k"]
    out = {"image": data["path"], "file_bytes": data["file_bytes"], "random_runtime": random_runtime,
           "rows": {}, "skipped": {}, "counters": {}}
    for s in systems:
        if s.skip_reason:
            out["skipped"][s.name] = s.skip_reason
        else:
            out["rows"][s.name] = {k: [] for k in kinds}
    for r in range(runs):
        for s in systems:
            if s.name not in out["rows"]:
                continue
            mnt = _mnt(f"e2-{s.name}")
            try:
                with s.mounted_at(data["path"], mnt):
                    f = os.path.join(mnt, data["file"])
                    size = data["file_bytes"]
                    if hasattr(s, "mount_info"):
                        info = dict(s.mount_info(mnt), run=r + 1)
                        out.setdefault("mount", {}).setdefault(s.name, []).append(info)
                    drop_caches()
                    before = meminfo()
                    res, counters = {}, {}
                    for kind, args in [("seq_cold", ("read", "128k", 1)),
                                       ("seq_invalidated", ("read", "128k", 1)),
                                       ("seq_warm", ("read", "128k", 0)),
                                       ("rand_4k", ("randread", "4k", 1, random_runtime))]:
                        res[kind] = _fio(f, size, *args)
                        counters[f"after_{kind}"] = s.counters(mnt)
                        if kind == "seq_cold":
                            # "Data cached once": page cache growth and the serving processes'
                            # memory after one cold read of the whole file.
                            pids = s.daemon_pids(data["path"])
                            memory = {"cached_delta_bytes": meminfo()["Cached"] - before["Cached"],
                                      "daemon_rss_bytes": sum(rss_bytes(p) for p in pids) if pids else None,
                                      "file_cached_bytes": cached_bytes(f),
                                      "backing_cached_bytes": {k: cached_bytes(v) for k, v in
                                                               s.backing_files(data["path"], mnt).items() if v},
                                      "run": r + 1}
                            out.setdefault("memory", {}).setdefault(s.name, []).append(memory)
                        if kind == "rand_4k" and out.get("memory", {}).get(s.name):
                            # What the random pass left cached: for the kernel path, whether the
                            # blob's own page cache stays out of it (data cached once).
                            out["memory"][s.name][-1]["backing_cached_after_rand_bytes"] = {
                                k: cached_bytes(v) for k, v in s.backing_files(data["path"], mnt).items() if v}
                            out["memory"][s.name][-1]["file_cached_after_rand_bytes"] = cached_bytes(f)
                            # And what squashd's status says of it (the kernel path's translation).
                            shown = ((counters.get("after_rand_4k") or {}).get("translation") or {})
                            if "blob_cached_bytes" in shown:
                                out["memory"][s.name][-1]["status_blob_cached_bytes"] = shown["blob_cached_bytes"]
                    if not counters["after_seq_cold"]:
                        counters = None
            except Exception as e:  # noqa: BLE001
                out["skipped"][s.name] = f"failed: {e}"
                out["rows"].pop(s.name, None)
                continue
            for k in kinds:
                out["rows"][s.name][k].append(res[k])
            if counters is not None:
                out["counters"][s.name] = counters
            log(f"E2 run {r + 1}/{runs} {s.name:10s} " + "  ".join(
                f"{k} {res[k]['bw_bytes'] / 2**20:.0f} MiB/s" for k in kinds[:3])
                + f"  rand {res['rand_4k']['iops'] / 1000:.1f}k IOPS")
    return out


def _list_roots(mounts):
    """Lists every root, in this process: spawning an `ls` per image would cost the harness
    about as much as what it measures (69 processes take about 60 ms to start and end here)."""
    for mnt in mounts:
        if not os.listdir(mnt):
            raise RuntimeError(f"{mnt}: the root lists empty")


def _many_fuse_or_loop(s, pairs):
    """Mounts every image with its own mount command, all at once (kernel: mount -o loop; FUSE:
    one process each), listing each root as soon as its mount command has returned. Returns
    seconds until every root is listed."""
    start = time.perf_counter()
    procs = []
    for image, mnt in pairs:
        _live_mounts.add((s, mnt))
        if s.name == "kernel":
            cmd = ["mount", "-t", "squashfs", "-o", "loop,ro", image, mnt]
        elif s.name == "squashfuse":
            cmd = [s.binary, image, mnt]
        else:
            cmd = [s.binary, "mount", image, mnt]
        procs.append((subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True), mnt))
    errors = []
    for p, mnt in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            errors.append(f"{mnt}: exit {p.returncode}: {err.strip()[:300]}")
            continue
        _list_roots([mnt])
    if errors:
        raise RuntimeError("; ".join(errors[:3]))
    return time.perf_counter() - start


def e3_many(systems, services, runs, uring=None):
    """E3: 69 images mounted and their roots listed in parallel, after drop_caches; memory after
    walking every image once; then everything unmounted. `uring` (auto|on|off): the serve
    daemon's images get `uring=` that (bench/run.py --uring)."""
    images = services["images"]
    out = {"count": len(images), "image_bytes": services["image_bytes"], "rows": {}, "skipped": {}, "how": {}}
    for s in systems:
        if s.skip_reason:
            out["skipped"][s.name] = s.skip_reason
        else:
            out["rows"][s.name] = {"seconds": [], "memory_bytes": [], "processes": []}
    for r in range(runs):
        for s in systems:
            if s.name not in out["rows"]:
                continue
            pairs = [(img, _mnt(f"e3-{s.name}/{i:02d}")) for i, img in enumerate(images)]
            daemon = None
            try:
                drop_caches()
                before = meminfo()
                # Loop devices backed by our images or anything of ours (the kernel path's blob
                # file system lies under the serve daemon's directory in bench/work).
                ours = [WORK_DIR, "/run/squashd", *images]
                loops_before = loop_devices(ours)
                if s.name in ("squashd", "squashd_kernel") and s.has_serve:
                    kernel_path = s.name == "squashd_kernel"
                    out["how"][s.name] = ("one `squashd serve` daemon, `options = \"kernel\"` for every image"
                                          if kernel_path else "one `squashd serve` daemon")
                    start = time.perf_counter()
                    options = ",".join(o for o in ["kernel" if kernel_path else "",
                                                   f"uring={uring}" if uring else ""] if o)
                    if uring:
                        out["how"][s.name] += f", `uring={uring}`"
                    daemon = ServeDaemon(s.binary, pairs, options=options or None)
                    daemon.start()
                    _list_roots([m for _, m in pairs])
                    seconds = time.perf_counter() - start
                    out.setdefault("ready_seconds", {}).setdefault(s.name, []).append(daemon.ready_seconds)
                elif s.name == "squashd_kernel":
                    raise RuntimeError("squashd serve not available")
                elif s.name == "erofs":
                    raise RuntimeError("no EROFS images built for the service images")
                else:
                    if s.name == "squashd":
                        out["how"][s.name] = "one `squashd mount` process per image (serve not available yet)"
                    seconds = _many_fuse_or_loop(s, pairs)
                parallel_commands([["find", m, "-print"] for _, m in pairs])
                loops_after = loop_devices(ours)
                out.setdefault("loop_devices", {}).setdefault(s.name, []).append(
                    len(set(loops_after) - set(loops_before)))
                if daemon:
                    memory, procs = daemon.rss(), daemon.processes()
                    out.setdefault("counters", {})[s.name] = daemon.counters()
                    out.setdefault("engines", {})[s.name] = daemon.engines()
                    if s.name == "squashd_kernel":
                        after = meminfo()
                        out.setdefault("slab_bytes", {}).setdefault(s.name, []).append(after["Slab"] - before["Slab"])
                elif s.fuse:
                    pids = set()
                    for img, _ in pairs:
                        pids.update(s.daemon_pids(img))
                    memory, procs = sum(rss_bytes(p) for p in pids), len(pids)
                else:
                    after = meminfo()
                    memory, procs = after["Slab"] - before["Slab"], 0
            except Exception as e:  # noqa: BLE001
                out["skipped"][s.name] = f"failed: {e}"
                out["rows"].pop(s.name, None)
                continue
            finally:
                if daemon:
                    daemon.stop()
                for _, m in pairs:
                    if mounted(m):
                        (s if not daemon else daemon.unmounter).unmount(m)
                    _live_mounts.discard((s, m))
            row = out["rows"][s.name]
            row["seconds"].append(seconds)
            row["memory_bytes"].append(memory)
            row["processes"].append(procs)
            log(f"E3 run {r + 1}/{runs} {s.name:10s} {seconds:6.3f} s, memory {memory / 2**20:.1f} MiB"
                + (" (slab delta)" if not s.fuse and not daemon else f" RSS in {procs} process(es)"))
    return out


def _time_rss(cmd):
    """Runs cmd under GNU time: (seconds, max RSS bytes)."""
    start = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-300:]}")
    return seconds, int(p.stderr.strip().splitlines()[-1]) * 1024


def _pairs(label_cmds, runs, before_each):
    """Runs each labelled command `runs` times, alternating, calling before_each() first."""
    rows, skipped = {}, {}
    for r in range(runs):
        for label, make in label_cmds:
            if label in skipped:
                continue
            before_each()
            try:
                seconds, rss = _time_rss(make())
            except Exception as e:  # noqa: BLE001
                skipped[label] = f"failed: {e}"
                rows.pop(label, None)
                continue
            rows.setdefault(label, {"seconds": [], "max_rss_bytes": []})
            rows[label]["seconds"].append(seconds)
            rows[label]["max_rss_bytes"].append(rss)
            log(f"E4 run {r + 1}/{runs} {label:28s} {seconds:7.3f} s  max RSS {rss / 2**20:.0f} MiB")
    return rows, skipped


class FreshExt4:
    """A new ext4 for each run: mkfs.ext4 (defaults) on a sparse file in the work directory,
    through a loop device with direct I/O, so it writes to the same disk."""

    SIZE = "24G"

    def __init__(self):
        self.img = os.path.join(WORK_DIR, "fresh-ext4.img")
        self.mnt = os.path.join(WORK_DIR, "fresh-ext4.mnt")
        self.loop = None

    @staticmethod
    def unavailable():
        """Why this cannot run here, or None."""
        if not is_root():
            return "needs root (mkfs, losetup, mount)"
        for tool in ("mkfs.ext4", "losetup"):
            if not shutil.which(tool):
                return f"{tool} not found"
        return None

    def reset(self):
        """Replaces the file system with a new one, then writes back and drops caches."""
        self.close()
        os.makedirs(self.mnt, exist_ok=True)
        run(["truncate", "-s", self.SIZE, self.img])
        run(["mkfs.ext4", "-q", "-F", self.img])
        self.loop = run(["losetup", "--direct-io=on", "-f", "--show", self.img]).stdout.strip()
        run(["mount", self.loop, self.mnt])
        drop_caches()
        time.sleep(1)

    def close(self):
        """Unmounts and deletes the file system, if there is one."""
        if self.loop:
            run(["umount", self.mnt], check=False)
            run(["losetup", "-d", self.loop], check=False)
            self.loop = None
        if os.path.exists(self.img):
            os.remove(self.img)
        if os.path.isdir(self.mnt):
            os.rmdir(self.mnt)


def e4_offline(squashd, usr, data, ns, runs, split_repeat):
    """E4: `squashd ls -R -l` vs `unsquashfs -lls`, extraction vs `unsquashfs -d` (same file
    system, caches dropped before each), and in-process parallel walks."""
    out = {"image": usr["path"], "ls": {}, "extract": {}, "walk": {}, "split": [], "skipped": {}}
    out["ls"], sk = _pairs([
        ("unsquashfs -lls", lambda: ["unsquashfs", "-lls", usr["path"]]),
        ("squashd ls -R -l", lambda: [squashd, "ls", "-R", "-l", usr["path"]]),
    ], runs, drop_caches)
    out["skipped"].update(sk)
    dest = os.path.join(WORK_DIR, "extract")

    def clean_and_drop():
        shutil.rmtree(dest, ignore_errors=True)
        drop_caches()

    for key, img in (("usr", usr["path"]), ("data", data["path"])):
        rows, sk = _pairs([
            ("unsquashfs -d", lambda img=img: ["unsquashfs", "-no-progress", "-d", dest, img]),
            ("squashd extract -d", lambda img=img: [squashd, "extract", "-q", img, "-d", dest]),
        ], runs, clean_and_drop)
        out["extract"][key] = {"image": img, "rows": rows}
        out["skipped"].update({f"{k} ({key})": v for k, v in sk.items()})
    shutil.rmtree(dest, ignore_errors=True)

    # The same extraction of usr into a new ext4 for every run. Above, each run allocates its
    # ~180k inodes just after the previous run's output was deleted, and ext4 without a journal
    # (as this work directory's may be) skips inodes freed in the last 1-6 minutes, scanning
    # past them (`recently_deleted` in fs/ext4/ialloc.c): seconds of kernel time that belong to
    # the harness, not to either tool, paid by both.
    fresh = FreshExt4()
    why = fresh.unavailable()
    if why:
        out["skipped"]["usr (fresh ext4)"] = why
    else:
        out_dir = os.path.join(fresh.mnt, "out")
        try:
            rows, sk = _pairs([
                ("unsquashfs -d", lambda: ["unsquashfs", "-no-progress", "-d", out_dir, usr["path"]]),
                ("squashd extract -d", lambda: [squashd, "extract", "-q", usr["path"], "-d", out_dir]),
            ], runs, fresh.reset)
            out["extract"]["usr (fresh ext4)"] = {"image": usr["path"], "rows": rows}
            out["skipped"].update({f"{k} (usr, fresh ext4)": v for k, v in sk.items()})
        except (OSError, subprocess.CalledProcessError) as e:
            out["skipped"]["usr (fresh ext4)"] = f"could not make the file system: {e}"
        finally:
            fresh.close()

    for n in ns:
        for r in range(runs):
            p = run([squashd, "walk", usr["path"], "--threads", str(n), "--warmup", "--json"], check=False)
            if p.returncode != 0:
                out["skipped"]["walk"] = f"squashd walk failed: {p.stderr.strip()[:300]}"
                break
            res = json.loads(p.stdout)
            out["walk"].setdefault(str(n), []).append(res["phases"][-1])
            log(f"E4 walk N={n:2d} run {r + 1}/{runs}: {res['phases'][-1]['wall_seconds']:.3f} s")
    top = max(ns)
    for r in range(runs):
        p = run([squashd, "walk", usr["path"], "--threads", str(top), "--repeat", str(split_repeat),
                 "--split", "--json"], check=False)
        if p.returncode != 0:
            out["skipped"]["split"] = f"squashd walk --split failed: {p.stderr.strip()[:300]}"
            break
        res = json.loads(p.stdout)
        out["split"].append(res)
        log(f"E4 split {top} threads run {r + 1}/{runs}: speedup {res['speedup']:.2f}x, "
            f"{res['phases'][-1]['decompressions_per_metadata_block']} decompressions per metadata block")
    return out
