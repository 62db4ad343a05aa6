"""families.png from families.txt: GPU time per step by kernel role, the reference against the project, stage 1
(steps 36-39) and stage 3 (steps 96-99) at world 1.   python3 plot.py  (in this folder)"""
import re
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
tables = re.split(r"^## ", (HERE / "families.txt").read_text(), flags=re.M)[1:]
fig, axes = plt.subplots(1, 2, figsize=(13, 5.5))
for ax, table in zip(axes, tables):
    title = table.splitlines()[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[3:] if line.startswith("| ")
            and "GPU busy" not in line]
    names = [r[0].split(" (")[0] for r in rows][::-1]  # the role, without its kernels
    ref, ours = [float(r[1]) for r in rows][::-1], [float(r[2]) for r in rows][::-1]
    y = range(len(names))
    ax.barh([i + 0.2 for i in y], ref, 0.4, label="reference (PR #233)", color="tab:gray")
    ax.barh([i - 0.2 for i in y], ours, 0.4, label="project (2046776)", color="tab:blue")
    ax.set_yticks(list(y), names, fontsize=8)
    ax.set_xlabel("GPU time, ms per step")
    ax.set_title(f"world 1, one H200: {title}", fontsize=10)
    ax.legend(fontsize=8)
fig.subplots_adjust(left=0.14, right=0.98, wspace=0.55, bottom=0.1, top=0.93)
fig.savefig(HERE / "families.png", dpi=80)
