"""Medians of each build's runs in the .jsonl files given (lines written by sum.py)."""
import json, statistics as st, sys
for f in sys.argv[1:]:
    rows = {}
    for l in open(f):
        b, j = l.split(' ', 1); d = json.loads(j)
        rows.setdefault(b, []).append(d)
    print(f)
    for b, ds in rows.items():
        m = lambda k: st.median(d[k] for d in ds)
        wk = st.median(sum(v[0] for k, v in d['tcpu'].items() if k != 'python') for d in ds)
        loads = [d['load'] for d in ds]
        print(f"  {b:6} n={len(ds)} wall {m('wall'):.3f} (min {min(d['wall'] for d in ds):.3f}) cpu {m('cpu'):.2f} "
              f"sys {m('sys'):.2f} flt {m('minflt'):.0f} rd {m('rd_cpu'):.2f}/{m('rd_rq'):.2f}/{m('rd_blk'):.2f} "
              f"wk {wk:.2f} MB {m('loadedMB'):.0f} passed {st.median(d['fra']['passed'] for d in ds):.0f} "
              f"helped {st.median(d['fra']['helped'] for d in ds):.0f} load {min(loads)}-{max(loads)}")
