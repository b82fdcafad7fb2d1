#!/bin/bash
# One E2-style random pass on a fresh FUSE-path mount, with the daemon's CPU and (optionally) a
# perf profile of the daemon alone: for comparing the two transports (issue 27).
#
#   sudo IMG=/dev/shm/data.sqfs bash bench/tools/profile_randread.sh BIN off|on|auto [SECONDS] [perf]
#
# Mounts IMG with `BIN mount IMG MNT -o fuse,uring=MODE`, drops the caches, runs
# `fio --rw=randread --bs=4k --ioengine=psync --invalidate=1 --time_based` on its `blob` for SECONDS
# (default 10) while `perf record -g -p PID` watches the daemon (PERFOPT to change the options;
# written to OUTDIR/perf-MODE.data), then prints the IOPS, fio's mean and tail latencies, the
# daemon's CPU ticks over the pass and its request counters. With MODE on, enable_uring must be on
# (this script does not touch it). Copy the image to /dev/shm first on a shared machine: others'
# drop_caches then cannot send its reads to the disk.
set -euo pipefail
BIN=$1; MODE=$2; SECS=${3:-10}; PERF=${4:-}
IMG=${IMG:-bench/work/data.sqfs}
OUTDIR=${OUTDIR:-/tmp/profile-randread}
mkdir -p "$OUTDIR/mnt-$MODE"
MNT=$OUTDIR/mnt-$MODE
"$BIN" mount "$IMG" "$MNT" -o "fuse,uring=$MODE,control=$MNT.sock"
trap 'umount "$MNT" 2>/dev/null || true' EXIT
PID=$(pgrep -f "$BIN mount .* $MNT" | head -1)
sync; echo 3 > /proc/sys/vm/drop_caches
ticks() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
before=$(ticks)
if [ -n "$PERF" ]; then
    perf record ${PERFOPT:--g} -p "$PID" -o "$OUTDIR/perf-$MODE.data" -- sleep "$SECS" >/dev/null 2>&1 &
    PERF_PID=$!
fi
fio --name=r --filename="$MNT/blob" --readonly --rw=randread --bs=4k --ioengine=psync --iodepth=1 \
    --numjobs=1 --size="$(stat -c %s "$MNT/blob")" --invalidate=1 --time_based --runtime="$SECS" \
    --output-format=json > "$OUTDIR/fio-$MODE.json"
after=$(ticks)
[ -n "$PERF" ] && wait "$PERF_PID"
COUNTERS=$("$BIN" status --json --socket "$MNT.sock" | python3 -c 'import json, sys
d = json.load(sys.stdin)["images"][0]
print("requests", d["requests"], "transport", d.get("transport"), "ring_requests", d.get("ring_requests"))')
FIO=$(python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]["read"]
p = j["clat_ns"]["percentile"]
print("iops", round(j["iops"]), "clat mean us", round(j["clat_ns"]["mean"] / 1000, 1),
      "p50", p["50.000000"] // 1000, "p99", p["99.000000"] // 1000)' "$OUTDIR/fio-$MODE.json")
echo "$MODE $FIO daemon CPU ticks $((after - before)) $COUNTERS load $(cut -d' ' -f1 /proc/loadavg)"
