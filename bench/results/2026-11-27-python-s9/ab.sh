#!/bin/bash
# usage: ab.sh runs build... ; interleaved, caches dropped, autogroup nice -10
cd /work/wt/python6
runs=$1; shift
for r in $(seq $runs); do for b in "$@"; do
  sync; echo 3 > /proc/sys/vm/drop_caches; [ -n "$WARM" ] && cat bench/work/python/env.sqfs > /dev/null
  echo -n "$b "; PYTHONPATH=/tmp/p6/$b setsid -w bash -c 'echo -10 > /proc/$$/autogroup; exec target/bench-venv/bin/python /tmp/p6/${SCRIPT:-readall.py} bench/work/python/env.sqfs '"${RA:--} ${ORDER:-stack}"
done; done
