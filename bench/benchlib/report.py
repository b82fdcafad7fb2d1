"""Turns the raw runs into a markdown report and PNG plots."""

import os

from .common import summary

ORDER = ["kernel", "squashfuse", "squashd", "squashd_uring", "squashd_big", "squashd_kernel", "erofs"]
COLORS = {"kernel": "#4c72b0", "squashfuse": "#dd8452", "squashd": "#55a868", "squashd_big": "#2e7d32",
          "squashd_uring": "#a1d99b",
          "squashd_kernel": "#c44e52", "erofs": "#937860", "unsquashfs": "#8172b3"}
# Extra builds or settings of the kernel path (`run.py --kernel-variant NAME=...`) are named
# squashd_kernel_NAME and shown right after squashd_kernel, in a colour of their own.
VARIANT_COLORS = ["#da8bc3", "#8c613c", "#64b5cd", "#ccb974"]


def _in_order(names):
    """`names` (systems of a section) in report order, kernel-path variants after squashd_kernel."""
    variants = sorted(n for n in names if n.startswith("squashd_kernel_"))
    out = []
    for s in ORDER:
        if s in names:
            out.append(s)
        if s == "squashd_kernel":
            out += variants
    return out


def _color(s):
    if s in COLORS:
        return COLORS[s]
    return VARIANT_COLORS[sum(map(ord, s)) % len(VARIANT_COLORS)]


def _fmt_s(st):
    if not st:
        return "-"
    return f"{st['median']:.3f} s ({st['min']:.3f}–{st['max']:.3f})"


def _ratio(a, b):
    if not a or not b or not b["median"]:
        return "-"
    return f"{a['median'] / b['median']:.2f}x"


def _skips(section):
    return [f"- {name}: skipped: {why}" for name, why in section.get("skipped", {}).items()]


def _labels(results):
    return {s["name"]: s["label"] for s in results["systems"]}


def markdown(results):
    label = _labels(results)
    m = results["machine"]
    img = results["images"]
    lines = [
        f"# squashd benchmark: {results['mode']} mode, {results['date']}",
        "",
        f"Machine: {m['cpu']}, {m['nproc']} cores, {m['memory_gib']:.1f} GiB RAM, kernel {m['kernel']}. "
        f"Load average at start {m.get('loadavg_start', '?')}, at end {m.get('loadavg_end', '?')}. "
        f"Tools: {m['mksquashfs']}; {m['unsquashfs']}; {m['fio']}; {m['squashfuse']}; {m['squashd']} (git {m['git']}).",
        "",
        f"Command: `{results['command']}`. Each figure is the median of {results['runs']} runs, "
        "with min–max in parentheses; ratios are medians divided, taken in the same run.",
        "",
        "Images (built by the suite on this machine; only those the experiments run need):",
        "",
    ]
    if "usr" in img:
        lines.append(f"- usr: `{img['usr']['command']}`: {img['usr']['built_from']}; "
                     f"image {img['usr']['image_bytes'] / 1e9:.2f} GB.")
    if "data" in img:
        lines.append(f"- data: `{img['data']['command']}`: {img['data']['built_from']}; "
                     f"image {img['data']['image_bytes'] / 1e6:.0f} MB.")
    if "services" in img:
        lines.append(f"- services: {img['services']['count']} images, {img['services']['image_bytes'] / 1e6:.0f} MB "
                     f"in all ({img['services']['smallest_bytes'] / 1024:.0f} KiB to "
                     f"{img['services']['largest_bytes'] / 2**20:.1f} MiB): {img['services']['built_from']}.")
    lines.append("")
    lines += _targets_md(results)
    # Experiments left out with --only get no section.
    for key, section in (("E1", _e1_md), ("E2", _e2_md), ("E3", _e3_md), ("E4", lambda e, _label: _e4_md(e))):
        if "all" not in results[key].get("skipped", {}):
            lines += section(results[key], label)
    return "\n".join(lines) + "\n"


def _med(values):
    st = summary(values)
    return st["median"] if st else None


def _targets_md(results):
    """Issue 15's performance targets for squashd's kernel path, each against what this run
    measured (ratios of medians taken in this run)."""
    e1, e2, e3 = results["E1"], results["E2"], results["E3"]
    rows = []

    def e1_ratio(phase, n, base):
        r = e1["rows"]
        if "squashd_kernel" not in r or base not in r:
            return None
        a, b = _med(r["squashd_kernel"][phase].get(str(n), [])), _med(r[base][phase].get(str(n), []))
        return a / b if a and b else None

    def e2_ratio(kind, key):
        r = e2["rows"]
        if "squashd_kernel" not in r or "kernel" not in r:
            return None
        a, b = _med([x[key] for x in r["squashd_kernel"][kind]]), _med([x[key] for x in r["kernel"][kind]])
        return a / b if a and b else None

    def row(what, value, fmt, ok):
        if value is None:
            rows.append(f"| {what} | not measured | - |")
        else:
            rows.append(f"| {what} | {fmt.format(value)} | {'met' if ok(value) else '**missed**'} |")

    row("E1 cold N=1: ≤ 0.6x kernel squashfs", e1_ratio("cold", 1, "kernel"), "{:.2f}x", lambda v: v <= 0.6)
    row("E1 cold N=16: ≤ 0.5x kernel squashfs", e1_ratio("cold", 16, "kernel"), "{:.2f}x", lambda v: v <= 0.5)
    row("E1 warm N=16: ≤ 0.45x kernel squashfs", e1_ratio("warm", 16, "kernel"), "{:.2f}x", lambda v: v <= 0.45)
    row("E1 warm N=16: ≤ 1.1x the mkfs.erofs image", e1_ratio("warm", 16, "erofs"), "{:.2f}x", lambda v: v <= 1.1)
    infos = (e1.get("mount") or {}).get("squashd_kernel") or []
    tr = [i["translation"]["seconds"] for i in infos if i.get("translation")]
    row("translation of usr: ≤ 0.5 s", _med(tr), "{:.3f} s", lambda v: v <= 0.5)
    hwm = [i["daemon_hwm_bytes"] / 2**20 for i in infos if i.get("daemon_hwm_bytes")]
    row("translation of usr: ≤ 64 MiB peak memory (daemon's VmHWM after mounting, an upper bound)",
        _med(hwm), "{:.1f} MiB", lambda v: v <= 64)
    row("E2 sequential cold: ≥ 1.5x kernel squashfs bandwidth", e2_ratio("seq_cold", "bw_bytes"), "{:.2f}x",
        lambda v: v >= 1.5)
    row("E2 random 4 KiB: ≥ 1.5x kernel squashfs IOPS", e2_ratio("rand_4k", "iops"), "{:.2f}x", lambda v: v >= 1.5)
    r3 = e3["rows"]
    ratio3 = None
    if "squashd_kernel" in r3 and "kernel" in r3:
        a, b = _med(r3["squashd_kernel"]["seconds"]), _med(r3["kernel"]["seconds"])
        ratio3 = a / b if a and b else None
    row("E3 (serve, kernel path): ≤ 0.3x the kernel's loop-mount time", ratio3, "{:.2f}x", lambda v: v <= 0.3)
    rss = [b / 2**20 for b in r3.get("squashd_kernel", {}).get("memory_bytes", [])]
    row("E3: daemon RSS ≤ 25 MiB after walking all", _med(rss), "{:.1f} MiB", lambda v: v <= 25)
    loops = (e3.get("loop_devices") or {}).get("squashd_kernel")
    row("E3: no loop device created", max(loops) if loops else None, "{} loop devices", lambda v: v == 0)
    if all("not measured" in r for r in rows):
        return []
    note = (" Quick mode: smaller usr and data images, so these are indicative only; the targets are for the "
            "full images." if results["mode"] == "quick" else "")
    return ["## Targets of issue 15 (squashd's kernel path)", "",
            "Ratios of medians taken in this run (squashd's kernel path over the kernel's squashfs, or over the "
            "mkfs.erofs reference)." + note, "",
            "| target | measured | |", "|---|---|---|", *rows, ""]


def _e1_md(e1, label):
    out = ["## E1: parallel `find` walks of usr", "",
           f"N concurrent `find MNT -print > /dev/null`; cold = fresh mount after drop_caches, warm = the same "
           f"N again on that mount. {e1.get('entries') or '?'} entries.", ""]
    systems = _in_order(e1["rows"])
    if systems:
        head = "| N | " + " | ".join(label[s] for s in systems)
        ratios = [("squashd", "kernel"), ("squashd", "squashfuse"), ("squashd_uring", "kernel"),
                  ("squashd_uring", "squashd"), ("squashd_kernel", "kernel"), ("erofs", "kernel"),
                  ("squashd_kernel", "erofs")]
        ratios = [r for r in ratios if r[0] in systems and r[1] in systems]
        head += "".join(f" | {a}/{b}" for a, b in ratios) + " |"
        out += [head, "|" + "---|" * (1 + len(systems) + len(ratios))]
        for phase in ("cold", "warm"):
            for n in e1["ns"]:
                st = {s: summary(e1["rows"][s][phase][str(n)]) for s in systems}
                row = f"| {n} {phase} | " + " | ".join(_fmt_s(st[s]) for s in systems)
                row += "".join(f" | {_ratio(st[a], st[b])}" for a, b in ratios) + " |"
                out.append(row)
        out.append("")
    out += _mount_md(e1.get("mount", {}).get("squashd_kernel"), "squashd_kernel")
    same = e1.get("same_cpu")
    if same and any(same["rows"].values()):
        out += ["One cold `find` (N=1) again, then with the daemon and `find` held on the same CPU "
                "(`taskset -c 0`), so that no FUSE round trip wakes the other CPU:", "",
                "| | cold N=1 | FUSE requests |", "|---|---|---|"]
        for name, times in same["rows"].items():
            out.append(f"| {name} | {_fmt_s(summary(times))} | {same['requests'].get(name, '-')} |")
        out.append("")
    out += _counters_md(e1.get("counters", {}).get("squashd"), ["after_cold", "after_warm"],
                        "squashd's counters for the last run of each N (from `squashd status --json` on the "
                        "mount's control socket), after the cold walks and again after the warm ones:")
    out += _counters_md(e1.get("counters", {}).get("squashd_kernel"), ["after_cold", "after_warm"],
                        "squashd's kernel path, the same counters (requests = blob reads that reached squashd; "
                        "a walk should need none):")
    out += _skips(e1) + ["", "![E1](e1.png)", ""] if _skips(e1) else ["![E1](e1.png)", ""]
    return out


def _mount_md(infos, name):
    """squashd's kernel path: time from `squashd mount` to the mount answering, and what the
    translation gave (from `status --json`), over every mount of the experiment."""
    if not infos:
        return []
    tr = [i["translation"] for i in infos if i.get("translation")]
    out = [f"{name}: `squashd mount IMG MNT -o kernel,control=SOCK` until it returns (it returns once the mount "
           f"answers), and the translation as `squashd status --json` reports it, over {len(infos)} mounts:", "",
           "| mount command until the mount answers | translation time | inodes | metadata image | blob (virtual) "
           "| engine |", "|---|---|---|---|---|---|"]
    engines = sorted({str(i.get("engine")) for i in infos})
    if tr:
        out.append(f"| {_fmt_s(summary([i['mount_seconds'] for i in infos]))} | "
                   f"{_fmt_s(summary([t['seconds'] for t in tr]))} | {tr[-1]['inodes']} | "
                   f"{tr[-1]['metadata_bytes'] / 2**20:.1f} MiB | {tr[-1]['blob_bytes'] / 1e9:.2f} GB | "
                   f"{', '.join(engines)} |")
    else:
        out.append(f"| {_fmt_s(summary([i['mount_seconds'] for i in infos]))} | (not reported) | - | - | - | "
                   f"{', '.join(engines)} |")
    return out + [""]


def _counters_md(by_key, phases, intro):
    """A table of squashd's cache counters: `by_key` maps a row name (N, or nothing) to
    {phase: ImageStatus}."""
    if not by_key:
        return []
    if "image" in next(iter(by_key.values())) or phases[0] in by_key:
        by_key = {"": by_key}
    out = [intro, "", "| | after | FUSE requests served | metadata decompressions | metadata hit ratio | "
           "data decompressions | data hit ratio | bytes read from the image |", "|---|---|---|---|---|---|---|---|"]
    for key, per_phase in by_key.items():
        for phase in phases:
            st = (per_phase or {}).get(phase)
            if not st:
                continue
            md, dd = st["cache"]["metadata"], st["cache"]["data"]
            out.append(f"| {key} | {phase.removeprefix('after_').replace('_', ' ')} | {st.get('requests', '-')} | "
                       f"{md['loads']} | "
                       f"{md['hit_ratio'] * 100:.2f}% | {dd['loads']} | {dd['hit_ratio'] * 100:.2f}% | "
                       f"{st['bytes_read'] / 2**20:.1f} MiB |")
    return out + [""]


def _e2_md(e2, label):
    out = ["## E2: reads of the 1 GiB file" if e2["file_bytes"] >= 1 << 30 else
           f"## E2: reads of a {e2['file_bytes'] >> 20} MiB file", "",
           "`fio --ioengine=psync --iodepth=1 --numjobs=1`: 128 KiB sequential cold (fresh mount, drop_caches), "
           "again with `--invalidate=1`, warm (`--invalidate=0`); 4 KiB random reads: three passes of "
           f"fio's random map (`--loops=3`), stopped at {3 * e2['random_runtime']} s.", ""]
    systems = _in_order(e2["rows"])
    ours = [s for s in systems if (s in ("squashd", "squashd_uring", "squashd_big", "squashd_kernel", "erofs")
                                   or s.startswith("squashd_kernel_")) and "kernel" in systems]
    if systems:
        out += ["| | " + " | ".join(label[s] for s in systems) + "".join(f" | {label[s]} / kernel" for s in ours)
                + " |", "|" + "---|" * (1 + len(systems) + len(ours))]
        names = {"seq_cold": "sequential cold", "seq_invalidated": "sequential invalidated",
                 "seq_warm": "sequential warm", "rand_4k": "random 4 KiB"}
        for k, name in names.items():
            cells, med = [], {}
            for s in systems:
                if k == "rand_4k":
                    st = summary([x["iops"] for x in e2["rows"][s][k]])
                    cells.append(f"{st['median'] / 1000:.1f}k IOPS ({st['min'] / 1000:.1f}–{st['max'] / 1000:.1f}k)")
                else:
                    st = summary([x["bw_bytes"] / 2**20 for x in e2["rows"][s][k]])
                    cells.append(f"{st['median']:.0f} MiB/s ({st['min']:.0f}–{st['max']:.0f})")
                med[s] = st["median"] if st else None
            cells += [f"{med[s] / med['kernel']:.2f}x" if med.get(s) and med.get("kernel") else "-" for s in ours]
            out.append(f"| {name} | " + " | ".join(cells) + " |")
        out.append("")
    mem = e2.get("memory", {})
    msys = [s for s in _in_order(e2["rows"]) if s in mem]
    if msys:
        out += [f"Memory after the sequential cold read of the whole file ({e2['file_bytes'] >> 20} MiB; fresh mount, "
                "drop_caches just before): growth of `Cached` in /proc/meminfo, and the RSS of the serving "
                "processes (data cached once = page cache about the file's size, daemon small):", "",
                "| | page cache growth (whole machine: other work adds noise) | serving processes' RSS "
                "| the file's pages cached (cachestat) | backing files' pages cached (cachestat, last run) |",
                "|---|---|---|---|---|"]
        for s in msys:
            c = summary([m["cached_delta_bytes"] / 2**20 for m in mem[s]])
            r = summary([m["daemon_rss_bytes"] / 2**20 for m in mem[s] if m.get("daemon_rss_bytes") is not None])
            fc = summary([m["file_cached_bytes"] / 2**20 for m in mem[s] if m.get("file_cached_bytes") is not None])
            back = mem[s][-1].get("backing_cached_bytes") or {}
            back_txt = "; ".join(f"{k} {v / 2**20:.0f} MiB" if v is not None else f"{k} ?" for k, v in back.items())
            out.append(f"| {label[s]} | {c['median']:.0f} MiB ({c['min']:.0f}–{c['max']:.0f}) | "
                       + (f"{r['median']:.1f} MiB ({r['min']:.1f}–{r['max']:.1f})" if r else "- (kernel)") + " | "
                       + (f"{fc['median']:.0f} MiB" if fc else "?") + f" | {back_txt or '-'} |")
        out.append("")
        after = [(s, mem[s][-1]) for s in msys if "backing_cached_after_rand_bytes" in mem[s][-1]]
        if after:
            out += ["After the random reads (last run): the file's pages cached, and what the mount reads from "
                    "(cachestat(2), which unlike fincore does not drop a direct-I/O FUSE file's cache to look); for squashd's kernel path the blob should hold none (its data lives once, in "
                    "EROFS's page cache).", "",
                    "| | the file's pages cached | backing files' pages cached | the blob's, as `status` shows it |",
                    "|---|---|---|---|"]
            for s, m in after:
                fc = m.get("file_cached_after_rand_bytes")
                back = m["backing_cached_after_rand_bytes"]
                shown = m.get("status_blob_cached_bytes", "-")
                shown = f"{shown / 2**20:.0f} MiB" if isinstance(shown, int) else ("?" if shown is None else shown)
                out.append(f"| {label[s]} | " + (f"{fc / 2**20:.0f} MiB" if fc is not None else "?") + " | "
                           + ("; ".join(f"{k} {v / 2**20:.0f} MiB" if v is not None else f"{k} ?"
                                        for k, v in back.items()) or "-") + f" | {shown} |")
            out.append("")
    out += _mount_md(e2.get("mount", {}).get("squashd_kernel"), "squashd_kernel")
    for key in ("squashd", "squashd_big", "squashd_kernel"):
        if key not in label:
            continue
        out += _counters_md(e2.get("counters", {}).get(key),
                            ["after_seq_cold", "after_seq_invalidated", "after_seq_warm", "after_rand_4k"],
                            f"{label[key]}: counters in the last run (cumulative over the mount, read after each "
                            "fio run; one data block is 128 KiB):")
    return out + _skips(e2) + ["", "![E2](e2.png)", ""]


def _e3_md(e3, label):
    out = [f"## E3: {e3['count']} service images", "",
           "All mounted at once after drop_caches, each root listed (in the harness's process) once its mount "
           "is up: time until all are listed; memory after "
           "walking every image once (FUSE: RSS sum of the serving processes; kernel: slab growth).", ""]
    systems = _in_order(e3["rows"])
    if systems:
        out += ["| | " + " | ".join(label[s] for s in systems) + " |", "|" + "---|" * (1 + len(systems))]
        out.append("| time to all mounted and listed | " + " | ".join(
            _fmt_s(summary(e3["rows"][s]["seconds"])) for s in systems) + " |")
        cells = []
        for s in systems:
            st = summary([b / 2**20 for b in e3["rows"][s]["memory_bytes"]])
            procs = max(e3["rows"][s]["processes"] or [0])
            what = "slab" if s == "kernel" else f"RSS, {procs} process(es)"
            cells.append(f"{st['median']:.1f} MiB {what}")
        out.append("| memory after walking every image | " + " | ".join(cells) + " |")
        ready = e3.get("ready_seconds", {})
        if ready:
            out.append("| time to READY=1 (serve) | " + " | ".join(
                _fmt_s(summary(ready[s])) if s in ready else "-" for s in systems) + " |")
        loops = e3.get("loop_devices", {})
        if loops:
            out.append("| loop devices created (max over runs) | " + " | ".join(
                str(max(loops[s])) if loops.get(s) else ("0" if s in loops else "-") for s in systems) + " |")
        if "kernel" in systems:
            k = summary(e3["rows"]["kernel"]["seconds"])
            out.append("| time / kernel's | " + " | ".join(
                _ratio(summary(e3["rows"][s]["seconds"]), k) for s in systems) + " |")
        out.append("")
        out += [f"- {name}: {how}" for name, how in e3.get("how", {}).items()]
        for name, eng in (e3.get("engines") or {}).items():
            out.append(f"- {name}: engines per `squashd status --json` (last run): "
                       + ", ".join(f"{v} {k}" for k, v in sorted(eng.items())))
        for name, slab in (e3.get("slab_bytes") or {}).items():
            st = summary([b / 2**20 for b in slab])
            out.append(f"- {name}: slab growth meanwhile {st['median']:.1f} MiB (the kernel's EROFS inodes and "
                       "dentries; not in the RSS above)")
        for name in ("squashd", "squashd_kernel"):
            c = (e3.get("counters") or {}).get(name)
            if not c:
                continue
            out += [f"- {name}'s counters after walking every image (last run, `squashd status --json`): "
                    f"{c['requests']} FUSE requests served, {c['metadata_loads']} metadata and {c['data_loads']} "
                    f"data decompressions, {c['bytes_read'] / 2**20:.1f} MiB read from {c['images']} images; "
                    f"shared cache hit ratios {(c['metadata_hit_ratio'] or 0) * 100:.1f}% (metadata), "
                    f"{(c['data_hit_ratio'] or 0) * 100:.1f}% (data); budget {c['budget_bytes'] / 2**20:.0f} MiB."]
    return out + _skips(e3) + ["", "![E3](e3.png)", ""]


def _e4_md(e4):
    out = ["## E4: offline tools and in-process walks", "",
           "Caches dropped before each run; extraction into the same file system, output removed between runs. "
           "*usr (fresh ext4)*: the same extraction of usr into a new ext4 (mkfs.ext4 defaults, on a sparse file "
           "in the work directory through a loop device with direct I/O) for every run of either tool: no run "
           "then allocates inodes among the ~180k that the previous run's output freed seconds before, which ext4 "
           "without a journal scans past for minutes (`recently_deleted` in fs/ext4/ialloc.c).", "",
           "| | time | max RSS | squashd / unsquashfs |", "|---|---|---|---|"]

    def rows(table, base, ours, what):
        b = summary(table.get(base, {}).get("seconds", []))
        o = summary(table.get(ours, {}).get("seconds", []))
        for name, st in ((base, b), (ours, o)):
            if st:
                rss = max(table[name]["max_rss_bytes"]) / 2**20
                ratio = _ratio(o, b) if name == ours else ""
                out.append(f"| `{name}` {what} | {_fmt_s(st)} | {rss:.0f} MiB | {ratio} |")

    rows(e4["ls"], "unsquashfs -lls", "squashd ls -R -l", "usr")
    for key, ex in e4["extract"].items():
        rows(ex["rows"], "unsquashfs -d", "squashd extract -d", key)
    out.append("")
    if e4["walk"]:
        out += ["`squashd walk usr --threads N --warmup`: N threads each walk the whole tree (read_dir_plus: every "
                "directory listed with the inodes of its entries), page cache warm, squashd's caches cold.", "",
                "| N | wall time | walks/s | metadata decompressions per block | hit ratio | wait time |",
                "|---|---|---|---|---|---|"]
        for n, runs in e4["walk"].items():
            st = summary([r["wall_seconds"] for r in runs])
            last = runs[-1]
            out.append(f"| {n} | {_fmt_s(st)} | {int(n) / st['median']:.1f} | "
                       f"{last['decompressions_per_metadata_block']} | {last['metadata']['hit_ratio'] * 100:.2f}% | "
                       f"{last['metadata']['wait_seconds']:.3f} s |")
        out.append("")
    if e4["split"]:
        sp = summary([r["speedup"] for r in e4["split"]])
        last = e4["split"][-1]
        serial, par = last["phases"]
        walks = par["threads"] * par["walks_per_thread"]
        out += [f"`squashd walk usr --threads {par['threads']} --repeat {par['walks_per_thread']} --split`: "
                f"the same total work ({walks} walks): 1 thread doing all of them vs {par['threads']} threads "
                f"doing {par['walks_per_thread']} each: speedup {sp['median']:.2f}x ({sp['min']:.2f}–{sp['max']:.2f}); serial "
                f"{serial['wall_seconds']:.3f} s, parallel {par['wall_seconds']:.3f} s (last run); "
                f"{par['metadata']['loads']} metadata decompressions for {par['distinct_metadata_blocks']} distinct "
                f"blocks ({par['decompressions_per_metadata_block']} per block), "
                f"{par['bytes_read'] / 2**20:.1f} MiB read from the image.", ""]
    return out + _skips(e4) + ["", "![E4](e4.png)", ""]


def plots(results, out_dir, prefix):
    """Writes e1..e4 PNGs; returns their paths. Needs matplotlib (python3-matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    label = _labels(results)
    paths = []

    def save(fig, name):
        p = os.path.join(out_dir, f"{prefix}{name}.png")
        fig.tight_layout()
        fig.savefig(p, dpi=80)
        plt.close(fig)
        paths.append(p)

    e1 = results["E1"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, phase in zip(axes, ("cold", "warm")):
        for s in ORDER:
            if s not in e1["rows"]:
                continue
            st = [summary(e1["rows"][s][phase][str(n)]) for n in e1["ns"]]
            med = [x["median"] for x in st]
            err = [[x["median"] - x["min"] for x in st], [x["max"] - x["median"] for x in st]]
            ax.errorbar(e1["ns"], med, yerr=err, marker="o", capsize=3, label=label[s], color=_color(s))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(e1["ns"], [str(n) for n in e1["ns"]])
        ax.set_xlabel("concurrent find processes (N)")
        ax.set_title(f"E1 {phase}: time until all N finds end")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("seconds (log scale, lower is better)")
    axes[0].legend()
    save(fig, "e1")

    e2 = results["E2"]
    systems = _in_order(e2["rows"])
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [3, 1.3]})
    kinds = [("seq_cold", "cold"), ("seq_invalidated", "invalidated"), ("seq_warm", "warm")]
    width = 0.8 / max(1, len(systems))
    for i, s in enumerate(systems):
        meds = [summary([x["bw_bytes"] / 2**20 for x in e2["rows"][s][k]])["median"] for k, _ in kinds]
        bars = a.bar([j + i * width for j in range(len(kinds))], meds, width, label=label[s], color=_color(s))
        a.bar_label(bars, fmt="%.0f", fontsize=8)
        iops = summary([x["iops"] for x in e2["rows"][s]["rand_4k"]])["median"]
        b.bar_label(b.bar(i, iops / 1000, color=_color(s)), fmt="%.1fk", fontsize=8)
    a.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(kinds))], [n for _, n in kinds])
    a.set_yscale("log")
    a.set_ylabel("MiB/s (log scale, higher is better)")
    a.set_title("E2: 128 KiB sequential reads")
    a.legend()
    b.set_xticks(range(len(systems)), [s for s in systems], rotation=30, fontsize=7)
    b.set_ylabel("thousand IOPS")
    b.set_title("E2: 4 KiB random reads")
    save(fig, "e2")

    e3 = results["E3"]
    systems = _in_order(e3["rows"])
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.6))
    for i, s in enumerate(systems):
        st = summary(e3["rows"][s]["seconds"])
        a.bar_label(a.bar(i, st["median"], yerr=[[st["median"] - st["min"]], [st["max"] - st["median"]]],
                          capsize=4, color=_color(s)), fmt="%.2f s", fontsize=8, label_type="center")
        b.bar_label(b.bar(i, summary(e3["rows"][s]["memory_bytes"])["median"] / 2**20, color=_color(s)),
                    fmt="%.0f MiB", fontsize=8)
    a.set_xticks(range(len(systems)), systems, fontsize=7)
    a.set_ylabel("seconds")
    a.set_title(f"E3: {e3['count']} images mounted + listed")
    b.set_xticks(range(len(systems)), [s + (" (slab)" if s == "kernel" else " (RSS)") for s in systems],
                 fontsize=7)
    b.set_ylabel("MiB")
    b.set_title("E3: memory after walking all")
    save(fig, "e3")

    e4 = results["E4"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    groups = [("ls -R -l\nusr", e4["ls"], "unsquashfs -lls", "squashd ls -R -l")]
    groups += [(f"extract\n{k}", ex["rows"], "unsquashfs -d", "squashd extract -d") for k, ex in e4["extract"].items()]
    for j, (name, table, base, ours) in enumerate(groups):
        for i, (tool, color) in enumerate(((base, COLORS["unsquashfs"]), (ours, COLORS["squashd"]))):
            if tool in table:
                st = summary(table[tool]["seconds"])
                a.bar(j + i * 0.4, st["median"], 0.4, color=color,
                      yerr=[[st["median"] - st["min"]], [st["max"] - st["median"]]], capsize=3,
                      label=("unsquashfs" if i == 0 else "squashd") if j == 0 else None)
    a.set_xticks([j + 0.2 for j in range(len(groups))], [g[0] for g in groups])
    a.set_ylabel("seconds (caches dropped)")
    a.set_title("E4: offline tools")
    a.legend()
    if e4["walk"]:
        ns = [int(n) for n in e4["walk"]]
        meds = [summary([r["wall_seconds"] for r in e4["walk"][str(n)]])["median"] for n in ns]
        b.plot(ns, [n / m for n, m in zip(ns, meds)], marker="o", color=COLORS["squashd"])
        b.set_xscale("log", base=2)
        b.set_xticks(ns, [str(n) for n in ns])
        b.set_xlabel("threads, each walking the whole tree")
        b.set_ylabel("whole-tree walks per second")
        b.set_title("E4: squashd walk (in-process)")
        b.grid(True, alpha=0.3)
    save(fig, "e4")
    return paths
