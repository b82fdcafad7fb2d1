"""E6, application start: N processes at once import the same large Python environment from one
image (issue 24, part 2).

The environment: numpy, pandas, scipy, scikit-learn, sympy and matplotlib installed with
`pip install --target` into `bench/work/e6/site`, byte-compiled (`compileall`), then
`mksquashfs site python-env.sqfs -comp zstd`. Both are kept, with a sidecar saying what they
were built from, and reused while the recipe holds: only the first run pays for pip.

Each process runs `python3 -S -B -c "import ..."` (-S: no site directory of the interpreter
between the environment and its imports) (IMPORTS below) with `PYTHONPATH` set to the
mount, and `MPLCONFIGDIR` to a directory warmed once (matplotlib otherwise builds its font cache
on its first import). Cold: fresh mount, `drop_caches`, N processes started at once, timed until
all end. Warm: the same N again on that mount. The floor is the same tree read from the local
disk (`bench/work/e6/site`, caches dropped the same way). For the FUSE servers, the CPU time of
the serving processes (utime + stime of /proc/PID/stat, children excluded) over each phase.
"""

import json
import os
import shutil
import sys
import time

from .common import WORK_DIR, drop_caches, log, parallel_commands, pids_with_args, run

PACKAGES = ["numpy", "pandas", "scipy", "scikit-learn", "sympy", "matplotlib"]
IMPORTS = ("import numpy, pandas, scipy, sklearn, sympy, matplotlib; "
           "import scipy.stats, scipy.optimize, scipy.signal, sklearn.linear_model, "
           "sklearn.ensemble, matplotlib.pyplot, sympy.physics")
E6_DIR = os.path.join(WORK_DIR, "e6")


def _recipe():
    # Byte code and wheels are per minor version: run.py may re-run itself under Debian's
    # python3 (for matplotlib's plots), another build of the same minor version.
    return {"packages": PACKAGES, "python": "%d.%d" % sys.version_info[:2], "compileall": True, "comp": "zstd"}


def build_env():
    """The environment's tree and image, built once and reused while the recipe holds."""
    os.makedirs(E6_DIR, exist_ok=True)
    site = os.path.join(E6_DIR, "site")
    image = os.path.join(E6_DIR, "python-env.sqfs")
    sidecar = image + ".json"
    recipe = _recipe()
    try:
        with open(sidecar) as f:
            meta = json.load(f)
        if meta.get("recipe") == recipe and os.path.exists(image) and os.path.isdir(site):
            return meta
    except (OSError, ValueError):
        pass
    partial = site + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(site, ignore_errors=True)
    log(f"E6: pip install --target {partial} {' '.join(PACKAGES)}")
    run([sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--target", partial, *PACKAGES])
    run([sys.executable, "-m", "compileall", "-q", "-j", "0", partial], check=False)
    os.rename(partial, site)
    log("E6: mksquashfs site python-env.sqfs -comp zstd")
    run(["mksquashfs", site, image, "-comp", "zstd", "-noappend", "-no-progress", "-quiet"])
    files = sum(len(f) for _, _, f in os.walk(site))
    meta = {"recipe": recipe, "path": image, "site": site, "files": files,
            "tree_bytes": int(run(["du", "-sb", site]).stdout.split()[0]),
            "image_bytes": os.path.getsize(image),
            "pip": [sys.executable, "-m", "pip", "install", "--no-compile", "--target", "SITE", *PACKAGES]}
    with open(sidecar, "w") as f:
        json.dump(meta, f, indent=1)
    return meta


def _warm_mplconfig(site):
    """matplotlib builds a font cache on its first import: once, here, not in the timings."""
    d = os.path.join(E6_DIR, "mplconfig")
    os.makedirs(d, exist_ok=True)
    run([sys.executable, "-S", "-B", "-c", "import matplotlib.pyplot"], env=_env(site, d))
    return d


def _env(root, mplconfig):
    env = dict(os.environ, PYTHONPATH=root, MPLCONFIGDIR=mplconfig, PYTHONDONTWRITEBYTECODE="1")
    # One thread per BLAS: N processes on 2 cores, not N times the cores' threads.
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return env


def _cpu_seconds(pids):
    """utime + stime of the processes, in seconds (children excluded)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / tick


def _starts(n, root, mplconfig):
    """Seconds for n processes importing the environment at once from `root`."""
    env = _env(root, mplconfig)
    import subprocess
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-S", "-B", "-c", IMPORTS], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for _ in range(n)]
    errors = []
    for p in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            errors.append(err.strip()[-300:])
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"{len(errors)} of {n} imports failed: {errors[0]}")
    return elapsed


class LocalDisk:
    """The floor: the same tree on the local disk, no mount."""
    name = "local_disk"
    label = "the same tree on the local disk (ext4)"
    skip_reason = None
    version = "-"


def e6_start(systems, ns, runs, mnt_for):
    """E6: for each run, N and system: fresh mount, drop_caches, N imports at once (cold), then
    N again (warm); the serving processes' CPU time over each."""
    env = build_env()
    mplconfig = _warm_mplconfig(env["site"])
    out = {"image": env["path"], "files": env["files"], "tree_bytes": env["tree_bytes"],
           "image_bytes": env["image_bytes"], "imports": IMPORTS, "ns": ns, "rows": {}, "cpu": {},
           "counters": {}, "skipped": {}, "loadavg": []}
    everyone = [*systems, LocalDisk()]
    for s in everyone:
        if s.skip_reason:
            out["skipped"][s.name] = s.skip_reason
        else:
            out["rows"][s.name] = {f"{phase}_{n}": [] for n in ns for phase in ("cold", "warm")}
            out["cpu"][s.name] = {f"{phase}_{n}": [] for n in ns for phase in ("cold", "warm")}
    for r in range(runs):
        for n in ns:
            for s in everyone:
                if s.name not in out["rows"]:
                    continue
                try:
                    times, cpus, counters = _one(s, env, n, mplconfig, mnt_for)
                except Exception as e:  # noqa: BLE001 - the others still run
                    out["skipped"][s.name] = f"failed: {e}"
                    out["rows"].pop(s.name, None)
                    continue
                for phase in ("cold", "warm"):
                    out["rows"][s.name][f"{phase}_{n}"].append(times[phase])
                    out["cpu"][s.name][f"{phase}_{n}"].append(cpus[phase])
                if counters:
                    out["counters"].setdefault(s.name, {})[str(n)] = counters
                with open("/proc/loadavg") as f:
                    load = " ".join(f.read().split()[:3])
                out["loadavg"].append(load)
                cpu = "" if cpus["cold"] is None else f"  daemon CPU cold {cpus['cold']:.2f} s warm {cpus['warm']:.2f} s"
                log(f"E6 run {r + 1}/{runs} N={n:2d} {s.name:14s} cold {times['cold']:6.2f} s  "
                    f"warm {times['warm']:6.2f} s{cpu}  (load {load})")
    return out


def _one(s, env, n, mplconfig, mnt_for):
    if isinstance(s, LocalDisk):
        drop_caches()
        cold = _starts(n, env["site"], mplconfig)
        warm = _starts(n, env["site"], mplconfig)
        return {"cold": cold, "warm": warm}, {"cold": None, "warm": None}, None
    mnt = mnt_for(f"e6-{s.name}")
    with s.mounted_at(env["path"], mnt):
        pids = _serving_pids(s, env["path"], mnt)
        drop_caches()
        c0 = _cpu_seconds(pids) if pids else None
        cold = _starts(n, mnt, mplconfig)
        c1 = _cpu_seconds(pids) if pids else None
        after_cold = s.counters(mnt)
        warm = _starts(n, mnt, mplconfig)
        c2 = _cpu_seconds(pids) if pids else None
        after_warm = s.counters(mnt)
    cpus = {"cold": None if c0 is None else c1 - c0, "warm": None if c0 is None else c2 - c1}
    counters = {"after_cold": after_cold, "after_warm": after_warm} if after_cold else None
    return {"cold": cold, "warm": warm}, cpus, counters


def _serving_pids(s, image, mnt):
    """The processes serving the mount: squashfuse_ll's or squashd's (the kernel path's daemon
    serves the blob); none for the kernel's squashfs."""
    if s.name == "kernel":
        return []
    pids = s.daemon_pids(image)
    if not pids:
        pids = pids_with_args("squashd", mnt)
    return pids


def markdown(e6):
    """E6's tables: wall time medians (min-max), the serving processes' CPU, ratios over the
    kernel's squashfs and squashfuse_ll."""
    from .common import summary
    lines = ["## E6: application start (N processes importing a Python environment at once)", ""]
    lines.append(f"Image: `{e6['image']}` ({e6['files']} files, {e6['tree_bytes'] / 2**20:.0f} MiB of tree, "
                 f"{e6['image_bytes'] / 2**20:.0f} MiB zstd). Each process: `python3 -S -B -c \"{e6['imports']}\"`.")
    lines.append(f"Load average after each measurement: {', '.join(e6['loadavg'])}.")
    lines.append("")
    cols = [f"{phase}_{n}" for n in e6["ns"] for phase in ("cold", "warm")]
    lines.append("| system | " + " | ".join(c.replace("_", " N=") for c in cols) + " |")
    lines.append("|---" * (len(cols) + 1) + "|")
    med = {}
    for name, row in e6["rows"].items():
        cells = []
        for c in cols:
            s = summary(row[c])
            med.setdefault(name, {})[c] = s["median"] if s else None
            cells.append(f"{s['median']:.2f} s ({s['min']:.2f}-{s['max']:.2f})" if s else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Serving processes' CPU time (median, s):")
    lines.append("")
    lines.append("| system | " + " | ".join(c.replace("_", " N=") for c in cols) + " |")
    lines.append("|---" * (len(cols) + 1) + "|")
    for name, row in e6["cpu"].items():
        if name not in e6["rows"]:
            continue
        cells = []
        for c in cols:
            s = summary(row[c])
            cells.append(f"{s['median']:.2f}" if s else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    for base in ("kernel", "squashfuse"):
        if base not in med:
            continue
        lines.append(f"Ratios of medians over {base}:")
        lines.append("")
        lines.append("| system | " + " | ".join(c.replace("_", " N=") for c in cols) + " |")
        lines.append("|---" * (len(cols) + 1) + "|")
        for name in med:
            if name == base:
                continue
            cells = [f"{med[name][c] / med[base][c]:.2f}x" if med[name][c] and med[base][c] else "-" for c in cols]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    for name, by_n in e6.get("counters", {}).items():
        for n, c in by_n.items():
            ra = (c.get("after_cold") or {}).get("read_ahead")
            if ra:
                lines.append(f"- {name} N={n}, read-ahead after the cold starts (last run): {json.dumps(ra)}")
    if e6.get("skipped"):
        lines.append("")
        for name, why in e6["skipped"].items():
            lines.append(f"- {name}: {why}")
    return "\n".join(lines) + "\n"
