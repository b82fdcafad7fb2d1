#!/bin/bash
# usage: passes.sh BIN kernel|fuse|squashfs [seq]
set -euo pipefail
BIN=$1 MODE=$2 SEQ=${3:-}
IMAGE=${IMAGE:-/work/main/bench/work/data.sqfs}
MNT=$(mktemp -d /tmp/rp/mnt.XXXX)
if [ "$MODE" = squashfs ]; then mount -t squashfs -o loop,ro "$IMAGE" "$MNT"; else
"$BIN" mount "$IMAGE" "$MNT" -o "$MODE,control=$MNT.sock${OPTS:+,$OPTS}"; fi
trap 'umount "$MNT" 2>/dev/null || umount -l "$MNT"; rmdir "$MNT"' EXIT
sync; echo 3 > /proc/sys/vm/drop_caches; cat "$IMAGE" > /dev/null
if [ -n "$SEQ" ]; then
  for inv in 1 1 0; do fio --name=s --filename="$MNT/blob" --readonly --rw=read --bs=128k --size=1G --invalidate=$inv --ioengine=psync --output-format=terse | awk -F';' 'NF>10{print "seq bw_KiB", $7}'; done
fi
cd /tmp/rp
fio --name=r --filename="$MNT/blob" --readonly --rw=randread --bs=4k --size=1G --loops=3 --invalidate=1 --ioengine=psync \
  --write_iops_log=/tmp/rp/log-$MODE --log_avg_msec=500 --output-format=terse | awk -F';' 'NF>10{print "iops", $8, "runtime_ms", $9}'
awk -F, '{printf "%d ", $2}' /tmp/rp/log-${MODE}_iops.1.log; echo
if [ "$MODE" != squashfs ]; then /work/main/target/release/squashd status --json --socket "$MNT.sock" | python3 -c '
import json,sys
i=json.load(sys.stdin)["images"][0]; t=i.get("translation") or {}
print("ra", i["read_ahead"]); print("translation", t); print("req",i["requests"],"blob_reads",t.get("blob_reads"),"fill_reads",t.get("fill_reads"),"fills",t.get("fills"),"loads",i["cache"]["data"]["loads"],"swept",i["read_ahead"].get("swept"))'; fi
