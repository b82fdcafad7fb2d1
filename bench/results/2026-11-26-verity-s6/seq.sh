#!/bin/bash
# seq.sh BIN MODE(kernel|fuse) V(0/1) [quick]: cold sequential read of data's file; prints MiB/s, daemon task-clock
BIN=$1; MODE=$2; V=$3; Q=$4
BENCH=$(cd "$(dirname "$0")/../.." && pwd)
W=$BENCH/work
IMG=$W/data.sqfs; SZ=1073741824
if [ "$Q" = quick ]; then IMG=$W/data-quick.sqfs; SZ=268435456; fi
if [ $V = 1 ]; then O=$(python3 -c "
import json,sys; sys.path.insert(0,'$BENCH'); from benchlib import e7_verity
e=json.load(open('$W/e7/trees.json'));print(e7_verity.verity_options(e['$IMG']))"); else O=verity=off; fi
if [ $MODE = kernel ]; then O="kernel,$O"; fi
M=$(mktemp -d /tmp/v3/seqm-XXXX)
$BIN mount $IMG $M -o "$O,control=$M.sock" || exit 1
PID=$(pgrep -f "squashd.* mount $IMG $M" | head -1)
sync; echo 3 > /proc/sys/vm/drop_caches
perf stat -x, -e task-clock -p $PID -o $M.perf &
PP=$!
sleep 0.2
BW=$(fio --name=s --filename=$M/blob --readonly --rw=read --bs=128k --ioengine=psync --size=$SZ --invalidate=1 --output-format=json | python3 -c "import json,sys;d=sys.stdin.read();print(json.loads(d[d.index('{'):])['jobs'][0]['read']['bw_bytes']/2**20)")
kill -INT $PP; wait $PP
$BIN status --json --socket $M.sock > $M.status 2>/dev/null
TC=$(grep task-clock $M.perf | cut -d, -f1)
VB=$(python3 -c "import json;d=json.load(open('$M.status'));print(d.get('images',[{}])[0].get('verity',{}) and d['images'][0]['verity'].get('verified_blocks'))" 2>/dev/null)
umount $M; fusermount3 -u $M 2>/dev/null
for i in 1 2 3 4 5 6 7 8 9 10; do kill -0 $PID 2>/dev/null || break; sleep 0.2; done
kill $PID 2>/dev/null
echo "$MODE v=$V bw ${BW%.*} MiB/s daemon task-clock ${TC%.*} ms verified_blocks $VB load $(cut -d' ' -f1 /proc/loadavg)"
rm -rf $M $M.perf $M.status $M.sock
