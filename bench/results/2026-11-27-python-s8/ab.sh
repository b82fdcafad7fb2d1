#!/bin/bash
# usage: ab.sh runs build... ; interleaved, caches dropped, autogroup nice -10
cd /work/wt/python5
runs=$1; shift
for r in $(seq $runs); do for b in "$@"; do
  sync; echo 3 > /proc/sys/vm/drop_caches
  echo -n "$b "; PYTHONPATH=/tmp/p5/$b setsid -w bash -c 'echo -10 > /proc/$$/autogroup; exec target/bench-venv/bin/python /tmp/p5/readall.py bench/work/python/env.sqfs '"${RA:--} ${ORDER:-stack}"
done; done
