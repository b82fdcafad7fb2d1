"""E5's section of the report: issue 16's targets against this run's medians, then the tables."""

from .common import human_bytes, summary

LABELS = {
    "squashd_http": "squashd, http:// through the proxy",
    "squashd_http_0ms": "squashd, http:// through the proxy with 0 ms added",
    "squashd_http_unit4m": "squashd, http://, fetch_unit=4MiB",
    "curl_kernel": "(a) curl -o, then mount -o loop,ro (kernel)",
    "httpdirfs": "(b) httpdirfs, squashfuse_ll on the file in it",
    "httpdirfs_cache": "(b) with `httpdirfs --cache` (empty at mount)",
    "squashd_local": "squashd on the local file",
    "squashd_http_fill": "first mount (fills the disk cache)",
    "squashd_http_warm": "second mount (disk cache warm, page cache dropped)",
}
REMOTE_KEYS = ["requests", "bytes_fetched", "units_fetched", "units_prefetched", "memory_hits", "disk_cache_hits",
               "wait_seconds"]


def _st(rows, key="seconds"):
    return summary([r.get(key) for r in rows or []])


def _med(rows, key="seconds"):
    st = _st(rows, key)
    return st["median"] if st else None


def _s(st, scale=1.0, fmt="{:.3f}"):
    if not st:
        return "-"
    return f"{fmt.format(st['median'] * scale)} ({fmt.format(st['min'] * scale)}–{fmt.format(st['max'] * scale)})"


def _div(a, b):
    return a / b if a is not None and b else None


def _x(v):
    return "-" if v is None else f"{v:.2f}x"


def _remote_med(rows, key, status="status"):
    values = [((r.get(status) or {}).get("remote") or {}).get(key) for r in rows or []]
    st = summary(values)
    return st["median"] if st else None


def _targets(e5):
    m, c, d = e5["mount"], e5["cold"], e5["disk"]
    rtt = e5["rtt_ms"] / 1000
    rows = []

    def row(what, value, fmt, ok):
        verdict = "not measured" if value is None else ("met" if ok(value) else "**missed**")
        rows.append(f"| {what} | {'-' if value is None else fmt.format(value)} | {verdict} |")

    for key in ("usr", "data"):
        t = _med(m.get(key, {}).get("squashd_http"))
        row(f"{key}: mount to first `ls` ≤ 5 round trips", _div(t, rtt), "{:.1f} RTTs", lambda v: v <= 5)
        row(f"{key}: mount to first `ls` ≤ 0.05x (a)", _div(t, _med(m.get(key, {}).get("curl_kernel"))),
            "{:.3f}x", lambda v: v <= 0.05)
    for key, what in (("usr", "E1 cold N=1 walk"), ("data", "E2 sequential cold read")):
        row(f"{what} ≤ 0.5x (b)", _div(_med(c.get(key, {}).get("squashd_http")), _med(c.get(key, {}).get("httpdirfs"))),
            "{:.2f}x", lambda v: v <= 0.5)
    row("sequential bandwidth, second half of the file, ≥ 0.8x squashd on the local file",
        _div(_med(c.get("data", {}).get("squashd_http"), "bw_second_half_bytes"),
             _med(c.get("data", {}).get("squashd_local"), "bw_second_half_bytes")), "{:.2f}x", lambda v: v >= 0.8)
    for key, what in (("usr", "E1 cold walk"), ("data", "E2 sequential read")):
        warm = d.get(key, {}).get("squashd_http_warm")
        hits = _remote_med(warm, "disk_cache_hits")
        row(f"{what}, second mount, disk cache warm: ≤ 1.2x squashd on the local file",
            _div(_med(warm), _med(c.get(key, {}).get("squashd_local"))),
            "{:.2f}x" + ("" if hits is None else f" ({hits:.0f} disk cache hits, "
                         f"{_fmt(_remote_med(warm, 'requests'))} requests)"), lambda v: v <= 1.2)
    checks = e5["disk_checks"]
    over = max((ch["du_bytes"] - ch["limit_bytes"] for ch in checks), default=None)
    largest = max((ch["du_bytes"] for ch in checks), default=0)
    row(f"disk cache ≤ budget + one fetch unit after every phase ({len(checks)} checks; largest "
        f"{human_bytes(largest)}" + (": the cache stored nothing, so this proves nothing)" if largest < e5["unit_bytes"]
                                     else ")"),
        over, "{:+d} bytes vs the limit at most", lambda v: v <= 0)
    return ["### Targets of issue 16", "", "| target | measured | |", "|---|---|---|", *rows, ""]


def _mount_table(e5):
    rtt = e5["rtt_ms"] / 1000
    out = ["### 1. From the mount command to the first `ls MNT` answering", "",
           "Seconds, median (min–max); in round trips of 20 ms; ratio to (a). squashd: `squashd mount URL MNT "
           "-o fuse,control=SOCK` (returns once the mount answers), then `ls MNT`. (a) includes `curl` (its own "
           "time in the last column). (b): `httpdirfs URL/ DIR`, `squashfuse_ll DIR/IMAGE MNT`, `ls MNT`.", "",
           "| system | usr | usr RTTs | usr / (a) | data | data RTTs | data / (a) | curl alone (usr, data) |",
           "|---|---|---|---|---|---|---|---|"]
    for system in ("squashd_http", "squashd_http_0ms", "curl_kernel", "httpdirfs", "squashd_local"):
        cells = []
        for key in ("usr", "data"):
            rows = e5["mount"].get(key, {}).get(system)
            t = _med(rows)
            cells += [_s(_st(rows)), "-" if t is None or system == "squashd_http_0ms" else f"{t / rtt:.1f}",
                      _x(_div(t, _med(e5["mount"].get(key, {}).get("curl_kernel"))))]
        curl = ", ".join(_s(_st(e5["mount"].get(k, {}).get(system), "curl_seconds"), fmt="{:.2f}")
                         for k in ("usr", "data")) if system == "curl_kernel" else ""
        out.append(f"| {LABELS[system]} | " + " | ".join(cells) + f" | {curl} |")
    req = [_remote_med(e5["mount"].get(k, {}).get("squashd_http"), "requests") for k in ("usr", "data")]
    got = [_remote_med(e5["mount"].get(k, {}).get("squashd_http"), "bytes_fetched") for k in ("usr", "data")]
    if req[0] is not None:
        out += ["", f"squashd's HTTP requests by the first `ls` (median): usr {req[0]:.0f} "
                f"({human_bytes(int(got[0]))} fetched), data {req[1]:.0f} ({human_bytes(int(got[1]))})."]
    return out + [""]


def _cold_table(e5):
    c = e5["cold"]
    out = ["### 2. Cold: E1 N=1 `find MNT` of usr, E2 sequential read of data's 1 GiB file", "",
           "Fresh mount (its time in its own column), then drop_caches, then the walk or the read (128 KiB "
           "`read`s, timed every 64 MiB: the second half's bandwidth is the one once the read-ahead window "
           "has grown). Seconds, median (min–max).", "",
           "| system | usr mount | usr walk | walk / (b) | data mount | data read | MiB/s | MiB/s, 2nd half | read / (b) |",
           "|---|---|---|---|---|---|---|---|---|"]
    for system in ("squashd_http", "squashd_http_unit4m", "httpdirfs", "httpdirfs_cache", "squashd_local"):
        u, d = c.get("usr", {}).get(system), c.get("data", {}).get(system)
        if not u and not d:
            continue
        out.append(
            f"| {LABELS[system]} | {_s(_st(u, 'mount_seconds'))} | {_s(_st(u))} | "
            f"{_x(_div(_med(u), _med(c.get('usr', {}).get('httpdirfs'))))} | {_s(_st(d, 'mount_seconds'))} | "
            f"{_s(_st(d))} | {_s(_st(d, 'bw_bytes'), 2**-20, '{:.0f}')} | "
            f"{_s(_st(d, 'bw_second_half_bytes'), 2**-20, '{:.0f}')} | "
            f"{_x(_div(_med(d), _med(c.get('data', {}).get('httpdirfs'))))} |")
    return out + [""]


def _disk_table(e5):
    c = e5["cold"]
    out = ["### 3-4. A second mount with the disk cache warm", "",
           f"`-o disk_cache=DIR,disk_cache_size=BUDGET` on both mounts; between them unmount (the process "
           f"exits), drop_caches. `disk`: budget {e5['budgets'][0]}; `evict`: {e5['budgets'][1]}, less than the "
           "data read fetches. Ratio: to squashd on the local file (table 2). Counters: medians of `squashd status "
           "--json` `remote` after the walk or read (requests by the mount itself in parentheses).", "",
           "| phase | image | mount | mount s | walk/read s | / local | requests | fetched | disk cache hits | units prefetched | wait s |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for phase in ("disk", "evict"):
        for key in ("usr", "data"):
            for system in ("squashd_http_fill", "squashd_http_warm"):
                rows = e5[phase].get(key, {}).get(system)
                if not rows:
                    continue
                at_mount = _remote_med(rows, "requests", "status_after_mount")
                fetched = _remote_med(rows, "bytes_fetched")
                out.append(
                    f"| {phase} | {key} | {system.rsplit('_', 1)[1]} | {_s(_st(rows, 'mount_seconds'))} | {_s(_st(rows))} | "
                    f"{_x(_div(_med(rows), _med(c.get(key, {}).get('squashd_local'))))} | "
                    f"{_fmt(_remote_med(rows, 'requests'))} ({_fmt(at_mount)}) | "
                    f"{human_bytes(int(fetched)) if fetched is not None else '-'} | "
                    f"{_fmt(_remote_med(rows, 'disk_cache_hits'))} | {_fmt(_remote_med(rows, 'units_prefetched'))} | "
                    f"{_fmt(_remote_med(rows, 'wait_seconds'), '{:.2f}')} |")
    out += ["", "Disk cache on disk (`du -sb DIR`), largest over the runs, after each step:", "",
            "| phase | image | after | budget | du -sb | limit (budget + 1 unit) | within |", "|---|---|---|---|---|---|---|"]
    seen = {}
    for ch in e5["disk_checks"]:
        k = (ch["phase"], ch["image"], ch["step"])
        if k not in seen or ch["du_bytes"] > seen[k]["du_bytes"]:
            seen[k] = ch
    for (phase, key, step), ch in seen.items():
        all_ok = all(x["ok"] for x in e5["disk_checks"] if (x["phase"], x["image"], x["step"]) == (phase, key, step))
        out.append(f"| {phase} | {key} | {step} | {ch['budget']} | {ch['du_bytes']} | {ch['limit_bytes']} | "
                   f"{'yes' if all_ok else '**no**'} |")
    return out + [""]


def _fmt(v, fmt="{:.0f}"):
    return "-" if v is None else fmt.format(v)


def _counters_table(e5):
    out = ["### squashd's fetch counters (medians, `squashd status --json`, `images[0].remote`)", "",
           "| phase | image | system | " + " | ".join(REMOTE_KEYS) + " |", "|---|---|---|" + "---|" * len(REMOTE_KEYS)]
    for phase in ("mount", "cold"):
        for key in ("usr", "data"):
            for system, rows in e5[phase].get(key, {}).items():
                if not any(r.get("status") and r["status"].get("remote") for r in rows):
                    continue
                cells = [_fmt(_remote_med(rows, k), "{:.2f}" if k == "wait_seconds" else "{:.0f}") for k in REMOTE_KEYS]
                out.append(f"| {phase} | {key} | {system} | " + " | ".join(cells) + " |")
    return out + [""]


def markdown(e5):
    """The E5 section (markdown lines joined)."""
    out = ["## E5: remote images over HTTP with 20 ms of round trip (issue 16)", ""]
    if "all" in e5.get("skipped", {}):
        return "\n".join(out + [f"Skipped: {e5['skipped']['all']}", ""])
    v = e5.get("versions", {})
    out += [f"nginx on 127.0.0.1 serving copies of the images (read into the server's page cache after every "
            f"drop_caches), behind `bench/tools/delay_proxy.py --rtt-ms {e5['rtt_ms']}` (half the delay each way, "
            "and one RTT before a new connection's first bytes, as a TCP handshake). The proxy is Python and "
            "forwards at most about 0.5-1 GB/s on this machine: it bounds curl's download and any bandwidth above "
            "that. (b) runs httpdirfs with `--no-range-check` (1.2.5 wrongly finds that nginx does not support "
            f"ranges) and its other defaults (no disk cache). {v.get('nginx', '')}; {v.get('httpdirfs', '')}; "
            f"{v.get('curl', '')}. Images: usr {e5['image_bytes']['usr'] / 1e9:.2f} GB, data "
            f"{e5['image_bytes']['data'] / 1e6:.0f} MB (a {e5['file_bytes'] >> 20} MiB file). {e5['runs']} runs.", ""]
    out += _targets(e5) + _mount_table(e5) + _cold_table(e5) + _disk_table(e5) + _counters_table(e5)
    for name, why in e5.get("skipped", {}).items():
        out.append(f"- {name}: skipped: {why}")
    if e5["failures"]:
        out += ["Failures:", ""] + [f"- {f}" for f in e5["failures"]] + [""]
    return "\n".join(out) + "\n"
