"""The cold starts of this record by phase, from rank 0's warm-up lines: python3 startup_plot.py LOG_DIR OUT.png
(LOG_DIR: where `tar -xJf logs.tar.xz` unpacked the logs)."""
import re
import sys
from pathlib import Path

import matplotlib
matplotlib.use("Agg")  # write the file only: no display needed
from matplotlib import pyplot as plt

# (log, label): per world size, the run compiling the validation graph itself, the backward helper compiling it after
# the backward, and a third helper compiling it from the start
RUNS = (("O1", "world 1: the run compiles it"), ("N1", "world 1: backward helper, after"),
        ("T1", "world 1: validation helper"), ("O2", "world 2: the run compiles it"),
        ("T2", "world 2: validation helper"), ("O4", "world 4: the run compiles it"),
        ("N4", "world 4: backward helper, after"), ("T4", "world 4: validation helper"))
PHASES = ("before the warm-up", "first warm-up step", "other warm-up steps", "validation call", "other ranks")
COLORS = ("#bbbbbb", "#4477aa", "#66ccee", "#ee6677", "#ccbb44")
# The phase boundaries, in seconds from process start; anchored: the logs begin with the source, which holds them too.
MARKS = (r"^warm-up \(untimed\).* starts at ([\d.]+)s", r"^warm-up 1/5:.* done at ([\d.]+)s",
         r"^warm-up 5/5:.* done at ([\d.]+)s", r"^warm-up: validation done at ([\d.]+)s",
         r"^startup: ([\d.]+)s from process start")


def phases(log: Path) -> list[float]:
    text = log.read_text()
    found = [re.search(mark, text, re.M) for mark in MARKS]
    if None in found:
        sys.exit(f"error: {log} lacks a start-up line ({MARKS[found.index(None)]}): not a log of this measurement")
    marks = [float(m.group(1)) for m in found]
    return [marks[0]] + [b - a for a, b in zip(marks, marks[1:])]


def main(log_dir: str, out: str):
    fig, ax = plt.subplots(figsize=(8.5, 4.8), dpi=100)
    for i, (run, _) in enumerate(RUNS):
        left = 0.0
        for j, width in enumerate(phases(Path(log_dir) / f"{run}.txt")):
            ax.barh(i, width, left=left, color=COLORS[j], label=PHASES[j] if i == 0 else None, edgecolor="white")
            if width > 3.5:  # room for its number
                ax.text(left + width / 2, i, f"{width:.1f}", ha="center", va="center", fontsize=8)
            left += width
        ax.text(left + 1, i, f"{left:.1f} s", va="center", fontsize=9)
    ax.set_yticks(range(len(RUNS)), [f"{run}: {label}" for run, label in RUNS], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("seconds from process start (rank 0)")
    ax.set_title("Cold starts: where the validation graph compiles (four H200s, one machine)", fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=8, ncol=3, frameon=False)
    fig.tight_layout()
    fig.savefig(out)


if __name__ == "__main__":
    if len(sys.argv) != 3 or not all((Path(sys.argv[1]) / f"{run}.txt").is_file() for run, _ in RUNS):
        sys.exit(f"error: give LOG_DIR (holding {', '.join(run + '.txt' for run, _ in RUNS)}, from logs.tar.xz) and "
                 "OUT.png: python3 startup_plot.py LOG_DIR OUT.png")
    main(*sys.argv[1:])
