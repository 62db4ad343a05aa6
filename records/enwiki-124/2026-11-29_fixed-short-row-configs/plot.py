"""timings.png: the QK norm's two forward kernels, as Inductor timed their candidates at first launch in four cold
starts (autotune_timings.txt) against their time a call in stage-3 traces (F2_trace_summary.txt here; the
2026-11-29 relu-square-backward-warp-specialized record's trace_stage3_main.txt and trace_stage3_hopper.txt).
    python3 plot.py"""
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

KERNELS = ("..._add_arange_flip_index_..._7", "..._add_flip_mul_slice_..._15")
TIMED = {  # run (tokens a micro-batch at first launch): {kernel: (XBLOCK 1, XBLOCK 8)} in us
    "H1 (16,384)": ((432.0, 429.8), (421.9, 404.0)),
    "H2 (16,384)": ((394.3, 369.6), (414.9, 365.6)),
    "NL1 (49,152)": ((499.9, 366.7), (332.8, 334.7)),
    "NL2 (49,152)": ((440.4, 263.4), (527.8, 503.2)),
}
TRACED = {  # trace: {kernel: us a call} at 49,152 tokens
    "XBLOCK 8, fixed (F2)": (5.85e3 / 44, 8.69e3 / 66),
    "XBLOCK 8, drawn (main)": (5.90e3 / 44, 8.76e3 / 66),
    "XBLOCK 1, drawn (branch)": (8.64e3 / 44, 12.94e3 / 66),
}

fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
for k, name in enumerate(KERNELS):
    ax = axes[k]
    xs = range(len(TIMED))
    ax.bar([x - 0.2 for x in xs], [v[k][0] for v in TIMED.values()], 0.4, label="timed: XBLOCK 1", color="#c44")
    ax.bar([x + 0.2 for x in xs], [v[k][1] for v in TIMED.values()], 0.4, label="timed: XBLOCK 8", color="#48c")
    for (label, us), style in zip(TRACED.items(), ("-", "--", ":")):
        ax.axhline(us[k], color="k", linestyle=style, label=f"in a trace: {label}")
    ax.set_xticks(list(xs), list(TIMED), fontsize=8)
    ax.set_title(f"QK norm forward {name}", fontsize=9)
axes[0].set_ylabel("us a call")
fig.legend(*axes[0].get_legend_handles_labels(), fontsize=8, loc="lower center", ncol=5)
fig.suptitle("Inductor's first-launch timing of the candidates (bars) against the kernel's own time (lines)")
fig.tight_layout(rect=(0, 0.07, 1, 1))
fig.savefig("timings.png", dpi=80)
