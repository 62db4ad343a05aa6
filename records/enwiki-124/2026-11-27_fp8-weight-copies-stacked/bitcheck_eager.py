exec(open(".bench/bitcheck.py").read().split("with torch.no_grad():\n    for name")[0])
def bits(t): return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t
with torch.no_grad():
    e = tree_leaves(old())
    for name, f in (("old compiled", lambda: tree_leaves(torch.compile(old, fullgraph=True)())),
                    ("new compiled", lambda: tree_leaves(per_layer(torch.compile(new, fullgraph=True)())))):
        r = f()
        print(name, "vs eager, differing leaves:", [i for i, (x, y) in enumerate(zip(e, r)) if not torch.equal(bits(x), bits(y))][:24])
