"""The picture of sweep_output.txt: ms per config at each stage's N (exp2 on MUFU, poly00), the table's configs marked."""
import re
import sys
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

here = Path(__file__).resolve().parent
rows = re.findall(r"^n=(\d+) K=\d (r\d v\d+ w\d+) s1 poly00: ([\d.]+)$", (here / "sweep_output.txt").read_text(), re.M)
table = {"49152": "r1 v4096 w32", "32768": "r1 v8192 w16", "16384": "r1 v8192 w16"}
fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
for ax, n in zip(axes, ("16384", "32768", "49152")):
    cases = sorted((float(ms), cfg) for m, cfg, ms in rows if m == n)
    ax.barh([c for _, c in cases], [ms for ms, _ in cases],
            color=["tab:orange" if c == table[n] else "tab:blue" for _, c in cases])
    ax.invert_yaxis()
    ax.set_title(f"N = {n} (orange: the table's)")
    ax.set_xlabel("ms (median of three do_bench)")
    ax.set_xlim(0.9 * cases[0][0], 1.02 * cases[-1][0])
fig.suptitle("soft-capped CE with the tanh sigmoid, 50304 columns, e5m2 gradient, one H100")
fig.tight_layout()
fig.savefig(sys.argv[1] if len(sys.argv) > 1 else here / "ce_configs.png", dpi=110)
