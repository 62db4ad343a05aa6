"""The launch configs Inductor kept for each autotuned kernel of a compile: every *.best_config under each cache
dir named, with the kernel's name from the .py beside it. With several dirs, prints the kernels whose picks differ.
    python3 picks.py CACHE_DIR [CACHE_DIR ...]"""
import json, re, sys
from pathlib import Path

def picks(root):
    out = {}
    for bc in Path(root).rglob("*.best_config"):
        names = [m for py in bc.parent.glob("*.py") for m in re.findall(r"^def (triton_\w+)\(", py.read_text(errors="replace"), re.M)]
        cfg = json.loads(bc.read_text())
        keep = {k: v for k, v in cfg.items() if k.isupper() or k in ("num_warps", "num_stages")}
        src = "|".join(sorted(set(names))) or bc.name
        out[re.sub(r"_\d+(\||$)", r"\1", src) + " @" + bc.parent.name[:6]] = keep
    return out

sets = [picks(d) for d in sys.argv[1:]]
for d, s in zip(sys.argv[1:], sets):
    print(f"{d}: {len(s)} autotuned kernels")
if len(sets) > 1:
    keys = set.intersection(*(set(s) for s in sets))
    n = 0
    for k in sorted(keys):
        vals = [json.dumps(s[k], sort_keys=True) for s in sets]
        if len(set(vals)) > 1:
            n += 1
            print(k[:110]); [print("   ", v) for v in vals]
    print(f"{n} of {len(keys)} kernels found in every dir differ")
else:
    for k, v in sorted(sets[0].items()):
        print(k[:110], v)
