"""The record's picture from bench_output.txt: python3 plot.py (in this folder)."""
import re
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

text = open("bench_output.txt").read()
triton = {}  # (T, pass) -> us, the first of the two passes' Triton lines for each T
for t, f, b in re.findall(r"T=(\d+): triton fwd ([\d.]+) us, bwd ([\d.]+) us", text):
    triton.setdefault((int(t), "fwd"), float(f))
    triton.setdefault((int(t), "bwd"), float(b))
gluon = {(int(t), p, int(w)): float(us) for t, p, w, us in
         re.findall(r"T=(\d+) gluon (\w+) stages=3 regs=\(232, 40\) pw=(\d) maxnreg=168 copies=1: ([\d.]+) us", text)}
fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
for ax, p in zip(axes, ("bwd", "fwd")):
    tokens = (16384, 49152)
    series = [("Triton kernel (main)", [triton[(t, p)] for t in tokens]),
              ("warp-specialized, 1 loader warp", [gluon[(t, p, 1)] for t in tokens]),
              ("warp-specialized, 4 loader warps", [gluon[(t, p, 4)] for t in tokens])]
    for i, (label, ys) in enumerate(series):
        bars = ax.bar([x + 0.27 * (i - 1) for x in range(len(tokens))], ys, 0.27, label=label)
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks(range(len(tokens)), [f"{t:,} tokens" for t in tokens])
    ax.set_title({"bwd": "FP8 backward (d_pre, its e4m3 copy)", "fwd": "FP8 forward (post, its e4m3 copy)"}[p],
                 fontsize=9)
    ax.set_ylabel("us per call (median)")
axes[0].legend(fontsize=7, loc="upper left")
fig.suptitle("ReLU² kernels, one H200 (outputs bit-identical to the Triton kernel's)", fontsize=10)
fig.tight_layout()
fig.savefig("relu_square_ws.png", dpi=110)
