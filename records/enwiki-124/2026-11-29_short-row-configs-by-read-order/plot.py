"""The picture of this record: qkcfg.txt's kernel times by launch config, and the traced stage-3 kernels at the two
configs and under the rule by read order (F2 from the fixed-short-row-configs record, Q2 and R1 here).
python3 plot.py -> short_rows.png"""
import re
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
LINE = re.compile(r"paired=(\w+) offset=(\w+) XBLOCK=(\d+) warps=(\d+):.*\| (.*)")
times = {}  # (layout, config) -> (forward us, backward us)
for line in (HERE / "qkcfg.txt").read_text().splitlines():
    m = LINE.match(line)
    if not m:
        continue
    layout = "paired" if m[1] == "True" else ("key offset" if m[2] == "True" else "unpaired")
    kernels = dict(part.rsplit(": ", 1) for part in m[5].split("; "))
    bwd = next(float(t) for n, t in kernels.items() if "backward" in n)
    fwd = next(float(t) for n, t in kernels.items() if "backward" not in n)
    times[(layout, f"{m[3]} x {m[4]}")] = (fwd, bwd)  # the baseline ran in both calls: the later one is kept
configs = sorted({c for _, c in times}, key=lambda c: tuple(int(v) for v in c.split(" x ")))
layouts = ["unpaired", "paired", "key offset"]
# traced stage-3 kernels, ms per traced step (tools/trace_summary.py): F2 (8 x 2), Q2 (2 x 1), R1 (the rule)
traced = [("QK norm fwd, unpaired", 8.69, 6.61, 6.58), ("QK norm fwd, paired", 5.85, 4.55, 4.54),
          ("QK norm bwd, paired", 8.86, 6.99, 6.98), ("QK norm bwd, unpaired", 8.28, 6.88, 6.86),
          ("QK norm bwd, key offset", 5.53, 3.69, 3.65), ("gate bwd (in order)", 3.69, 6.19, 3.69)]
fig, (a, b) = plt.subplots(1, 2, figsize=(15, 5.2))
width = 0.8 / (2 * len(layouts))
for i, layout in enumerate(layouts):
    for j, part in enumerate(("forward", "backward")):
        xs = [k + (2 * i + j - len(layouts)) * width + width / 2 for k in range(len(configs))]
        a.bar(xs, [times[(layout, c)][j] for c in configs], width, label=f"{layout}, {part}",
              hatch="" if j == 0 else "//", color=f"C{i}", alpha=0.9 if j == 0 else 0.6)
a.set_xticks(range(len(configs)), configs)
a.set_xlabel("rows a program x warps")
a.set_ylabel("us a call (profiler)")
a.set_title("QK norm + rotary compiled alone, T = 49,152")
a.legend(fontsize=8, ncol=2)
a.grid(axis="y", alpha=0.3)
ys = range(len(traced))
for k, label in enumerate(("F2: 8 rows x 2 warps", "Q2: 2 rows x 1 warp", "R1: by read order")):
    b.barh([y + 0.27 * (k - 1) for y in ys], [row[k + 1] for row in traced], 0.27, label=label)
b.set_yticks(list(ys), [row[0] for row in traced])
b.invert_yaxis()
b.set_xlabel("ms per traced stage-3 step")
b.set_title("In training (three machines; cuBLAS 1.5% slower on Q2's than F2's)")
b.legend()
b.grid(axis="x", alpha=0.3)
fig.tight_layout()
fig.savefig(HERE / "short_rows.png", dpi=110)
print("wrote", HERE / "short_rows.png")
