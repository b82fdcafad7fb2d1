#!/bin/bash
# Interleaved A/B of FUSE transports (and of two builds): N parallel cold `find`s on a fresh
# mount after drop_caches; prints wall, the walkers' user+sys CPU, the daemon's CPU, the load,
# and the requests the daemon answered (status), plus listing requests per opcode where the
# build logs them (SQUASHD_LOG=squashd_fuse=debug, at the end of the session).
# Usage: bash bench/tools/ab_uring.sh RUNS N [BEFORE_BIN]   (as root; enable_uring is restored)
RUNS=${1:-5}; N=${2:-16}
IMG=${IMG:-/work/main/bench/work/usr-quick.sqfs}; MNT=/tmp/abu-mnt; SOCK=/tmp/abu.sock; LOG=/tmp/abu.log
AFTER=${AFTER:-$(dirname "$0")/../../target/release/squashd}
declare -A BIN=([after]=$AFTER); VARIANTS="after:off after:on"
if [ -n "$3" ]; then BIN[before]=$3; VARIANTS="before:off before:on $VARIANTS"; fi
mkdir -p $MNT; TCK=$(getconf CLK_TCK)
old=$(cat /sys/module/fuse/parameters/enable_uring); echo 1 > /sys/module/fuse/parameters/enable_uring
trap '[ "$old" = N ] && echo 0 > /sys/module/fuse/parameters/enable_uring' EXIT
for run in $(seq $RUNS); do for v in $VARIANTS; do
  b=${v%%:*}; mode=${v##*:}
  sync; echo 3 > /proc/sys/vm/drop_caches
  SQUASHD_LOG=squashd_fuse=debug ${BIN[$b]} mount -f $IMG $MNT -o fuse,uring=$mode,control=$SOCK 2>$LOG &
  pid=$!
  for i in $(seq 100); do mountpoint -q $MNT && break; sleep 0.05; done
  load=$(cut -d' ' -f1 /proc/loadavg)
  c0=$(awk '{print $14+$15}' /proc/$pid/stat)
  out=$( { /usr/bin/time -f "%e %U %S" bash -c "for i in \$(seq $N); do find $MNT > /dev/null & done; wait"; } 2>&1 )
  c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  req=$(${BIN[$b]} status --socket $SOCK --json | python3 -c 'import json,sys; i=json.load(sys.stdin)["images"][0]; print(i["transport"], "requests=%d ring=%d" % (i["requests"], i["ring_requests"]))')
  umount $MNT; wait $pid
  ops=$(grep -o 'readdir=[0-9]*\|readdirplus=[0-9]*' $LOG | tr '\n' ' ')
  echo "run=$run $b uring=$mode N=$N wall,user,sys=$out daemon_cpu=$(echo "scale=2; ($c1-$c0)/$TCK" | bc) load=$load $req $ops"
done; done
echo enable_uring restored to $old
