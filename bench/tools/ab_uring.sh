#!/bin/bash
# Alternating A/B of FUSE transports: cold find N=1 and N=16 on a fresh mount after drop_caches.
IMG=/work/main/bench/work/usr-quick.sqfs; BIN=/work/main/target/release/squashd; MNT=/tmp/abu-mnt; mkdir -p $MNT
old=$(cat /sys/module/fuse/parameters/enable_uring); echo 1 > /sys/module/fuse/parameters/enable_uring
for run in 1 2 3 4 5; do for mode in off on; do for n in 1 16; do
  sync; echo 3 > /proc/sys/vm/drop_caches
  $BIN mount $IMG $MNT -o fuse,uring=$mode,control=/tmp/abu.sock || exit 1
  t0=$(date +%s.%N)
  for i in $(seq $n); do find $MNT > /dev/null & done; wait
  t1=$(date +%s.%N)
  tr=$($BIN status --socket /tmp/abu.sock --json | python3 -c 'import json,sys; d=json.load(sys.stdin); i=d["images"][0]; print(i["transport"], i.get("ring_requests"), i["fuse_requests"] if "fuse_requests" in i else "")' 2>/dev/null)
  umount $MNT; sleep 0.3
  echo "run=$run uring=$mode N=$n $(echo "$t1 - $t0" | bc) s  $tr"
done; done; done
[ "$old" = N ] && echo 0 > /sys/module/fuse/parameters/enable_uring; echo enable_uring=$(cat /sys/module/fuse/parameters/enable_uring)
