"""Helpers every experiment uses: running commands, timing, dropping caches, statistics."""

import os
import statistics
import subprocess
import sys
import time

# Where the benchmark keeps images, mountpoints and scratch files (gitignored).
BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_DIR = os.path.dirname(BENCH_DIR)
WORK_DIR = os.path.join(BENCH_DIR, "work")


def log(msg):
    """Progress on stderr, so that a long run shows where it is."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(cmd, check=True, capture=True, env=None, timeout=None):
    """Runs a command; returns CompletedProcess with text output."""
    return subprocess.run(
        cmd,
        check=check,
        text=True,
        stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
        stderr=subprocess.PIPE if capture else subprocess.DEVNULL,
        env=env,
        timeout=timeout,
    )


def first_line(cmd):
    """First non-empty line of a command's output (stdout, else stderr), or None if it fails."""
    try:
        p = subprocess.run(cmd, text=True, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for text in (p.stdout, p.stderr):
        for line in text.splitlines():
            if line.strip():
                return line.strip()
    return None


def is_root():
    return os.geteuid() == 0


def drop_caches():
    """Writes back dirty pages and drops the page, dentry and inode caches (needs root)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def timed(fn):
    """Runs fn(); returns (seconds, its result)."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def parallel_commands(cmds):
    """Starts every command at once (stdout to /dev/null), waits for all; returns seconds.

    Raises if one fails, with its stderr."""
    start = time.perf_counter()
    procs = [
        subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for c in cmds
    ]
    errors = []
    for c, p in zip(cmds, procs):
        _, err = p.communicate()
        if p.returncode != 0:
            errors.append(f"{' '.join(c)}: exit {p.returncode}: {err.strip()[:300]}")
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError("; ".join(errors[:3]))
    return elapsed


def summary(values):
    """Median, min and max of a list of numbers (None when empty)."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def meminfo():
    """/proc/meminfo as a dict of bytes."""
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, rest = line.split(":", 1)
            parts = rest.split()
            value = int(parts[0])
            if len(parts) > 1 and parts[1] == "kB":
                value *= 1024
            out[key] = value
    return out


def rss_bytes(pid):
    """Resident set size of a process, or 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def pids_with_args(program_suffix, needle):
    """Pids of processes whose argv[0] ends with program_suffix and whose arguments contain
    needle (used to find the daemons a FUSE tool forked into the background)."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].decode(errors="replace").endswith(program_suffix):
            if any(needle.encode() in a for a in argv[1:]):
                pids.append(int(name))
    return pids


def human_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return f"{n} B"
