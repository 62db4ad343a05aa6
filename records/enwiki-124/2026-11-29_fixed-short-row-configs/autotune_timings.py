"""Inductor's runtime timings of launch-config candidates, per kernel and cold start, from the logs that
autotune_log.py wrote (one file per process, DIR/RUN/PID.txt): the main process's kernels with 2+ candidates.
    python3 autotune_timings.py DIR"""
import re, sys
from pathlib import Path

HEAD = re.compile(r"argv='(?P<argv>[^']*)' fn=(?P<fn>\S+) mutated=(?P<mut>\[[^]]*\]) args=\[\((?P<first>[^)]*)\)")
CAND = re.compile(r"^\s+\{'XBLOCK': (\d+)[^}]*\} w(\d+): ([\d.inf]+) us")

def runs(root):
    for run in sorted(Path(root).iterdir()):
        for log in sorted(run.glob("*.txt")):
            kernel = None
            for line in log.read_text().splitlines():
                m = HEAD.search(line)
                if m:
                    if kernel and len(kernel[3]) > 1:
                        yield kernel
                    main = m["argv"].startswith("train_gpt.py")  # torchrun's child; helpers name the full path
                    kernel = (run.name, "main" if main else "helper", m["fn"], {}, m["mut"], m["first"])
                elif kernel and (c := CAND.match(line)):
                    kernel[3][int(c[1])] = float(c[3])
            if kernel and len(kernel[3]) > 1:
                yield kernel

rows = list(runs(sys.argv[1]))
print("run  process  kernel (first tensor argument's shape; in-place arguments)  ->  us a call by rows a program "
      "(XBLOCK), picked *")
for run, proc, fn, cands, mut, first in rows:
    if not fn.startswith("triton_per"):
        continue
    best = min(cands, key=cands.get)
    timing = "  ".join(f"{x}:{'inf' if t == float('inf') else f'{t:.1f}'}{'*' if x == best else ''}"
                       for x, t in sorted(cands.items()))
    print(f"{run:4} {proc:6} {fn[:96]} ({first}; {mut})  ->  {timing}")
