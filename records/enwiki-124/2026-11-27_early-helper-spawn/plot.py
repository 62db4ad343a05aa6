"""The picture of the four cold starts: start-up per run, split where the run stopped waiting for the backward helper."""
import re
import sys
import tarfile
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

here = Path(__file__).resolve().parent
runs = ["1_A_cold", "2_B_cold", "3_B_cold", "4_A_cold"]
fig, ax = plt.subplots(figsize=(11, 3.2))
logs = tarfile.open(here / "logs.tar.xz")
for i, run in enumerate(runs):
    text = logs.extractfile(f"{run}.console").read().decode()
    start = float(re.search(r"^startup: ([\d.]+)s", text, re.M).group(1))
    waited = float(re.search(r"the run waited ([\d.]+)s", text).group(1))
    hits = int(re.search(r"(\d+) graphs came from", text).group(1))
    color = "tab:blue" if "_A_" in run else "tab:orange"
    ax.barh(i, start, color=color)
    ax.text(start + 0.5, i, f"{start:.1f} s (waited {waited:.1f} s, {hits} graphs from the cache)", va="center")
ax.set_yticks(range(len(runs)), [f"{r} ({'38ceed4' if '_A_' in r else 'f769d06, early spawn'})" for r in runs])
ax.invert_yaxis()
ax.set_xlim(0, 150)
ax.set_xlabel("start-up from empty caches, s (process start to the first timed step)")
ax.set_title("helpers spawned after (A) or before (B) the run's imports, one H100, in run order")
fig.tight_layout()
fig.savefig(sys.argv[1] if len(sys.argv) > 1 else here / "cold_starts.png", dpi=110)
