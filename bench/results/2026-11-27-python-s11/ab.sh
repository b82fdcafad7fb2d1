#!/bin/bash
# usage: ab.sh runs build... ; build = dir[+VAR=val...][@ra] (a package unpacked in /tmp/p8/dir;
# +VAR=val: environment variables; @ra: read_ahead=ra); the walk of every file (readall.py, the
# bench's scandir stack), interleaved, page cache dropped, each run a fresh process in its own
# session at autogroup nice -10 (AG=0: nice 0, as the bench runs).
cd /work/wt/python8
here=bench/results/2026-11-27-python-s11
runs=$1; shift
for r in $(seq $runs); do for b in "$@"; do
  sync; echo 3 > /proc/sys/vm/drop_caches
  spec=${b%@*}; ra=-; [[ $b == *@* ]] && ra=${b#*@}
  d=${spec%%+*}; envs=""; [[ $spec == *+* ]] && envs=$(echo "${spec#*+}" | tr '+' ' ')
  echo -n "$b "; env $envs PYTHONPATH=/tmp/p8/$d setsid -w bash -c 'echo ${AG:--10} > /proc/$$/autogroup; exec target/bench-venv/bin/python '$here'/readall.py bench/work/python/env.sqfs '"$ra stack"
done; done
