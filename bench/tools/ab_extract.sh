#!/bin/bash
# A/B of extraction, alternating `unsquashfs -d` with one or more squashd binaries in one
# session. Before each run the output is deleted, dirty pages written back and caches dropped,
# as E4 of bench/run.py does. Prints every run (wall, user, sys, CPU) and the medians.
#
#   sudo RUNS=4 bench/tools/ab_extract.sh /tmp/squashd-before target/release/squashd
#
# IMG (default bench/work/usr.sqfs, built by bench/run.py) and OUT (default bench/work/ab-out,
# on the same file system as E4's output) may be overridden. A binary given as ENV=VALUE:PATH
# runs with that variable set (e.g. RAYON_NUM_THREADS=3:target/release/squashd).
#
# FRESH=1 extracts instead into a new ext4 for every run (mkfs.ext4 on a sparse 24 GiB file in
# bench/work, loop device with direct I/O): no run then allocates inodes among the ones the
# previous run's output just freed, which ext4 without a journal skips for minutes.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${RUNS:-3}
IMG=${IMG:-$here/bench/work/usr.sqfs}
OUT=${OUT:-$here/bench/work/ab-out}
FS=$here/bench/work/ab-fresh.img; MNT=$here/bench/work/ab-fresh.mnt; LOOP=
cleanup() {
  if [[ -n ${FRESH:-} ]]; then
    umount "$MNT" 2>/dev/null || true; [[ -n $LOOP ]] && losetup -d "$LOOP" 2>/dev/null
    rm -f "$FS"; rmdir "$MNT" 2>/dev/null || true
  else
    rm -rf "$OUT"
  fi
}
trap cleanup EXIT
if [[ -n ${FRESH:-} ]]; then
  mkdir -p "$MNT"; truncate -s 24G "$FS"; OUT=$MNT/out
fi
declare -A times
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
prepare() {
  if [[ -n ${FRESH:-} ]]; then
    if [[ -n $LOOP ]]; then umount "$MNT"; losetup -d "$LOOP"; fi
    mkfs.ext4 -q -F "$FS"; LOOP=$(losetup --direct-io=on -f --show "$FS"); mount "$LOOP" "$MNT"
  else
    rm -rf "$OUT"
  fi
  sync; echo 3 > /proc/sys/vm/drop_caches; sleep 1
}
timed() {  # label command...
  local label=$1; shift
  prepare
  local tf; tf=$(mktemp)
  /usr/bin/time -o "$tf" -f "%e %U %S %P" "$@" >/dev/null 2>&1
  local t; t=$(tail -1 "$tf"); rm -f "$tf"
  echo "$label: ${t%% *} s (user, sys, cpu: ${t#* })"
  times[$label]+="${t%% *} "
}
for r in $(seq "$RUNS"); do
  timed unsquashfs unsquashfs -no-progress -d "$OUT" "$IMG"
  for b in "$@"; do
    if [[ $b == *=*:* ]]; then
      timed "$b" env "${b%%:*}" "${b#*:}" extract -q "$IMG" -d "$OUT"
    else
      timed "$b" "$b" extract -q "$IMG" -d "$OUT"
    fi
  done
done
echo "medians of $RUNS:"
for label in unsquashfs "$@"; do
  echo "  $label: $(echo "${times[$label]}" | median) s"
done
