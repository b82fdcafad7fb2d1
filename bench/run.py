#!/usr/bin/python3
"""squashd's benchmark suite: the experiments of ../shared/anchors.md, side by side with the
kernel's squashfs and squashfuse_ll, in one run. See bench/README.md.

    sudo python3 bench/run.py --quick      # development: under 5 minutes on 2 cores
    sudo python3 bench/run.py              # full: the anchor images (/usr, 1 GiB data file)

Writes bench/results/<date>-<mode>.{json,md} and PNG plots, and copies them to latest.*.
"""

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import e5_remote, e5_report, e5_servers, e6_start, e7_verity, experiments, images, report  # noqa: E402
from benchlib.common import REPO_DIR, WORK_DIR, first_line, is_root, log, meminfo, run  # noqa: E402
from benchlib.mounts import Erofs, Kernel, Squashd, SquashdKernel, Squashfuse, cleanup, leftovers  # noqa: E402

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small images, fewer N, short random reads")
    p.add_argument("--runs", type=int, default=3, help="runs of every measurement (default 3)")
    p.add_argument("--squashfuse", default="/usr/bin/squashfuse_ll", help="the squashfuse_ll binary to compare with")
    p.add_argument("--squashd", default=os.path.join(os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO_DIR, "target"),
                                                     "release", "squashd"),
                   help="the squashd binary (default: release build in $CARGO_TARGET_DIR, else target/)")
    p.add_argument("--no-build", action="store_true", help="do not run cargo build first")
    p.add_argument("--kernel-variant", action="append", default=[], metavar="NAME=BIN[@VAR=VALUE...]",
                   help="also run squashd's kernel path from another build (or with variables set in its "
                        "environment) in E1 and E2, as squashd_kernel_NAME; may be repeated")
    p.add_argument("--only", default="E1,E2,E3,E4",
                   help="comma-separated experiments to run (E5, remote images, E6, application start, "
                        "and E7, verified images, run only when named here)")
    p.add_argument("--out", default=RESULTS_DIR, help="where results go")
    p.add_argument("--uring", choices=["auto", "on", "off"],
                   help="FUSE over io_uring: E1 and E2 also run squashd's FUSE path and kernel path with "
                        "`uring=MODE` (squashd_uring, squashd_kernel_uring) beside the /dev/fuse ones; E3's serve "
                        "daemon gives every image `uring=MODE`. With on or auto the suite sets "
                        "/sys/module/fuse/parameters/enable_uring to 1 for the run and restores it after")
    return p.parse_args()


URING_PARAMETER = "/sys/module/fuse/parameters/enable_uring"


def _enable_uring():
    """Turns FUSE over io_uring on for the run; returns what the parameter was (None: no such
    parameter, the ring's systems then fail to mount with `uring=on`, or use /dev/fuse with auto)."""
    try:
        with open(URING_PARAMETER) as f:
            was = f.read().strip()
        with open(URING_PARAMETER, "w") as f:
            f.write("1")
        log(f"enable_uring: {was} -> 1 for the run")
        return was
    except OSError as e:
        log(f"enable_uring: cannot set it ({e})")
        return None


def _restore_uring(was):
    with open(URING_PARAMETER, "w") as f:
        f.write("1" if was.upper() in ("Y", "1") else "0")
    log(f"enable_uring restored to {was}")


def machine_info(squashd):
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    git = run(["git", "-C", REPO_DIR, "rev-parse", "--short", "HEAD"], check=False).stdout.strip()
    return {
        "cpu": cpu,
        "nproc": os.cpu_count(),
        "memory_gib": meminfo()["MemTotal"] / 2**30,
        "kernel": os.uname().release,
        "mksquashfs": (first_line(["mksquashfs", "-version"]) or "mksquashfs ?").split(" (")[0],
        "unsquashfs": (first_line(["unsquashfs", "-version"]) or "unsquashfs ?").split(" (")[0],
        "fio": first_line(["fio", "--version"]) or "fio ?",
        "squashfuse": (first_line(["dpkg-query", "-W", "-f", "squashfuse ${Version} (Debian)", "squashfuse"])
                       or "squashfuse ?"),
        "squashd": first_line([squashd, "--version"]) or "squashd ?",
        "git": git or "?",
        "loadavg_start": _loadavg(),
    }


def _loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def reexec_with_matplotlib():
    """Plots need matplotlib; Debian's python3-matplotlib is for /usr/bin/python3, which may not
    be the python3 on PATH (pyenv, venvs): switch to it when this interpreter lacks it."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
            os.execv("/usr/bin/python3", ["/usr/bin/python3", *sys.argv])


def main():
    reexec_with_matplotlib()
    args = parse_args()
    mode = "quick" if args.quick else "full"
    if not is_root():
        sys.exit("bench/run.py needs root: it drops caches and mounts images (run it with sudo)")
    for tool in ("mksquashfs", "unsquashfs", "fio"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing: run scripts/setup.sh")
    if not args.no_build:
        log("cargo build --release -p squashd")
        subprocess.run(["cargo", "build", "--release", "-p", "squashd"], cwd=REPO_DIR, check=True)
    squashd = os.path.abspath(args.squashd)
    only = {e.strip().upper() for e in args.only.split(",")}
    ns = [1, 4, 16] if args.quick else [1, 2, 4, 8, 16]
    started = datetime.datetime.now(datetime.timezone.utc)

    # squashd's kernel path (issue 15) and its reference, the kernel's EROFS on a mkfs.erofs
    # metadata image + blob of the same tree, run beside the three in E1 and E2 (E3: the kernel
    # path through `squashd serve`; the EROFS reference has no service images).
    erofs = Erofs()
    if not erofs.skip_reason and images.erofs_unavailable():
        erofs.skip_reason = images.erofs_unavailable()
    variants = []
    for spec in args.kernel_variant:
        name, _, rest = spec.partition("=")
        binary, *env = rest.split("@")
        variants.append(SquashdKernel(os.path.abspath(binary), variant=name,
                                      env=dict(e.split("=", 1) for e in env)))
    # In E2 and E6 every --kernel-variant also runs on the FUSE path, as squashd_NAME (a
    # before/after pair of read paths in one run).
    fuse_variants = [Squashd(v.binary, name=f"squashd_{v.name.removeprefix('squashd_kernel_')}",
                             label=f"squashd, {v.name.removeprefix('squashd_kernel_')}") for v in variants]
    # --uring: both transports side by side in E1 and E2 (issue 27), the ring's as *_uring.
    uring_systems = []
    if args.uring:
        uring_systems = [Squashd(squashd, options=f"uring={args.uring}", name="squashd_uring",
                                 label=f"squashd, uring={args.uring}"),
                         SquashdKernel(squashd, variant="uring", extra_options=f"uring={args.uring}")]
    systems = [Kernel(), Squashfuse(args.squashfuse), Squashd(squashd), SquashdKernel(squashd), *variants,
               *uring_systems, erofs]
    by_name = {s.name: s for s in systems}
    for s in systems:
        log(f"{s.name}: " + (f"skipped: {s.skip_reason}" if s.skip_reason else f"{s.label} ({s.version})"))

    results = {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "mode": mode,
        "runs": args.runs,
        "command": "sudo " + (f"CARGO_TARGET_DIR={os.environ['CARGO_TARGET_DIR']} " if os.environ.get("CARGO_TARGET_DIR")
                              else "") + "python3 bench/run.py " + " ".join(sys.argv[1:]),
        "machine": machine_info(squashd),
        "systems": [{"name": s.name, "label": s.label, "version": s.version, "skip_reason": s.skip_reason}
                    for s in systems],
    }
    uring_was = _enable_uring() if args.uring in ("on", "auto") else None
    try:
        needed = [name for name, users in (("usr", {"E1", "E4", "E5", "E7"}), ("data", {"E2", "E4", "E5", "E7"}),
                                           ("services", {"E3", "E7"})) if users & only]
        results["images"] = images.build_all(mode, needed)
        usr, data, services = (results["images"].get(k) for k in ("usr", "data", "services"))
        if not erofs.skip_reason and only & {"E1", "E2"}:
            try:
                for key, want in (("usr", "E1"), ("data", "E2")):
                    if want in only:
                        ref = images.build_erofs(results["images"][key])
                        erofs.images[results["images"][key]["path"]] = ref
                        results["images"][f"erofs_{key}"] = ref
            except Exception as e:  # noqa: BLE001 - the others still run
                erofs.skip_reason = f"could not build the mkfs.erofs image: {e}"
                log(f"erofs: skipped: {erofs.skip_reason}")
            for entry in results["systems"]:
                if entry["name"] == "erofs":
                    entry["skip_reason"] = erofs.skip_reason
        empty = {"rows": {}, "skipped": {"all": "not run (--only)"}}
        results["E1"] = (experiments.e1_walks(systems, usr, ns, args.runs) if "E1" in only
                         else dict(empty, ns=ns, entries=None))
        if "E1" in only:
            pinned = Squashd(squashd, name="squashd_pinned", label="squashd, daemon and find on CPU 0", cpu=0)
            results["E1"]["same_cpu"] = experiments.e1_same_cpu(by_name["squashd"], pinned, usr, args.runs)
        # E2 also runs squashd with a data budget that holds the whole file: what the cache
        # buys once the page cache is dropped (the default budget, 256 MiB, holds a quarter).
        budget = f"{((data['file_bytes'] if data else 0) * 5 // 4) >> 20}MiB"
        big = Squashd(squashd, options=f"data_cache={budget}", name="squashd_big",
                      label=f"squashd, data_cache={budget}")
        for extra in [*fuse_variants, big]:
            results["systems"].append({"name": extra.name, "label": extra.label, "version": extra.version,
                                       "skip_reason": extra.skip_reason})
        results["E2"] = (experiments.e2_reads(systems + fuse_variants + [big], data, args.runs, 3 if args.quick else 10) if "E2" in only
                         else dict(empty, file_bytes=data["file_bytes"] if data else 0, random_runtime=0))
        results["E3"] = (experiments.e3_many([x for x in systems if x.name != "erofs" and x not in variants
                                              and x not in uring_systems],
                                             services, args.runs, uring=args.uring)
                         if "E3" in only
                         else dict(empty, count=services["count"] if services else 0))
        results["E4"] = (experiments.e4_offline(squashd, usr, data, ns, args.runs, 8 if args.quick else 2) if "E4" in only
                         else {"ls": {}, "extract": {}, "walk": {}, "split": [], "skipped": {"all": "not run"}})
        if "E5" in only:
            results["E5"] = e5_remote.e5_remote(squashd, args.squashfuse, usr, data, args.runs)
        if "E6" in only:
            e6_systems = ([x for x in systems if x.name != "erofs" and x not in variants and x not in uring_systems]
                          + fuse_variants + variants)
            results["E6"] = e6_start.e6_start(e6_systems, [1, 16], args.runs, experiments._mnt)
        if "E7" in only:
            results["E7"] = e7_verity.e7_verity(squashd, usr, data, services, args.runs, [1, 16])
    finally:
        if uring_was is not None:
            _restore_uring(uring_was)
        e5_servers.stop_all()
        cleanup()
        left = leftovers()
        if left:
            log(f"WARNING: left behind: {left}")
        results["left_behind"] = left
    finished = datetime.datetime.now(datetime.timezone.utc)
    results["machine"]["loadavg_end"] = _loadavg()
    results["duration_seconds"] = (finished - started).total_seconds()

    os.makedirs(args.out, exist_ok=True)
    stem = f"{started.strftime('%Y-%m-%d')}-{mode}"
    complete = {"E1", "E2", "E3", "E4"} <= only
    if not complete:
        stem += "-" + "".join(sorted(only)).lower()
    # A second run of the same kind on the same day gets -run2, -run3...: results already
    # written (and cited) are never overwritten.
    base, n = stem, 1
    while any(os.path.exists(os.path.join(args.out, base + (f"-run{n}" if n > 1 else "") + ext))
              for ext in (".json", ".md")):
        n += 1
    stem = base + (f"-run{n}" if n > 1 else "")
    with open(os.path.join(args.out, stem + ".json"), "w") as f:
        json.dump(results, f, indent=1)
    md = report.markdown(results)
    if "E5" in results:
        md += "\n" + e5_report.markdown(results["E5"])
    if "E6" in results:
        md += "\n" + e6_start.markdown(results["E6"])
    if "E7" in results:
        md += "\n" + e7_verity.markdown(results["E7"])
    if only & {"E1", "E2", "E3", "E4"}:
        try:
            report.plots(results, args.out, stem + "-")
            md = md.replace("](e", f"]({stem}-e")
        except ImportError:
            md += "\n(no plots: matplotlib is missing; scripts/setup.sh installs python3-matplotlib)\n"
    md += f"\nTotal run time: {results['duration_seconds'] / 60:.1f} min.\n"
    with open(os.path.join(args.out, stem + ".md"), "w") as f:
        f.write(md)
    # latest.*: the same files under a stable name for the README to point at; only for a
    # complete full run (a quick or partial run must not replace what the README shows).
    if mode != "full" or not complete:
        log(f"wrote {os.path.join(args.out, stem)}.md/.json and plots (latest.* left alone: not a complete full run); "
            f"total {results['duration_seconds'] / 60:.1f} min")
        return
    for suffix in (".json", "-e1.png", "-e2.png", "-e3.png", "-e4.png"):
        if os.path.exists(os.path.join(args.out, stem + suffix)):
            shutil.copy(os.path.join(args.out, stem + suffix), os.path.join(args.out, "latest" + suffix))
    with open(os.path.join(args.out, "latest.md"), "w") as f:
        f.write(md.replace(f"]({stem}-e", "](latest-e"))
    log(f"wrote {os.path.join(args.out, stem)}.md/.json and plots; total {results['duration_seconds'] / 60:.1f} min")


if __name__ == "__main__":
    main()
