#!/bin/bash
# usage: ab.sh runs build... ; interleaved, caches dropped, autogroup nice -10
# a build name "X@ra" runs build X with read_ahead=ra
cd /work/wt/python7
runs=$1; shift
for r in $(seq $runs); do for b in "$@"; do
  sync; echo 3 > /proc/sys/vm/drop_caches; [ -n "$WARM" ] && cat bench/work/python/env.sqfs > /dev/null
  d=${b%@*}; ra=-; [[ $b == *@* ]] && ra=${b#*@}
  echo -n "$b "; PYTHONPATH=/tmp/p7/$d setsid -w bash -c 'echo -10 > /proc/$$/autogroup; exec target/bench-venv/bin/python /tmp/p7/${SCRIPT:-readall.py} bench/work/python/env.sqfs '"$ra ${ORDER:-stack}"
done; done
