"""Plot training logs as one PNG: validation loss (and this project's training loss) against train time, and
ms/step by stage.

    python3 tools/plot.py LOG [LOG ...] --out FILE.png [--labels a,b]
    python3 tools/plot.py REFERENCE_LOG --scheduled_steps S --out FILE.png   # modded-nanogpt log
    python3 tools/plot.py LOG [LOG ...] --startup --out FILE.png [--labels a,b]   # start-ups by phase

Reads this project's train_gpt.py logs and the reference (modded-nanogpt) logs. Ours print
`ms/step by stage`; for a log without it, the stages are recomputed from the per-step train_time lines,
with the bounds train_gpt.py uses: thirds of the S scheduled steps, then the extension to the last step.
S comes from the log's `config:` line, else from --scheduled_steps. Each run is named by its --run_id (from the
`config:` line), else by its file name, shortened to 8 characters when it is train_gpt.py's default uuid.
"""
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root, for harness/
from harness import cli  # noqa: E402
from harness.cli import UserError  # noqa: E402
from harness.files import atomic_write, check_output  # noqa: E402

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
STAGE_ITEM = re.compile(r"\d+:(\S+)")
SCHEDULED = re.compile(r"^config: .*\bnum_scheduled_steps=(\d+)")
RUN_ID = re.compile(r"^config: .*\brun_id='([^']*)'")
UUID = re.compile(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}")  # train_gpt.py's run_id when none is given
# --startup: rank 0's start-up lines (seconds from process start) and the phases between them
SECONDS = r"(?P<s>\d+(?:\.\d+)?)s"
STARTUP_LINES = {"warm-up (untimed): ... starts at": r"^warm-up \(untimed\).* starts at ",
                 "warm-up 1/N: ... done at": r"^warm-up 1/\d+:.* done at ",
                 "warm-up N/N: ... done at": r"^warm-up (\d+)/\1:.* done at ",
                 "warm-up: validation done at": r"^warm-up: validation done at ", "startup:": r"^startup: "}
STARTUP_PHASES = ("before the warm-up", "first warm-up step", "other warm-up steps", "validation call", "other ranks")
STARTUP_COLORS = ("#bbbbbb", "#4477aa", "#66ccee", "#ee6677", "#ccbb44")


@dataclass
class Run:
    val: list[tuple[int, float, float]]  # (step, train time in s, val loss), one per validation line
    train: list[tuple[float, float]]  # (train time in s, training loss) of each step line that has one
    stage_ms: list[float]  # ms/step of stage 1, 2, 3 and the extension, as far as the log got
    run_id: str = ""  # from the config line; "" for a log without one
    train_ms: dict[int, float] = field(default_factory=dict)  # step n -> train time after it (ms), from step lines
    scheduled_steps: int | None = None  # from the config line (or as given); None where neither said


def parse_log(path, scheduled_steps: int | None = None) -> Run:
    """Read one log. scheduled_steps is needed only for a log with no `ms/step by stage` or `config:` line.
    Raises UserError naming the file and line when the log is malformed or holds nothing to plot."""
    val, train, train_ms, stage_ms, total, run_id = [], [], {0: 0.0}, None, 0, ""
    # errors="replace": a stray byte (a log cut mid-character) is no reason to refuse the rest
    for line_no, line in enumerate(Path(path).read_text(errors="replace").splitlines(), 1):
        where = f"{path}:{line_no}"
        if m := VAL_LINE.match(line):
            val.append((int(m[1]), int(m[4]) / 1000, _loss(m[3], where)))
        elif m := STEP_LINE.match(line):
            train_ms[int(m[1])], total = float(m[4]), int(m[2])
            if m[3] is not None:
                train.append((float(m[4]) / 1000, _loss(m[3], where)))
        elif m := STAGE_LINE.match(line):
            items = [STAGE_ITEM.fullmatch(item) for item in m[1].split()]
            try:
                if not items or None in items:
                    raise ValueError(f"{m[1][:60]!r} is not `1:<ms> 2:<ms> ...`")
                stage_ms = [cli.number(item[1]) for item in items]
            except ValueError as e:
                raise UserError(f"{where}: ms/step by stage: {e}; is the log cut or edited?") from None
        elif m := SCHEDULED.match(line):
            scheduled_steps = int(m[1])
            if scheduled_steps < 3:
                raise UserError(f"{where}: num_scheduled_steps={scheduled_steps}, but a run has at least 3 (one per "
                                "stage); is the log edited?")
        if m := RUN_ID.match(line):
            run_id = m[1]
    if not val and total == 0:
        raise UserError(f"{path}: no `step:` lines; is it a training log?")
    if stage_ms is None:
        if scheduled_steps is None:
            raise UserError(f"{path} has no `ms/step by stage` or `config:` line: "
                            "pass --scheduled_steps S (the steps before the extension)")
        stage_ms = stages_from_steps(train_ms, scheduled_steps, total, path)
    if not (val or train or stage_ms):
        raise UserError(f"{path}: no validation, training loss or whole stage to plot yet; is the run still starting?")
    return Run(val, train, stage_ms, run_id, train_ms, scheduled_steps)


def _loss(text: str, where: str) -> float:
    """A loss as logged: NaN and inf are kept (a run that diverged logs them), anything else not a number is not."""
    try:
        return float(text)
    except ValueError:
        raise UserError(f"{where}: loss {text!r} is not a number; is the log cut or edited?") from None


def label(path, run: Run) -> str:
    """The run's --run_id, else the file name, shortened when it is train_gpt.py's default uuid."""
    if run.run_id and not UUID.fullmatch(run.run_id):
        return run.run_id
    stem = Path(path).stem
    return stem[:8] if UUID.fullmatch(stem) else stem


def stage_bounds(S: int, total: int) -> list[int]:
    """The steps where train_gpt.py's stages end (thirds of the S scheduled steps, then the extension), after 0."""
    return [0, round(S / 3), round(2 * S / 3), S] + ([total] if total > S else [])


def stages_from_steps(train_ms: dict[int, float], S: int, total: int, path) -> list[float]:
    """ms/step per stage from train_ms[n], the train time after n steps; stops at the first stage the log lacks."""
    bounds = stage_bounds(S, total)
    stage_ms = []
    for lo, hi in zip(bounds, bounds[1:]):
        if hi not in train_ms:  # log cut short (a crash, or a run still going)
            break
        if train_ms[hi] <= train_ms[lo]:
            raise UserError(f"{path}: train_time does not grow from step {lo} to step {hi}; is it more than one run "
                            "in one log, or the wrong --scheduled_steps?")
        stage_ms.append((train_ms[hi] - train_ms[lo]) / (hi - lo))
    return stage_ms


def stalls(train_ms: dict[int, float], S: int, factor: float = 2.0) -> list[tuple[int, float, float]]:
    """(step, its ms, its stage's median step ms) of each step that took over `factor` times its stage's median:
    a stall (a host hiccup, a late compile or capture) that a train time counts and a ratio should be read with."""
    steps = sorted(n for n in train_ms if n - 1 in train_ms)
    bounds = stage_bounds(S, max(steps, default=0))
    found = []
    for lo, hi in zip(bounds, bounds[1:]):
        ms = {n: train_ms[n] - train_ms[n - 1] for n in steps if lo < n <= hi}
        if ms:
            median = statistics.median(ms.values())
            found += [(n, t, median) for n, t in ms.items() if t > factor * median]
    return found


def stall_line(runs: list[tuple[str, dict[int, float], int]]) -> str:
    """One line naming every stall of the runs, each (name, train_ms, scheduled steps), with what it cost (the
    reference's step 2 once took 482 ms against 168, 1.1% of a world-2 line:
    records/enwiki-124/2026-11-30_vs-reference-world2-a39cf15)."""
    found = [f"{name} step {n} {ms:.0f} ms (its stage's median {median:.0f}, +{(ms - median) / 1000:.2f} s)"
             for name, train_ms, S in runs for n, ms, median in stalls(train_ms, S)]
    return "stalls (steps over twice their stage's median): " + ("; ".join(found) if found else "none")


def startup_phases(path) -> list[float]:
    """Seconds of each STARTUP_PHASES phase in a train_gpt.py log of a warm-up (the log's first run)."""
    text = Path(path).read_text(errors="replace")
    found = {line: re.search(pattern + SECONDS, text, re.M) for line, pattern in STARTUP_LINES.items()}
    if missing := [line for line, m in found.items() if m is None]:
        raise UserError(f"{path}: no `{missing[0]}` line; --startup reads train_gpt.py logs whose warm-up ran to the "
                        "first timed step")
    marks = [float(m["s"]) for m in found.values()]
    phases = [marks[0]] + [b - a for a, b in zip(marks, marks[1:])]
    if min(phases) < 0:
        raise UserError(f"{path}: the start-up lines' times do not grow ({', '.join(map(str, marks))} s); is it more "
                        "than one run in one log?")
    return phases


def draw_startup(runs: list[list[float]], labels: list[str], out):
    """One bar per log, its phases stacked, each wide enough labelled with its seconds, the total beside it."""
    fig, ax = plt.subplots(figsize=(9, 1.4 + 0.45 * len(runs)), layout="constrained")
    for i, phases in enumerate(runs):
        left = 0.0
        for j, width in enumerate(phases):
            ax.barh(i, width, left=left, color=STARTUP_COLORS[j], edgecolor="white",
                    label=STARTUP_PHASES[j] if i == 0 else None)
            if width > 3.5:  # room for its number
                ax.text(left + width / 2, i, f"{width:.1f}", ha="center", va="center", fontsize=8)
            left += width
        ax.text(left + 0.5, i, f"{left:.1f} s", va="center", fontsize=9)
    ax.set_yticks(range(len(runs)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.margins(x=0.1)  # room for the totals
    ax.set(title="Start-up by phase: process start to the first timed step (rank 0)",
           xlabel="seconds from process start")
    fig.legend(loc="outside lower center", ncols=3, fontsize=8)
    try:
        atomic_write(out, lambda f: fig.savefig(f, format="png", dpi=100))
    finally:
        plt.close(fig)


def draw(runs: list[Run], labels: list[str], out):
    """Both panels share colors, so one legend below them names each log (and its final loss)."""
    fig, (loss_ax, stage_ax) = plt.subplots(1, 2, figsize=(13, 5), layout="constrained")
    width = 0.8 / len(runs)  # of one bar: each stage's group of bars spans 0.8 of a tick
    colors = plt.get_cmap("tab10" if len(runs) <= 10 else "tab20").colors  # tab10's cycle repeats after 10 logs
    for i, (run, label) in enumerate(zip(runs, labels)):
        color = colors[i % len(colors)]
        _, seconds, losses = zip(*run.val) if run.val else ((), (), ())
        final = f"final val loss {losses[-1]:.4f}" if losses else "no validation"
        loss_ax.plot(seconds, losses, marker="o", color=color, label=f"{label} ({final})")
        if run.train:
            loss_ax.plot(*zip(*run.train), color=color, alpha=0.35, linewidth=0.8)
        x = [stage + (i - (len(runs) - 1) / 2) * width for stage in range(len(run.stage_ms))]
        bars = stage_ax.bar(x, run.stage_ms, width, color=color)
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
    try:
        atomic_write(out, lambda f: fig.savefig(f, format="png", dpi=120))
    finally:
        plt.close(fig)


@cli.program
def main(argv=None):
    parser = cli.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="+", help="training logs (ours or modded-nanogpt's)")
    parser.add_argument("--out", required=True, help="PNG file to write (its name ends in .png)")
    parser.add_argument("--labels", help="comma-separated names, one per log (default: each run's --run_id, else its "
                                         "file name, a uuid shortened to 8 characters)")
    parser.add_argument("--scheduled_steps", type=cli.whole(3),
                        help="steps before the extension, for logs with no ms/step or config line")
    parser.add_argument("--startup", action="store_true",
                        help="plot each log's start-up by phase instead (train_gpt.py logs with a `startup:` line)")
    args = parser.parse_args(argv)
    if plt is None:
        raise UserError("tools/plot.py needs matplotlib: python3 -m pip install matplotlib")
    out = Path(args.out)
    if out.suffix.lower() != ".png":
        raise UserError(f"--out {out}: the plot is a PNG; give a file name ending in .png")
    check_output(out, args.logs)
    labels = args.labels.split(",") if args.labels else None
    if labels and len(labels) != len(args.logs):
        raise UserError(f"--labels names {len(labels)} logs, but {len(args.logs)} were given")
    if args.startup:
        draw_startup([startup_phases(p) for p in args.logs], labels or [Path(p).stem for p in args.logs], out)
    else:
        runs = [parse_log(p, args.scheduled_steps) for p in args.logs]
        draw(runs, labels or [label(p, run) for p, run in zip(args.logs, runs)], out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
