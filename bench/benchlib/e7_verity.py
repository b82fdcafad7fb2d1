"""E7, verified images (issue 26's performance targets): what checking every block against a
dm-verity hash tree costs squashd, against the same reads unverified and against
`veritysetup verify`.

Trees: `veritysetup format IMAGE bench/work/e7/NAME.verity` (sha256, 4 KiB blocks, with its
superblock) for usr, data and the 69 service images, kept with their root hashes in
`bench/work/e7/trees.json` and reused while the image is the same (path, size, mtime). They lie
apart from the images, given by `verity_data=` and `roothash=`, so that the other experiments,
which mount the same images with `verity=auto`, find nothing beside them and stay unverified.

(a) `squashd verify` of usr against `veritysetup verify` of the same image and tree, page cache
    warm for both (image and tree read once first): hashing, not the disk. Wall and CPU time.
(b) fio's sequential cold read (E2's: psync, 128 KiB) of data's file, with verity and without,
    on squashd's FUSE path and its kernel path: fresh mount, drop_caches, one read.
(c) cold walks of usr (E1's: fresh mount, drop_caches, N concurrent `find`), with and without.
(d) E3 with every image verified and without: one `squashd serve` daemon for the 69 service
    images, time until every root is listed (after drop_caches), then every image walked once
    (timed), and the daemon's RSS; FUSE and kernel path.

Runs alternate the variants; the report gives medians and min-max, and ratios of medians beside
the issue's targets.
"""

import json
import os
import resource
import subprocess
import time

from .common import WORK_DIR, drop_caches, log, parallel_commands, run, summary
from .mounts import ServeDaemon, Squashd, SquashdKernel, _live_mounts, mounted

E7_DIR = os.path.join(WORK_DIR, "e7")
TREES = os.path.join(E7_DIR, "trees.json")
TARGETS = {
    "verify": ("squashd verify / veritysetup verify (wall)", "<=", 0.5),
    "seq": ("sequential cold read, verified / unverified (bandwidth)", ">=", 0.9),
    "walk": ("cold walk, verified / unverified (time)", "<=", 1.1),
    "e3": ("E3, every image verified / unverified (time)", "<=", 1.1),
}


def _identity(image):
    st = os.stat(image)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def trees(paths):
    """Each image's tree and root hash: `veritysetup format`, reused while the image is the same."""
    os.makedirs(E7_DIR, exist_ok=True)
    try:
        with open(TREES) as f:
            known = json.load(f)
    except (OSError, ValueError):
        known = {}
    out = {}
    for image in paths:
        entry = known.get(image)
        tree = os.path.join(E7_DIR, os.path.basename(os.path.dirname(image)) + "-"
                            + os.path.basename(image) + ".verity")
        if not (entry and entry.get("image") == _identity(image) and os.path.exists(entry["tree"])):
            p = run(["veritysetup", "format", image, tree])
            root = next(line.split(":", 1)[1].strip() for line in p.stdout.splitlines()
                        if line.startswith("Root hash:"))
            entry = {"image": _identity(image), "tree": tree, "root": root,
                     "command": f"veritysetup format {image} {tree}"}
            known[image] = entry
            with open(TREES, "w") as f:
                json.dump(known, f, indent=1)
        out[image] = entry
    return out


def verity_options(entry):
    """The mount options that verify an image against its tree."""
    return f"verity=require,verity_data={entry['tree']},roothash={entry['root']}"


class _KernelPath(SquashdKernel):
    """squashd's kernel path with more mount options (SquashdKernel mounts with `kernel` alone)."""

    def __init__(self, binary, extra, name, label):
        super().__init__(binary)
        self.extra, self.name, self.label = extra, name, label

    def mount(self, image, mnt):
        start = time.perf_counter()
        run([self.binary, "mount", image, mnt, "-o", f"kernel,control={self._socket(mnt)},{self.extra}"])
        self.last_mount_seconds = time.perf_counter() - start
        if not mounted(mnt):
            raise RuntimeError(f"squashd mount -o kernel returned but {mnt} is not mounted")


def _variants(binary, entry):
    """(path, verified, system) for the FUSE path and the kernel path, unverified and verified."""
    on = verity_options(entry)
    out = []
    for verified, extra in ((False, "verity=off"), (True, on)):
        tag = "verity" if verified else "plain"
        out.append(("fuse", verified, Squashd(binary, options=extra, name=f"squashd_{tag}",
                                              label=f"squashd FUSE, {tag}")))
        out.append(("kernel", verified, _KernelPath(binary, extra, f"squashd_kernel_{tag}",
                                                    f"squashd kernel path, {tag}")))
    return out


def _runnable(binary, entry, out):
    """(key, path, verified, system) of the variants still to run: one skipped or failed before
    is recorded in out["skipped"] once and not tried again."""
    for path, verified, s in _variants(binary, entry):
        key = f"{path}_{'verity' if verified else 'plain'}"
        if s.skip_reason or key in out["skipped"]:
            out["skipped"].setdefault(key, s.skip_reason)
            continue
        yield key, path, verified, s


def _mnt(name):
    path = os.path.join(WORK_DIR, "mnt", name)
    os.makedirs(path, exist_ok=True)
    return path


def _timed_child(cmd):
    """(wall seconds, CPU seconds user + system) of a command run to its end; raises if it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-300:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _warm(*paths):
    for path in paths:
        with open(path, "rb") as f:
            while f.read(1 << 20):
                pass


def verify(binary, usr, entry, runs):
    """(a): `squashd verify` against `veritysetup verify`, page cache warm."""
    out = {"image": usr["path"], "image_bytes": os.path.getsize(usr["path"]), "rows": {}}
    cmds = {
        "veritysetup": ["veritysetup", "verify", usr["path"], entry["tree"], entry["root"]],
        "squashd": [binary, "verify", usr["path"], "--verity-data", entry["tree"], "--roothash", entry["root"]],
    }
    out["commands"] = {k: " ".join(v) for k, v in cmds.items()}
    _warm(usr["path"], entry["tree"])
    for r in range(runs):
        for name, cmd in cmds.items():
            wall, cpu = _timed_child(cmd)
            row = out["rows"].setdefault(name, {"wall": [], "cpu": []})
            row["wall"].append(wall)
            row["cpu"].append(cpu)
            log(f"E7 verify run {r + 1}/{runs} {name:12s} {wall:6.2f} s wall, {cpu:6.2f} s CPU")
    return out


def seq_reads(binary, data, entry, runs):
    """(b): one cold sequential fio read of data's file per mount, verified and not."""
    from .experiments import _fio
    out = {"image": data["path"], "file_bytes": data["file_bytes"], "rows": {}, "skipped": {}}
    for r in range(runs):
        for key, path, verified, s in _runnable(binary, entry, out):
            try:
                with s.mounted_at(data["path"], _mnt(f"e7-{s.name}")) as mnt:
                    drop_caches()
                    res = _fio(os.path.join(mnt, data["file"]), data["file_bytes"], "read", "128k", 1)
                    counters = s.counters(mnt) or {}
            except Exception as e:  # noqa: BLE001 - the other variants still run
                out["skipped"][key] = f"failed: {e}"
                continue
            out["rows"].setdefault(key, []).append(res["bw_bytes"])
            # That the verified mount did check: its blocks checked, none failed.
            out.setdefault("verified_blocks", {})[key] = (counters.get("verity") or {}).get("verified_blocks")
            if verified and counters.get("verity_failures"):
                out["skipped"][key] = f"verity failures: {counters['verity_failures']}"
            log(f"E7 seq run {r + 1}/{runs} {key:14s} {res['bw_bytes'] / 2**20:7.0f} MiB/s")
    return out


def walks(binary, usr, entry, ns, runs):
    """(c): cold walks of usr, N concurrent `find`, verified and not."""
    out = {"image": usr["path"], "ns": ns, "rows": {}, "skipped": {}}
    for r in range(runs):
        for n in ns:
            for key, path, verified, s in _runnable(binary, entry, out):
                try:
                    with s.mounted_at(usr["path"], _mnt(f"e7-{s.name}")) as mnt:
                        drop_caches()
                        seconds = parallel_commands([["find", mnt, "-print"]] * n)
                except Exception as e:  # noqa: BLE001
                    out["skipped"][key] = f"failed: {e}"
                    continue
                out["rows"].setdefault(key, {}).setdefault(str(n), []).append(seconds)
                log(f"E7 walk run {r + 1}/{runs} N={n:2d} {key:14s} {seconds:7.3f} s")
    return out


def many(binary, services, entries, runs):
    """(d): E3 with every image verified and without, FUSE and kernel path."""
    images = services["images"]
    out = {"count": len(images), "rows": {}, "skipped": {}}
    for r in range(runs):
        for path in ("fuse", "kernel"):
            for verified in (False, True):
                key = f"{path}_{'verity' if verified else 'plain'}"
                if key in out["skipped"]:
                    continue
                pairs = [(img, _mnt(f"e7-e3-{key}/{i:02d}")) for i, img in enumerate(images)]
                prefix = "kernel," if path == "kernel" else ""
                options = {img: prefix + (verity_options(entries[img]) if verified else "verity=off")
                           for img in images}
                daemon = None
                try:
                    drop_caches()
                    start = time.perf_counter()
                    daemon = ServeDaemon(binary, pairs, options=options)
                    daemon.start()
                    for _, mnt in pairs:
                        if not os.listdir(mnt):
                            raise RuntimeError(f"{mnt}: the root lists empty")
                    seconds = time.perf_counter() - start
                    walk = parallel_commands([["find", m, "-print"] for _, m in pairs])
                    rss = daemon.rss()
                except Exception as e:  # noqa: BLE001
                    out["skipped"][key] = f"failed: {e}"
                    continue
                finally:
                    if daemon:
                        daemon.stop()
                        for _, m in pairs:
                            if mounted(m):
                                daemon.unmounter.unmount(m)
                            _live_mounts.discard((daemon.unmounter, m))
                row = out["rows"].setdefault(key, {"seconds": [], "walk_seconds": [], "rss_bytes": []})
                row["seconds"].append(seconds)
                row["walk_seconds"].append(walk)
                row["rss_bytes"].append(rss)
                log(f"E7 E3 run {r + 1}/{runs} {key:14s} {seconds:6.3f} s to list, walk {walk:6.3f} s, "
                    f"RSS {rss / 2**20:.1f} MiB")
    return out


def e7_verity(binary, usr, data, services, runs, ns):
    """E7: every part, with the trees made (or reused) first."""
    if not binary or not os.path.exists(binary):
        return {"skipped": f"no squashd binary at {binary}"}
    if subprocess.run(["veritysetup", "--version"], capture_output=True).returncode != 0:
        return {"skipped": "veritysetup not found (Debian package cryptsetup-bin)"}
    paths = [usr["path"], data["path"], *services["images"]]
    log(f"E7: hash trees of {len(paths)} images (veritysetup format, reused while the images are the same)")
    entries = trees(paths)
    out = {"runs": runs, "trees": {p: {k: entries[p][k] for k in ("tree", "root")} for p in paths[:2]}}
    out["verify"] = verify(binary, usr, entries[usr["path"]], runs)
    out["seq"] = seq_reads(binary, data, entries[data["path"]], runs)
    out["walk"] = walks(binary, usr, entries[usr["path"]], ns, runs)
    out["e3"] = many(binary, services, entries, runs)
    return out


def _median(values):
    s = summary(values)
    return s["median"] if s else None


def _cell(values, fmt, scale=1.0):
    s = summary(values)
    if not s:
        return "-"
    return f"{fmt.format(s['median'] / scale)} ({fmt.format(s['min'] / scale)}-{fmt.format(s['max'] / scale)})"


def _verdict(ratio, target):
    if ratio is None:
        return "-"
    _, op, bound = target
    met = ratio <= bound if op == "<=" else ratio >= bound
    return f"{ratio:.2f}x ({'met' if met else 'NOT met'}: target {op} {bound}x)"


def markdown(e7):
    """E7's tables and the ratios against issue 26's targets."""
    lines = ["## E7: verified images (issue 26)", ""]
    if "skipped" in e7 and isinstance(e7["skipped"], str):
        return "\n".join(lines + [f"Skipped: {e7['skipped']}", ""])
    lines.append(f"Medians of {e7['runs']} runs (min-max). Trees by `veritysetup format` (sha256, 4 KiB blocks), "
                 "given to squashd as `verity=require,verity_data=TREE,roothash=HEX`; unverified is `verity=off`.")
    lines.append("")
    targets = []
    v = e7["verify"]
    lines += [f"### (a) `squashd verify` vs `veritysetup verify` (usr, {v['image_bytes'] / 2**20:.0f} MiB, "
              "page cache warm)", "", "| tool | wall (s) | CPU user+sys (s) |", "|---|---|---|"]
    for name, row in v["rows"].items():
        lines.append(f"| {name} | {_cell(row['wall'], '{:.2f}')} | {_cell(row['cpu'], '{:.2f}')} |")
    if {"squashd", "veritysetup"} <= set(v["rows"]):
        ratio = _median(v["rows"]["squashd"]["wall"]) / _median(v["rows"]["veritysetup"]["wall"])
        targets.append((TARGETS["verify"][0], _verdict(ratio, TARGETS["verify"])))
    lines.append("")
    s = e7["seq"]
    lines += [f"### (b) sequential cold read of data's file ({s['file_bytes'] / 2**20:.0f} MiB, fio psync 128 KiB)",
              "", "| path | unverified (MiB/s) | verified (MiB/s) | verified / unverified |", "|---|---|---|---|"]
    for path in ("fuse", "kernel"):
        plain, ver = s["rows"].get(f"{path}_plain"), s["rows"].get(f"{path}_verity")
        ratio = _median(ver) / _median(plain) if plain and ver else None
        lines.append(f"| {path} | {_cell(plain, '{:.0f}', 2**20)} | {_cell(ver, '{:.0f}', 2**20)} | "
                     f"{_verdict(ratio, TARGETS['seq'])} |")
    checked = {k: n for k, n in s.get("verified_blocks", {}).items() if k.endswith("_verity")}
    if checked:
        lines.append("")
        lines.append("Blocks checked by the verified mounts (status --json `verity.verified_blocks`): "
                     + ", ".join(f"{k} {n}" for k, n in checked.items()) + ".")
        targets.append((f"{TARGETS['seq'][0]}, {path}", _verdict(ratio, TARGETS["seq"])))
    lines.append("")
    w = e7["walk"]
    lines += ["### (c) cold walks of usr (N concurrent `find`)", "",
              "| path | N | unverified (s) | verified (s) | verified / unverified |", "|---|---|---|---|---|"]
    for path in ("fuse", "kernel"):
        for n in w["ns"]:
            plain = w["rows"].get(f"{path}_plain", {}).get(str(n))
            ver = w["rows"].get(f"{path}_verity", {}).get(str(n))
            ratio = _median(ver) / _median(plain) if plain and ver else None
            lines.append(f"| {path} | {n} | {_cell(plain, '{:.3f}')} | {_cell(ver, '{:.3f}')} | "
                         f"{_verdict(ratio, TARGETS['walk'])} |")
            targets.append((f"{TARGETS['walk'][0]}, {path} N={n}", _verdict(ratio, TARGETS["walk"])))
    lines.append("")
    m = e7["e3"]
    lines += [f"### (d) E3: {m['count']} service images under one `squashd serve`", "",
              "| path | variant | until every root is listed (s) | walk of all (s) | RSS (MiB) |", "|---|---|---|---|---|"]
    for path in ("fuse", "kernel"):
        for tag in ("plain", "verity"):
            row = m["rows"].get(f"{path}_{tag}")
            if row:
                lines.append(f"| {path} | {tag} | {_cell(row['seconds'], '{:.3f}')} | "
                             f"{_cell(row['walk_seconds'], '{:.3f}')} | {_cell(row['rss_bytes'], '{:.1f}', 2**20)} |")
        plain, ver = m["rows"].get(f"{path}_plain"), m["rows"].get(f"{path}_verity")
        ratio = _median(ver["seconds"]) / _median(plain["seconds"]) if plain and ver else None
        targets.append((f"{TARGETS['e3'][0]}, {path}", _verdict(ratio, TARGETS["e3"])))
    lines.append("")
    skipped = {**s["skipped"], **{f"walk {k}": x for k, x in w["skipped"].items()},
               **{f"E3 {k}": x for k, x in m["skipped"].items()}}
    for key, why in skipped.items():
        if why:
            lines.append(f"- {key}: {why}")
    lines += ["", "### Issue 26's targets", "", "| target | this run |", "|---|---|"]
    lines += [f"| {name} | {verdict} |" for name, verdict in targets]
    lines.append("")
    return "\n".join(lines)
