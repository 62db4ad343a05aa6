"""Plot training logs as one PNG: validation loss (and this project's training loss) against train time, and
ms/step by stage.

    python3 tools/plot.py LOG [LOG ...] --out FILE.png [--labels a,b]
    python3 tools/plot.py REFERENCE_LOG --scheduled_steps S --out FILE.png   # modded-nanogpt log

Reads this project's train_gpt.py logs and the reference (modded-nanogpt) logs. Ours print
`ms/step by stage`; for a log without it, the stages are recomputed from the per-step train_time lines,
with the bounds train_gpt.py uses: thirds of the S scheduled steps, then the extension to the last step.
S comes from the log's `config:` line, else from --scheduled_steps.
"""
import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

try:
    import matplotlib
    matplotlib.use("Agg")  # write files only: no display needed
    from matplotlib import pyplot as plt
except ImportError:
    plt = None

STAGE_NAMES = ("stage 1", "stage 2", "stage 3", "extension")
# Anchored at line start: the logs begin with the trainer's source code, which holds these strings mid-line.
VAL_LINE = re.compile(r"^step:(\d+)/(\d+) val_loss:(\S+) train_time:(\d+)ms")
STEP_LINE = re.compile(r"^step:(\d+)/(\d+)(?: train_loss:(\S+) grad_norm:\S+)? train_time:(\d+)ms")
STAGE_LINE = re.compile(r"^ms/step by stage: (.*)$")
SCHEDULED = re.compile(r"^config: .*\bnum_scheduled_steps=(\d+)")


@dataclass
class Run:
    val: list[tuple[int, float, float]]  # (step, train time in s, val loss), one per validation line
    train: list[tuple[float, float]]  # (train time in s, training loss) of each step line that has one
    stage_ms: list[float]  # ms/step of stage 1, 2, 3 and the extension, as far as the log got


def parse_log(path, scheduled_steps: int | None = None) -> Run:
    """Read one log. scheduled_steps is needed only for a log with no `ms/step by stage` or `config:` line."""
    val, train, train_ms, stage_ms, total = [], [], {0: 0.0}, None, 0
    for line in Path(path).read_text().splitlines():
        if m := VAL_LINE.match(line):
            val.append((int(m[1]), int(m[4]) / 1000, float(m[3])))
        elif m := STEP_LINE.match(line):
            train_ms[int(m[1])], total = float(m[4]), int(m[2])
            if m[3] is not None:
                train.append((float(m[4]) / 1000, float(m[3])))
        elif m := STAGE_LINE.match(line):
            stage_ms = [float(item.split(":")[1]) for item in m[1].split()]
        elif m := SCHEDULED.match(line):
            scheduled_steps = int(m[1])
    if not val and total == 0:
        raise ValueError(f"{path}: no `step:` lines; is it a training log?")
    if stage_ms is None:
        if scheduled_steps is None:
            raise ValueError(f"{path} has no `ms/step by stage` or `config:` line: "
                             "pass --scheduled_steps S (the steps before the extension)")
        stage_ms = stages_from_steps(train_ms, scheduled_steps, total)
    return Run(val, train, stage_ms)


def stages_from_steps(train_ms: dict[int, float], S: int, total: int) -> list[float]:
    """ms/step per stage from train_ms[n], the train time after n steps; stops at the first stage the log lacks."""
    bounds = [0, round(S / 3), round(2 * S / 3), S] + ([total] if total > S else [])
    stage_ms = []
    for lo, hi in zip(bounds, bounds[1:]):
        if hi not in train_ms:  # log cut short (a crash, or a run still going)
            break
        stage_ms.append((train_ms[hi] - train_ms[lo]) / (hi - lo))
    return stage_ms


def draw(runs: list[Run], labels: list[str], out):
    """Both panels share colors, so one legend below them names each log (and its final loss)."""
    fig, (loss_ax, stage_ax) = plt.subplots(1, 2, figsize=(13, 5), layout="constrained")
    width = 0.8 / len(runs)  # of one bar: each stage's group of bars spans 0.8 of a tick
    for i, (run, label) in enumerate(zip(runs, labels)):
        _, seconds, losses = zip(*run.val) if run.val else ((), (), ())
        final = f"final val loss {losses[-1]:.4f}" if losses else "no validation"
        loss_ax.plot(seconds, losses, marker="o", color=f"C{i}", label=f"{label} ({final})")
        if run.train:
            loss_ax.plot(*zip(*run.train), color=f"C{i}", alpha=0.35, linewidth=0.8)
        x = [stage + (i - (len(runs) - 1) / 2) * width for stage in range(len(run.stage_ms))]
        bars = stage_ax.bar(x, run.stage_ms, width, color=f"C{i}")
        # Side by side, numbers wider than their bar would run together: turn them upright.
        stage_ax.bar_label(bars, fmt="%.0f", fontsize=7, padding=2, rotation=90 if len(runs) > 3 else 0)
    loss_ax.set(title="Loss: validation (dots), training (thin line: MTP-weighted, per token)",
                xlabel="train time (s)", ylabel="loss")
    num_stages = max(len(run.stage_ms) for run in runs)
    stage_ax.set_xticks(range(num_stages), STAGE_NAMES[:num_stages])
    stage_ax.set(title="Time per step by stage", ylabel="ms/step")
    stage_ax.margins(y=0.12)  # room for the bar labels
    loss_ax.grid(alpha=0.3)
    stage_ax.grid(axis="y", alpha=0.3)
    stage_ax.set_axisbelow(True)  # grid lines behind the bars
    fig.legend(loc="outside lower center", ncols=min(len(runs), 3))
    fig.savefig(out, dpi=120)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="+", help="training logs (ours or modded-nanogpt's)")
    parser.add_argument("--out", required=True, help="PNG file to write")
    parser.add_argument("--labels", help="comma-separated names, one per log (default: file stems)")
    parser.add_argument("--scheduled_steps", type=int,
                        help="steps before the extension, for logs with no ms/step or config line")
    args = parser.parse_args(argv)
    if plt is None:
        sys.exit("tools/plot.py needs matplotlib: python3 -m pip install matplotlib")
    labels = args.labels.split(",") if args.labels else [Path(p).stem for p in args.logs]
    if len(labels) != len(args.logs):
        sys.exit(f"--labels names {len(labels)} logs, but {len(args.logs)} were given")
    try:
        runs = [parse_log(p, args.scheduled_steps) for p in args.logs]
    except (OSError, ValueError) as e:
        sys.exit(str(e))
    draw(runs, labels, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
