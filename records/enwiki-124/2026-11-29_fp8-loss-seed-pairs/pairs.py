"""This record's table and picture from its logs: the FP8 numerics (P) and the exact math (E) seed by seed, and the
exact math on a 5% shorter schedule (L), which prices a loss difference in train time.

    tar -xJf logs.tar.xz && python3 pairs.py logs > pairs.txt   # from this folder; writes pairs.png
"""
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from harness import cli  # noqa: E402
from harness.cli import UserError  # noqa: E402
from tools import stats  # noqa: E402
from tools.vs_reference import project_run  # noqa: E402


def arm(logs: Path, prefix: str, fp8: bool) -> dict:
    runs = [project_run(f, fp8) for f in sorted(logs.glob(f"{prefix}[0-9]*.txt"))]
    if len(runs) < 2:
        raise UserError(f"{logs}: {len(runs)} finished {prefix}*.txt logs; give the logs/ folder of this record")
    return {r["seed"]: r for r in runs}


def compare(name: str, a: dict, b: dict, key: str, spec: str):
    seeds = sorted(set(a) & set(b))
    pa, pb = [a[s][key] for s in seeds], [b[s][key] for s in seeds]
    paired, welch = stats.paired(pa, pb), stats.difference(list(a[s][key] for s in a), list(b[s][key] for s in b))
    print(f"{name}, seeds {seeds[0]}-{seeds[-1]} ({len(seeds)} pairs): mean {paired.estimate:{spec}}, 95% interval "
          f"{stats.interval_text(paired, spec)} (paired t, df {paired.df}), one-sided p {paired.p_higher:.2g}, "
          f"sd of the differences {statistics.stdev(y - x for x, y in zip(pa, pb)):{spec.lstrip('+')}}; "
          f"Welch over all runs: {welch.estimate:{spec}} {stats.interval_text(welch, spec)}, p {welch.p_higher:.2g}")
    return paired


@cli.program
def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        raise UserError(f"usage: python3 pairs.py LOGS_DIR (the folder logs.tar.xz unpacks into); got {args}")
    logs = Path(args[0])
    e, p, short = arm(logs, "E", False), arm(logs, "P", True), arm(logs, "L", False)
    print("| seed | exact (E) | FP8 (P) | P - E | exact, 114 scheduled steps (L) | L - E | train time E / P / L |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for s in sorted(set(e) | set(p) | set(short)):
        cell = lambda d: f"{d[s]['loss']:.4f}" if s in d else ""  # noqa: E731
        diff = lambda d: f"{d[s]['loss'] - e[s]['loss']:+.4f}" if s in d and s in e else ""  # noqa: E731
        times = " / ".join(f"{d[s]['train_s']:.2f}" if s in d else "-" for d in (e, p, short))
        print(f"| {s} | {cell(e)} | {cell(p)} | {diff(p)} | {cell(short)} | {diff(short)} | {times} s |")
    for name, d in (("E", e), ("P", p), ("L", short)):
        print(f"{name}: {len(d)} runs, median loss {statistics.median(r['loss'] for r in d.values()):.4f}, "
              f"median train time {statistics.median(r['train_s'] for r in d.values()):.2f} s")
    print()
    fp8 = compare("val loss P - E", e, p, "loss", "+.4f")
    cut = compare("val loss L - E", e, short, "loss", "+.4f")
    seeds = sorted(set(e) & set(short))
    mean_s = {name: statistics.fmean(d[s]["train_s"] for s in seeds) for name, d in (("E", e), ("L", short))}
    time_cut = 1 - mean_s["L"] / mean_s["E"]
    per_percent = cut.estimate / (100 * time_cut)
    median_s = {name: statistics.median(r["train_s"] for r in d.values()) for name, d in (("E", e), ("P", p))}
    saved = 1 - median_s["P"] / median_s["E"]
    print(f"L's schedule runs {100 * time_cut:.2f}% less train time than E's (means over its seeds): "
          f"{per_percent:.4f} of val loss per 1% of train time near this schedule's end")
    print(f"FP8's loss cost, priced so: {fp8.estimate / per_percent:.2f}% of train time (its interval's ends "
          f"{fp8.low / per_percent:+.2f}% and {fp8.high / per_percent:+.2f}%); FP8 saves {100 * saved:.1f}% "
          "(medians of P and E)")
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, d, color in (("exact math (E)", e, "tab:blue"), ("FP8 (P)", p, "tab:red"),
                           ("exact, 5% shorter schedule (L)", short, "tab:gray")):
        seeds = sorted(d)
        ax.plot(seeds, [d[s]["loss"] for s in seeds], "o-", color=color, label=name, lw=1)
    ax.set_xlabel("seed")
    ax.set_ylabel("final val loss")
    ax.set_title("enwiki-124 at world 1 (one H200 a run): final val loss by seed")
    ax.legend(loc="center right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(Path(__file__).with_name("pairs.png"), dpi=120)


if __name__ == "__main__":
    main()
