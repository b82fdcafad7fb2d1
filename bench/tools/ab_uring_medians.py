#!/usr/bin/env python3
# Medians (min-max) of bench/tools/ab_uring.sh output files, as a markdown table:
# | build | uring | N | runs | wall s | walkers CPU s | daemon CPU s | requests | load |
import re,sys,statistics as st
rows={}
for fn in sys.argv[1:]:
  for l in open(fn):
    m=re.match(r"run=\d+ (\w+) uring=(\w+) N=(\d+) wall,user,sys=([\d.]+) ([\d.]+) ([\d.]+) daemon_cpu=([\d.]+) load=([\d.]+)\s*(.*)",l)
    if not m: continue
    k=(m[1],m[2],m[3]); r=rows.setdefault(k,{'wall':[],'walk_cpu':[],'daemon':[],'load':[],'req':[]})
    r['wall'].append(float(m[4])); r['walk_cpu'].append(float(m[5])+float(m[6])); r['daemon'].append(float(m[7])); r['load'].append(float(m[8]))
    q=re.search(r"requests=(\d+)",m[9])
    if q: r['req'].append(int(q[1]))
for k,r in sorted(rows.items()):
    f=lambda v,p=2: (f"{st.median(v):.{p}f} ({min(v):.{p}f}-{max(v):.{p}f})" if v else "-")
    print(f"| {k[0]} | {k[1]} | {k[2]} | {len(r['wall'])} | {f(r['wall'])} | {f(r['walk_cpu'])} | {f(r['daemon'])} | {f(r['req'],0)} | {f(r['load'],1)} |")
