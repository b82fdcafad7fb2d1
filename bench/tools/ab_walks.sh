#!/bin/bash
# A/B of `squashd mount` options on E1-style walks, alternating the variants in one session:
# fresh mount, drop_caches, N concurrent `find` (cold), the same N again (warm), and the FUSE
# requests the mount served. Prints every run and the medians.
#
#   sudo N=16 RUNS=3 bench/tools/ab_walks.sh "" "threads=1"      # "" = default options
#
# IMG (default bench/work/usr.sqfs, built by bench/run.py) and SQUASHD may be overridden.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
N=${N:-16}; RUNS=${RUNS:-3}
IMG=${IMG:-$here/bench/work/usr.sqfs}
SQUASHD=${SQUASHD:-$here/target/release/squashd}
M=$(mktemp -d /tmp/ab-walks.XXXXXX); SOCK=$M.control
trap 'fusermount3 -u "$M" 2>/dev/null || true; rmdir "$M"' EXIT
declare -A cold warm
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for r in $(seq "$RUNS"); do
  for v in "$@"; do
    "$SQUASHD" mount "$IMG" "$M" -o "control=$SOCK${v:+,$v}"
    sync; echo 3 > /proc/sys/vm/drop_caches
    t0=$(date +%s.%N); for _ in $(seq "$N"); do find "$M" -print > /dev/null & done; wait
    t1=$(date +%s.%N); for _ in $(seq "$N"); do find "$M" -print > /dev/null & done; wait
    t2=$(date +%s.%N)
    req=$("$SQUASHD" status --socket "$SOCK" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["images"][0]["requests"])')
    fusermount3 -u "$M"
    c=$(echo "$t1 - $t0" | bc); w=$(echo "$t2 - $t1" | bc)
    cold[x$v]="${cold[x$v]:-} $c"; warm[x$v]="${warm[x$v]:-} $w"
    echo "run $r [${v:-default}] N=$N cold $c s, warm $w s, $req requests"
  done
done
for v in "$@"; do
  echo "[${v:-default}] N=$N cold median $(echo "${cold[x$v]}" | median) s, warm median $(echo "${warm[x$v]}" | median) s"
done
