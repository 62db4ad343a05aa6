"""The picture: final val loss per seed for the exact math, the FP8 numerics, and the FP8 numerics with dW in FP8."""
import re
import sys
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

here = Path(__file__).resolve().parent
base = here.parent / "2026-11-27_vs-reference-fcc1802"
sides = {"exact math (fcc1802)": [base / f"project_E{s}{'_cold_start' if s == 0 else ''}.console" for s in range(3)],
         "FP8 numerics (fcc1802)": [base / f"project_P{s}{'_cold_start' if s == 0 else ''}.console" for s in range(3)],
         "+ MLP dW in FP8": [here / f"mlp_seed{s}.console" for s in range(3)],
         "+ MLP and QKV dW in FP8": [here / f"mlp_qkv_seed{s}.console" for s in range(3)]}
fig, ax = plt.subplots(figsize=(8, 3.6))
for i, (label, paths) in enumerate(sides.items()):
    losses = [float(re.search(r"124/124 val_loss:([\d.]+)", p.read_text()).group(1)) for p in paths]
    for seed, loss in enumerate(losses):
        ax.scatter(i, loss, marker="os^"[seed], color=f"C{i}", s=50, label=f"seed {seed}" if i == 0 else None)
    ax.hlines(sorted(losses)[1], i - 0.25, i + 0.25, color=f"C{i}")
ax.set_xticks(range(len(sides)), list(sides), fontsize=8)
ax.set_ylabel("val loss after 124 steps")
ax.set_title("enwiki-124, one H100 (lines: medians of three seeds)")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(sys.argv[1] if len(sys.argv) > 1 else here / "losses.png", dpi=110)
