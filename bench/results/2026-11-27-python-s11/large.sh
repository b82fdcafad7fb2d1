#!/bin/bash
# usage: large.sh runs build...; build = dir (a package unpacked in /tmp/p8/dir); per round and build:
# 1 then 2 threads, read_ahead=0 (the bench's target) and the default; the image in the page cache.
cd /work/wt/python8
here=bench/results/2026-11-27-python-s11
cat bench/work/python/large.sqfs > /dev/null
runs=$1; shift
for r in $(seq $runs); do for b in "$@"; do for ra in 0 -; do for t in 1 2; do
  echo -n "$b t$t ra$ra "; PYTHONPATH=/tmp/p8/$b setsid -w bash -c 'echo -10 > /proc/$$/autogroup; exec target/bench-venv/bin/python '$here'/large.py bench/work/python/large.sqfs '"$t $ra"
done; done; done; done
