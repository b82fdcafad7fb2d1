#!/bin/bash
# usage: ab2.sh runs build... ; build = dir[+VAR=val...][@ra]; interleaved, caches dropped, autogroup nice -10
cd /work/wt/python7
runs=$1; shift
for r in $(seq $runs); do for b in "$@"; do
  sync; echo 3 > /proc/sys/vm/drop_caches
  spec=${b%@*}; ra=-; [[ $b == *@* ]] && ra=${b#*@}
  d=${spec%%+*}; envs=""; [[ $spec == *+* ]] && envs=$(echo "${spec#*+}" | tr '+' ' ')
  echo -n "$b "; env $envs PYTHONPATH=/tmp/p7/$d setsid -w bash -c 'echo -10 > /proc/$$/autogroup; exec target/bench-venv/bin/python /tmp/p7/readall.py bench/work/python/env.sqfs '"$ra stack"
done; done
