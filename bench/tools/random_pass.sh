#!/bin/bash
# One full pass of fio's random map (4 KiB, each block of the file once) over the data image's
# 1 GiB file on a fresh squashd mount, caches dropped first (the image itself then read into
# the page cache, as E2's random phase has it), and the mount's counters after it.
#
#   sudo bash bench/tools/random_pass.sh BIN kernel|fuse [IMAGE] [FILE]
#
# Prints fio's IOPS and runtime, then the counters of `status --json` that say where the
# reads went: requests (FUSE path) or blob reads and fill reads (kernel path), decompressions,
# and the random sweep's blocks (read_ahead.swept, sweeps_wasted, sweep_busy_skips).
set -euo pipefail
BIN=$1 MODE=$2
IMAGE=${3:-bench/work/data.sqfs}
FILE=${4:-blob}
MNT=$(mktemp -d /tmp/random-pass.XXXXXX)
trap 'umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null; rmdir "$MNT"' EXIT
"$BIN" mount "$IMAGE" "$MNT" -o "$MODE,control=$MNT.sock"
sync
echo 3 > /proc/sys/vm/drop_caches
cat "$IMAGE" > /dev/null
fio --name=pass --filename="$MNT/$FILE" --readonly --rw=randread --bs=4k --size=1G \
    --invalidate=1 --ioengine=psync --output-format=terse |
    awk -F';' 'NF > 10 { print "iops", $8, "runtime_ms", $9 }'
"$BIN" status --json --socket "$MNT.sock" | python3 -c '
import json, sys
image = json.load(sys.stdin)["images"][0]
t = image.get("translation") or {}
ra = image["read_ahead"]
print("requests", image["requests"], "blob_reads", t.get("blob_reads", "-"),
      "fill_reads", t.get("fill_reads", "-"), "fills", t.get("fills", "-"),
      "decompressions", image["cache"]["data"]["loads"])
print("swept", ra.get("swept"), "sweeps_wasted", ra.get("sweeps_wasted"),
      "sweep_busy_skips", ra.get("sweep_busy_skips"))'
