#!/bin/bash
# ab.sh MODE ROUNDS BIN... : interleaved passes at autogroup nice -19, image on /dev/shm
echo -19 > /proc/self/autogroup
MODE=$1 R=$2; shift 2
for r in $(seq $R); do for b in "$@"; do
  echo "== $b r$r load $(cut -d' ' -f1 /proc/loadavg)"
  IMAGE=/dev/shm/data.sqfs /tmp/rp/passes.sh /tmp/rp/$b $MODE 2>&1 | grep -v "^[0-9]"
done; done
