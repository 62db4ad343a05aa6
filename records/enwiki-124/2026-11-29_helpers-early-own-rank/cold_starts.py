"""This record's table, effect and picture from its logs: every cold start's start-up line, side (A: main, B: the
change; S: sampled), order within its call, and the change's effect fitted with a linear drift per call.

    tar -xJf logs.tar.xz && python3 cold_starts.py logs > cold_starts.txt   # from this folder; writes cold_starts.png
"""
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from harness import cli  # noqa: E402
from harness.cli import UserError  # noqa: E402

WHAT = {"call1": "B: helpers spawned before the imports (rank 0's share)",
        "call2": "S: as call1's B, stacks sampled",
        "call3": "B: spawned before the imports and running their own rank (8f2e81c)",
        "call4": "B: as call3's; SB sampled"}
PATTERNS = {"start": r"^startup: ([0-9.]+)s", "warmup_from": r"^warm-up \(untimed\).* starts at ([0-9.]+)s",
            "step0": r"^warm-up 1/7: .* done at ([0-9.]+)s", "waited": r"the run waited ([0-9.]+)s for the backward",
            "validation": r"^warm-up: validation done at ([0-9.]+)s"}


def read_call(folder: Path) -> list[dict]:
    walls = folder / "walls.txt"
    if not walls.is_file():
        raise UserError(f"{walls}: missing; give the logs/ folder that logs.tar.xz unpacks into")
    runs = []
    for order, line in enumerate(walls.read_text().split()[::4]):  # "NAME rc= wall= at=" per run
        text = (folder / f"{line}.txt").read_text()
        run = dict(call=folder.name, name=line, order=order, side=line.lstrip("C")[0])
        for key, pattern in PATTERNS.items():
            found = re.findall(pattern, text, re.M)
            if not found:
                raise UserError(f"{folder / line}.txt: no line matching {pattern!r}; is it a cold start's log?")
            run[key] = float(found[-1])
        runs.append(run)
    return runs


def effect(runs: list[dict]) -> tuple[float, float]:
    """B minus A in seconds and its standard error, with an intercept and a linear drift per call."""
    calls = sorted({r["call"] for r in runs})
    X = np.array([[r["call"] == c for c in calls] + [r["order"] * (r["call"] == c) for c in calls] + [r["side"] == "B"]
                  for r in runs], dtype=float)
    y = np.array([r["start"] for r in runs])
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    residual = y - X @ coef
    cov = residual @ residual / (len(y) - X.shape[1]) * np.linalg.inv(X.T @ X)
    return coef[-1], cov[-1, -1] ** 0.5


@cli.program
def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        raise UserError(f"usage: python3 cold_starts.py LOGS_DIR (the folder logs.tar.xz unpacks into); got {args}")
    logs = Path(args[0])
    runs = [run for call in sorted(WHAT) for run in read_call(logs / call)]
    print("| call | run | side | warm-up from | step 0 done | rank 0 waited for the backward | validation done | start-up |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in runs:
        print(f"| {r['call']} | {r['name']} | {r['side']} | {r['warmup_from']:.1f} | {r['step0']:.1f} | {r['waited']:.1f} | "
              f"{r['validation']:.1f} | **{r['start']:.1f}** |")
    for calls in (["call1"], ["call3", "call4"]):
        chosen = [r for r in runs if r["call"] in calls and r["side"] in "AB"]
        est, se = effect(chosen)
        medians = {s: np.median([r["start"] for r in chosen if r["side"] == s]) for s in "AB"}
        print(f"{' and '.join(calls)}: B - A {est:+.2f} s (standard error {se:.2f}, a drift per call fitted); "
              f"medians A {medians['A']:.1f} s, B {medians['B']:.1f} s ({len(chosen)} cold starts)")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(WHAT), figsize=(12, 3.6), sharey=True)
    for ax, (call, what) in zip(axes, WHAT.items()):
        for side, colour in (("A", "tab:gray"), ("B", "tab:blue"), ("S", "tab:orange")):
            mine = [r for r in runs if r["call"] == call and r["side"] == side]
            ax.scatter([r["order"] for r in mine], [r["start"] for r in mine], color=colour, label=side, zorder=3)
        ax.set_title(f"{call}\n{what}", fontsize=8)
        ax.set_xlabel("cold start, in call order")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("start-up (s), world 2")
    axes[0].legend(title="A: main", fontsize=8)
    fig.tight_layout()
    fig.savefig(Path(__file__).with_name("cold_starts.png"), dpi=90)
    return 0


if __name__ == "__main__":
    sys.exit(main())
