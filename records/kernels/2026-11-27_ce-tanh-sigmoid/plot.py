"""The picture of this record: the CE kernel's time by micro-batch rows, exact sigmoid against tanh.approx (the
bench_output.txt medians; at N = 16384 and 49152 the mean of the two runs)."""
from matplotlib import pyplot as plt

rows = [16384, 32768, 49152]
exact = [(1.309 + 1.311 + 1.307 + 1.313) / 4, (2.615 + 2.627) / 2, (4.071 + 3.928 + 3.925 + 3.926) / 4]
tanh = [(1.216 + 1.217) / 2, 2.416, (3.615 + 3.644) / 2]
fig, ax = plt.subplots(figsize=(6, 3.6))
x = range(len(rows))
ax.bar([i - 0.2 for i in x], exact, 0.4, label="exact sigmoid (r1 v4096 w16)")
ax.bar([i + 0.2 for i in x], tanh, 0.4, label="tanh.approx (r1 v8192 w16)")
for i, (a, b) in enumerate(zip(exact, tanh)):
    ax.text(i + 0.2, b, f"{b / a:.3f}x", ha="center", va="bottom", fontsize=8)
ax.set_xticks(list(x), [f"{r} x 50304" for r in rows])
ax.set_ylabel("ms (median, L2 flushed)")
ax.set_title("soft-capped CE, bf16 logits -> losses + e5m2 gradient, one H100")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(__file__.replace("plot.py", "ce_tanh.png"), dpi=120)
