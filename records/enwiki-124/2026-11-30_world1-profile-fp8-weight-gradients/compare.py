"""families.txt and families.png: GPU time per world-1 step by kernel family, main before the FP8 weight gradients
(2046776, the kernels-vs-reference-world1 record's summaries) against main with them (360b8d6, this folder's), stage 1
(steps 36-39) and stage 3 (96-99).   python3 compare.py  (in this folder)"""
import re
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
BEFORE = HERE.parent / "2026-11-30_kernels-vs-reference-world1"
ROW = re.compile(r"^\s+([\d.]+) ms/step\s+[\d.]+%\s+(.+)$")


def families(path: Path) -> dict[str, float]:
    """The 'by family' section of a trace summary: family -> ms per step."""
    text = path.read_text().split("by family:\n")[1].split("\n\n")[0]
    return {m[2].strip(): float(m[1]) for m in map(ROW.match, text.splitlines()) if m}


lines, fig, axes = [], *plt.subplots(1, 2, figsize=(13, 5.5))
for ax, (stage, name) in zip(axes, [("stage 1", "P36_trace_summary.txt"), ("stage 3", "P96_trace_summary.txt")]):
    before, after = families(BEFORE / name), families(HERE / name)
    names = sorted(set(before) | set(after), key=lambda f: -max(before.get(f, 0), after.get(f, 0)))
    names = [f for f in names if max(before.get(f, 0), after.get(f, 0)) >= 1.0]
    lines += [f"## {stage}", "", "| family | before (2046776) | after (360b8d6) | after - before |", "| --- | --- | --- | --- |"]
    lines += [f"| {f} | {before.get(f, 0):.1f} | {after.get(f, 0):.1f} | {after.get(f, 0) - before.get(f, 0):+.1f} |"
              for f in names]
    total_b, total_a = sum(before.values()), sum(after.values())
    lines += [f"| **all families** | **{total_b:.1f}** | **{total_a:.1f}** | **{total_a - total_b:+.1f}** |", ""]
    y = range(len(names))[::-1]
    ax.barh([i + 0.2 for i in y], [before.get(f, 0) for f in names], 0.4, label="before (2046776)", color="tab:gray")
    ax.barh([i - 0.2 for i in y], [after.get(f, 0) for f in names], 0.4, label="after (360b8d6)", color="tab:blue")
    ax.set_yticks(list(y), [f[:40] for f in names], fontsize=8)
    ax.set_xlabel("GPU time, ms per step")
    ax.set_title(f"world 1, one H200: {stage}", fontsize=10)
    ax.legend(fontsize=8)
(HERE / "families.txt").write_text("\n".join(lines))
fig.subplots_adjust(left=0.24, right=0.98, wspace=0.6, bottom=0.1, top=0.93)
fig.savefig(HERE / "families.png", dpi=80)
