import sys, json
raw = open("/tmp/p8/raw.jsonl", "a")  # every line is also kept here
for l in sys.stdin:
    raw.write(l); raw.flush()
    if not l.strip(): continue
    b, j = l.split(' ', 1); d = json.loads(j)
    w = sum(v[0] for k, v in d['tcpu'].items() if k != 'python')
    print(f"{b:8} wall {d['wall']:.3f} cpu {d['cpu']:.2f} sys {d.get('sys',0):.2f} flt {d.get('minflt',0)} rd {d['rd_cpu']:.2f}/{d['rd_rq']:.2f}/{d['rd_blk']:.2f} wk {w:.2f} load {d['load']} passed {d['fra'].get('passed')} helped {d['fra'].get('helped')} MB {d['loadedMB']}")
