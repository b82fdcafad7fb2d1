"""Medians of large.sh's lines: per build, threads and read_ahead; the speed-up of two threads."""
import json, statistics as st, sys
rows = {}
for f in sys.argv[1:]:
    for l in open(f):
        b, t, ra, j = l.split(' ', 3); d = json.loads(j)
        rows.setdefault((b, ra, t), []).append(d)
for (b, ra, t), ds in sorted(rows.items()):
    m = lambda k: st.median(d[k] for d in ds)
    one = rows.get((b, ra, "t1"))
    extra = ""
    if t == "t2" and one:
        pairs = [a["wall"] / c["wall"] for a, c in zip(one, ds)]
        extra = f" speed-up {st.median(d['wall'] for d in one) / m('wall'):.2f}x (pairs {min(pairs):.2f}-{max(pairs):.2f})"
    print(f"{b:6} {ra:4} {t} n={len(ds)} wall {m('wall'):.3f} ({min(d['wall'] for d in ds):.3f}-{max(d['wall'] for d in ds):.3f}) "
          f"cpu {m('cpu'):.3f} sys {m('sys'):.3f} flt {m('minflt'):.0f} loads {st.median(d['dc']['loads'] for d in ds):.0f} "
          f"resident {st.median(d['dc']['resident_bytes'] for d in ds)/1e6:.0f} MB load {min(d['load'] for d in ds)}-{max(d['load'] for d in ds)}{extra}")
