import sys
from PySquashfsImage import SquashFsImage
im = SquashFsImage.from_file('bench/work/python/env.sqfs')
root = im.root
def info(f):
    ino = f.inode
    bl = list(ino.block_list or []) if ino.blocks else []
    stored = sum(b & 0xFFFFFF for b in bl)
    frag = ino.fragment if ino.fragment != 0xFFFFFFFF else None
    return ino.start_block if ino.blocks else None, stored, frag, f.size
def kids_of(d):
    return sorted(d.iterdir(), key=lambda e: e.name.encode('utf-8','surrogateescape') if isinstance(e.name,str) else e.name)
def stack_order():
    stack = [root]
    while stack:
        d = stack.pop()
        for e in kids_of(d):
            if e.is_dir: stack.append(e)
            elif e.is_file: yield e
def walk_order():
    todo = [root]
    def rec(d):
        kids = kids_of(d)
        for e in kids:
            if e.is_file: yield e
        for e in kids:
            if e.is_dir: yield from rec(e)
    yield from rec(root)
def image_order():
    def rec(d):
        for e in kids_of(d):
            if e.is_file: yield e
            elif e.is_dir: yield from rec(e)
    yield from rec(root)
for name, order in (('stack', stack_order), ('os.walk', walk_order), ('image', image_order)):
    if 1:
        files = [info(f) for f in order()]
    if 0:
        print(name, 'failed', ex); continue
    starts = sorted(set(f[0] for f in files if f[0] is not None)); rank = {v: i for i, v in enumerate(starts)}
    end = None; follow = 0; follow_bytes = 0; blk_bytes = 0; nb = 0
    lastfrag = None; samefrag = 0; nfr = 0
    for start, stored, frag, size in files:
        if start is not None:
            nb += 1; blk_bytes += size
            if end is not None and rank[start] == end + 1:
                follow += 1; follow_bytes += size
            end = rank[start]
        if frag is not None:
            nfr += 1
            if lastfrag is not None and frag in (lastfrag, lastfrag + 1): samefrag += 1
            lastfrag = frag
    print(f"{name}: files {len(files)}; with blocks {nb} ({blk_bytes/1e6:.0f} MB), of which start where the previous such file's blocks end: {follow} ({follow_bytes/1e6:.0f} MB); with a tail end {nfr}, same or next fragment block as the previous tail: {samefrag}")
