"""Reads every case listed in a JSON file (image path, offset) as a user would: walk, stat,
xattrs, readlink, bounded reads of every file. Only OSError may come out of the package; any
other exception is printed and the exit status is 1 (a crash ends the process with a signal).
Prints a JSON summary."""

from __future__ import annotations

import json
import os
import stat
import sys
import traceback

import squashd

MAX_ENTRIES = 5000
CHUNK = 65536


def attempt(counts, op, *args, **kwargs):
    try:
        return op(*args, **kwargs)
    except OSError as e:
        counts["oserrors"] += 1
        counts["errnos"][str(e.errno)] = counts["errnos"].get(str(e.errno), 0) + 1
        if len(counts["messages"]) < 20 and "byte" in str(e):
            counts["messages"].append(str(e))
        return None


def exercise(path, offset, counts):
    image = attempt(counts, squashd.open, path, offset=offset, cache={"data": 4 << 20, "metadata": 4 << 20})
    if image is None:
        counts["refused_at_open"] += 1
        return
    with image:
        seen = 0
        walk_errors = []
        for root, dirs, files in image.walk("/", onerror=walk_errors.append):
            for name in dirs + files:
                seen += 1
                if seen > MAX_ENTRIES:
                    return
                p = os.path.join(root, name)
                st = attempt(counts, image.lstat, p)
                attempt(counts, image.stat, p)
                for attr in attempt(counts, image.listxattr, p, follow_symlinks=False) or []:
                    attempt(counts, image.getxattr, p, attr, follow_symlinks=False)
                if st is None:
                    continue
                if stat.S_ISLNK(st.st_mode):
                    attempt(counts, image.readlink, p)
                    attempt(counts, image.exists, p)
                elif stat.S_ISREG(st.st_mode):
                    f = attempt(counts, image.open, p, buffering=0)
                    if f is not None:
                        with f:
                            attempt(counts, f.read, CHUNK)
                            f.seek(max(st.st_size - CHUNK, 0))
                            attempt(counts, f.read, CHUNK)
                            f.seek(st.st_size // 2)
                            attempt(counts, f.read, 3 * CHUNK)
                    if st.st_size < (1 << 20):
                        attempt(counts, image.read_bytes, p)
        for e in walk_errors:
            assert isinstance(e, OSError)
            counts["oserrors"] += 1
        attempt(counts, image.stats)


def main():
    cases = json.load(open(sys.argv[1]))
    counts = {"cases": 0, "oserrors": 0, "refused_at_open": 0, "errnos": {}, "messages": []}
    for path, offset in cases:
        counts["cases"] += 1
        try:
            exercise(path, offset, counts)
        except Exception:
            print(f"case {path} at offset {offset}: not an OSError:", file=sys.stderr)
            traceback.print_exc()
            sys.exit(1)
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
