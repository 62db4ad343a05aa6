"""The picture of the six cold starts: start-up per run, and the run's own Inductor time in it."""
import re
import sys
import tarfile
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

here = Path(__file__).resolve().parent
runs = ["m1_1_A_cold", "m1_2_B_cold", "m1_3_B_cold", "m1_4_A_cold", "m2_1_A_cold", "m2_2_B_cold"]
fig, ax = plt.subplots(figsize=(11, 3.6))
logs = tarfile.open(here / "logs.tar.xz")
for i, run in enumerate(runs):
    text = logs.extractfile(f"{run}.console").read().decode()
    start = float(re.search(r"^startup: ([\d.]+)s", text, re.M).group(1))
    inductor = float(re.search(r"^compile: .*Inductor ([\d.]+)s", text, re.M).group(1))
    waited = float(re.search(r"the run waited ([\d.]+)s", text).group(1))
    color = "tab:blue" if "_A_" in run else "tab:orange"
    ax.barh(i, start, color=color)
    ax.barh(i, inductor, color="black", alpha=0.25)
    ax.text(start + 0.5, i, f"{start:.1f} s (the run's Inductor {inductor:.1f} s, waited {waited:.1f} s)", va="center")
ax.set_yticks(range(len(runs)), [f"{r} ({'657f1a9' if '_A_' in r else 'ade18c2, stacked'})" for r in runs])
ax.invert_yaxis()
ax.set_xlim(0, 110)
ax.set_xlabel("start-up from empty caches, s (process start to the first timed step); grey: the run's Inductor time")
ax.set_title("FP8 weight copies cast per layer (A) or per bank (B), one H100, in run order")
fig.tight_layout()
fig.savefig(sys.argv[1] if len(sys.argv) > 1 else here / "cold_starts.png", dpi=110)
