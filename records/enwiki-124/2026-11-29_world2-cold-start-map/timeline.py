"""Phases of a cold start from the stack samples of sitecustomize.py (this folder): for each process, the time in
each phase and its timeline, on the clock of the earliest process (the run's rank 0 started first).

    tar -xJf samples.tar.xz && python3 timeline.py samples/*.txt > timeline.txt   # and timeline.png beside it

A sample's phase is the innermost frame that matches one of PHASES (substrings of `function@file`), else `other`.
"""
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from harness import cli  # noqa: E402
from harness.cli import UserError  # noqa: E402

PERIOD_S = 0.05  # the sampler's
PHASES = [  # innermost match wins
    ("wait@compile_helpers", "waits for a helper"), ("_aot_stage2b_bw_compile", "backward: passes before lowering"),
    ("wait@async_compile", "Triton compiles (waits)"), ("codegen@scheduler", "Inductor codegen"),
    ("__init__@scheduler", "Inductor scheduling"), ("run@graph.py", "Inductor lowering"),
    ("compile_to_module", "Inductor module"), ("autotune", "Inductor autotuning"),
    ("fw_compiler_base", "forward: passes before lowering"), ("partition", "AOT partition"),
    ("create_aot_state", "AOT metadata pass"), ("graph_capture_wrappers", "AOT trace"),
    ("aot_stage2", "AOT other"), ("run@symbolic_convert", "Dynamo trace"), ("_compile@convert_frame", "Dynamo other"),
    ("@graphs.py", "CUDA graph capture"), ("_find_and_load", "imports"), ("init_process_group", "process group"),
    ("barrier", "barrier"), ("check_data", "data check"), ("build_model", "model build"),
    ("step@train_gpt", "optimizer step"), ("warm_validation", "validation"), ("sync@train_gpt", "waits for the GPU"),
]


def phase(stack: list[str]) -> str:
    for frame in reversed(stack):
        name = frame.split(":")[0]
        for marker, label in PHASES:
            if marker in name:
                return label
    return "other"


def read(path: Path) -> tuple[dict, list]:
    lines = path.read_text(errors="replace").splitlines()
    if not lines or not lines[0].startswith("# role="):
        raise UserError(f"{path}: not a sample file of sitecustomize.py (no `# role=` header)")
    head = dict(item.split("=", 1) for item in lines[0][2:].split())
    rows = [(float(t), s.split(";")) for t, _, s in (line.partition("\t") for line in lines[1:] if line)]
    return head, rows


@cli.program
def main(argv=None):
    paths = [Path(p) for p in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        raise UserError("usage: python3 timeline.py SAMPLES/*.txt (the files sitecustomize.py wrote)")
    procs = [(p, *read(p)) for p in paths]
    t0 = min(float(head["t0"]) for _, head, _ in procs)
    bars = []  # (process name, its merged segments) for the picture
    for path, head, rows in sorted(procs, key=lambda x: (x[1]["role"], float(x[1]["t0"]))):
        shift = float(head["t0"]) - t0  # its samples' clock starts at its own start
        totals = collections.Counter(phase(s) for _, s in rows)
        end = rows[-1][0] + shift if rows else shift
        print(f"== {head['role']} (pid {head['pid']}, {path.name}): starts at {shift:.1f} s, last sample {end:.1f} s")
        print("   time by phase: " + ", ".join(f"{label} {n * PERIOD_S:.1f} s" for label, n in totals.most_common()))
        segments = []  # [start, end, phase]: runs of one phase
        for t, stack in rows:
            label, t = phase(stack), t + shift
            if segments and segments[-1][2] == label:
                segments[-1][1] = t
            else:
                segments.append([t, t, label])
        merged = []
        for i, seg in enumerate(segments):  # a blip under 0.4 s inside one phase joins it
            blip = seg[1] - seg[0] < 0.4 and 0 < i < len(segments) - 1 and segments[i - 1][2] == segments[i + 1][2]
            if merged and (blip or seg[2] == merged[-1][2]):
                merged[-1][1] = seg[1]
            else:
                merged.append(list(seg))
        print("   timeline: " + " | ".join(f"{a:.1f}-{b:.1f} {label}" for a, b, label in merged if b - a >= 0.8))
        bars.append((f"{head['role']} {head['pid']}", merged))
    draw(bars, Path(__file__).with_name("timeline.png"))
    return 0


def draw(bars: list, out: Path):
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    labels = sorted({label for _, merged in bars for *_, label in merged})
    colors = dict(zip(labels, plt.cm.tab20.colors + plt.cm.tab20b.colors), **{"waits for a helper": "black"})
    fig, ax = plt.subplots(figsize=(13, 0.45 * len(bars) + 2.5))
    for row, (name, merged) in enumerate(bars):
        ax.broken_barh([(a, max(b - a, PERIOD_S)) for a, b, _ in merged], (row - 0.4, 0.8),
                       facecolors=[colors[label] for *_, label in merged])
    ax.set_yticks(range(len(bars)), [name for name, _ in bars])
    ax.invert_yaxis()
    ax.set_xlabel("seconds from the first process's start")
    ax.set_title("a world-2 cold start: each process's phase (20 Hz stack samples)")
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=colors[label]) for label in labels], labels=labels,
              loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=5, fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
