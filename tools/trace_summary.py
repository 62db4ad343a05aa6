"""Summarize a `--profile_steps a:b` Chrome trace: GPU time per step by kernel family, by launch (CUDA graph replays
against the work the host launched one call at a time, by the host op that did), by annotated region (the optimizer
step, the guard's check) and by kernel, how long the GPU sat idle inside the profiled window (the short gaps between
back-to-back kernels, the launch latency a step pays per kernel, apart from the longer ones, where the GPU waited for
the host), how much of the collectives' time other kernels hid, and the host's time per step (what 8 GPUs, at one
micro-batch per step, would have to hide under each step's GPU time). A trace without GPU kernels (a CPU run's) gets
the host's time per step by op instead.

    python3 tools/trace_summary.py logs/<run_id>_trace.json [STEPS]

STEPS: the profiled steps (b - a); by default, the trace's own count of them (its ProfilerStep ranges).
A trace compressed with xz or gzip (.xz, .gz) is read as it is.
"""
import bisect
import collections
import gzip
import json
import lzma
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root, for harness/
from harness import cli  # noqa: E402
from harness.cli import UserError  # noqa: E402

OPENERS = {".xz": lzma.open, ".gz": gzip.open}


def family(name: str) -> str:
    low = name.lower()
    if "nccl" in low:
        return "nccl"
    if low.startswith("triton_"):  # before "flash": Inductor names a kernel after the ops fused into it
        return "inductor (compiled elementwise/norm/reduction)"
    if "flash" in low or "fmha" in low:
        return "flash attention"
    if any(s in low for s in ("gemm", "nvjet", "xmma", "cutlass", "cublas")):
        return "cuBLAS matmul"
    return name.split("<")[0][:60]  # our Triton kernels and ATen kernels by name


def load_events(path) -> list[dict]:
    """The trace's timed events (name, ts, dur), checked; UserError names the file and what is wrong."""
    path = Path(path)
    try:
        with OPENERS.get(path.suffix, open)(path, "rt") as f:
            events = json.load(f)["traceEvents"]
    except (ValueError, EOFError, lzma.LZMAError, gzip.BadGzipFile, KeyError, TypeError) as e:
        # ValueError: not JSON or not text; KeyError/TypeError: JSON, but not a trace
        raise UserError(f"{path}: not a Chrome trace with traceEvents ({type(e).__name__}: {str(e)[:80]}); pass the "
                        "<run_id>_trace.json that train_gpt.py --profile_steps writes") from None
    if not isinstance(events, list):
        raise UserError(f"{path}: traceEvents is not a list; pass the <run_id>_trace.json of --profile_steps")
    timed = []
    for i, e in enumerate(events):
        if not isinstance(e, dict) or "dur" not in e:
            continue  # metadata and instant events
        if not (isinstance(e.get("name"), str) and all(isinstance(e.get(k), (int, float)) and math.isfinite(e[k])
                                                      for k in ("ts", "dur")) and e["dur"] >= 0):
            raise UserError(f"{path}: event {i} ({str(e)[:60]}) lacks a name or a finite ts and dur >= 0; "
                            "is the trace cut or edited?")
        timed.append(e)
    return timed


def overlap(events: list[dict], others: list[dict]) -> float:
    """Microseconds of `events` during which some event of `others` ran too."""
    merged = []  # the union of the others' intervals, in order
    for e in sorted(others, key=lambda e: e["ts"]):
        if merged and e["ts"] <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e["ts"] + e["dur"])
        else:
            merged.append([e["ts"], e["ts"] + e["dur"]])
    starts = [a for a, _ in merged]
    total = 0.0
    for e in events:
        lo, hi = e["ts"], e["ts"] + e["dur"]
        for a, b in merged[max(0, bisect.bisect_right(starts, lo) - 1):bisect.bisect_left(starts, hi)]:
            total += max(0.0, min(b, hi) - max(a, lo))
    return total


GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCHES = ("cuda_runtime", "cuda_driver")  # the host's calls that queue GPU work, by correlation id
BACK_TO_BACK_US = 5  # a queued kernel starts ~1 us after the one before it ends (H200, CUDA graphs or not)
GAP_CAP_US = 50  # a longer gap before a kernel is the host's delay (Python, a sync), not that launch's latency


def arg(e: dict, key: str):
    """An event's args[key] (a correlation or External id), None where it has none."""
    return e["args"].get(key) if isinstance(e.get("args"), dict) else None


def idle_time(events: list[dict]) -> tuple[float, float, int]:
    """The GPU's idle time between its first and last kernel, copy or fill, in us: gaps of up to BACK_TO_BACK_US (the
    launch latency of kernels already queued: fewer kernels, not a faster host, remove them), longer ones (where the
    queue ran dry), and the number of the short ones."""
    work = sorted((e for e in events if e.get("cat") in GPU_WORK), key=lambda e: e["ts"])
    short = long = 0.0
    short_gaps, end = 0, work[0]["ts"]
    for e in work:
        gap = e["ts"] - end
        if 0 < gap <= BACK_TO_BACK_US:
            short, short_gaps = short + gap, short_gaps + 1
        elif gap > BACK_TO_BACK_US:
            long += gap
        end = max(end, e["ts"] + e["dur"])
    return short, long, short_gaps


def launched_in_steps(events: list[dict]) -> tuple[list[dict], int]:
    """The events but the GPU work launched outside the ProfilerStep ranges, and how many GPU events that drops.
    The profiler's warm-up step leaves the trace on the host's side only: its GPU work stayed and read as a quarter
    more of each of four traced steps (records/enwiki-124/2026-11-29_vs-reference-world2-a6a4d11). GPU work is kept
    when its launch (same correlation id) lies inside a step range, or when the trace has no launches to tell by; a
    GPU range of a record_function range when its host range does."""
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep"))
    launches = [e for e in events if e.get("cat") in LAUNCHES]
    if not steps or not launches:
        return events, 0
    starts = [a for a, _ in steps]

    def inside(e: dict) -> bool:
        i = bisect.bisect_right(starts, e["ts"]) - 1
        return i >= 0 and e["ts"] <= steps[i][1]
    launched = {arg(e, "correlation") for e in launches if inside(e)} - {None}
    ranges = {arg(e, "External id") for e in events if e.get("cat") == "user_annotation" and inside(e)} - {None}

    def keep(e: dict) -> bool:
        if e.get("cat") in GPU_WORK:
            return arg(e, "correlation") in launched
        if e.get("cat") == "gpu_user_annotation":
            return arg(e, "External id") in ranges
        return True
    kept = [e for e in events if keep(e)]
    return kept, sum(e.get("cat") in GPU_WORK for e in events) - sum(e.get("cat") in GPU_WORK for e in kept)


def by_launch(events: list[dict]) -> tuple[dict[str, list[float]], collections.Counter, collections.Counter]:
    """The GPU work split by how the host queued it: inside CUDA graph replays, or one launch at a time outside them
    (the optimizer, copies and fills between the graphs: per-step work whose launches no graph amortizes). Returns
    {"graph replays": [us, idle us, count], "host launches": [...]} (idle: the GPU's wait since the previous work
    ended, gaps over GAP_CAP_US left out as waits for the host rather than launch latency), and the host launches'
    GPU time and count by the host op that queued them (the cpu_op of the same External id)."""
    graph_launches = {arg(e, "correlation") for e in events
                      if e.get("cat") in LAUNCHES and "GraphLaunch" in e["name"]} - {None}
    ops = {arg(e, "External id"): e["name"] for e in events if e.get("cat") == "cpu_op"}
    kinds = {"graph replays": [0.0, 0.0, 0], "host launches": [0.0, 0.0, 0]}
    op_time, op_count = collections.Counter(), collections.Counter()
    end = None
    for e in sorted((e for e in events if e.get("cat") in GPU_WORK), key=lambda e: e["ts"]):
        kind = kinds["graph replays" if arg(e, "correlation") in graph_launches else "host launches"]
        gap = 0.0 if end is None else e["ts"] - end
        kind[0] += e["dur"]
        kind[1] += gap if 0 < gap <= GAP_CAP_US else 0.0
        kind[2] += 1
        end = e["ts"] + e["dur"] if end is None else max(end, e["ts"] + e["dur"])
        if kind is kinds["host launches"]:
            op = ops.get(arg(e, "External id"), "(no host op recorded)")
            op_time[op] += e["dur"]
            op_count[op] += 1
    return kinds, op_time, op_count


def summarize(path, steps: int | None = None):
    events, dropped = launched_in_steps(load_events(path))
    profiled = sum(e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep") for e in events)
    if steps is None:
        steps = profiled
        if not steps:
            raise UserError(f"{path}: no ProfilerStep ranges to count the steps by; pass STEPS (b - a of "
                            "--profile_steps a:b)")
    elif profiled and steps != profiled:
        raise UserError(f"{path} holds {profiled} profiled steps, not {steps}; pass {profiled} or leave STEPS out")
    per_step = lambda us: us / 1e3 / steps  # noqa: E731
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    by_name = collections.defaultdict(lambda: [0.0, 0])
    for e in kernels:
        by_name[e["name"]][0] += e["dur"]
        by_name[e["name"]][1] += 1
    busy = sum(t for t, _ in by_name.values())
    share = lambda us: 100 * us / busy if busy else 0.0  # noqa: E731
    if kernels:
        short, long, short_gaps = idle_time(events)
        print(f"{len(kernels) // steps} kernels/step; GPU busy {per_step(busy):.1f} ms/step, idle inside the window "
              f"{per_step(short + long):.1f} ms/step: {per_step(short):.1f} between back-to-back kernels "
              f"({short_gaps // steps} gaps of <= {BACK_TO_BACK_US} us a step), {per_step(long):.1f} in longer gaps")
        if dropped:
            print(f"({dropped} GPU events launched outside the traced steps left out: the profiler's warm-up step's)")
        families = collections.Counter()
        for name, (t, _) in by_name.items():
            families[family(name)] += t
        print("\nby family:")
        for fam, t in families.most_common(15):
            print(f"  {per_step(t):8.2f} ms/step {share(t):5.1f}%  {fam}")
        comm = collections.defaultdict(list)
        for e in kernels:
            if family(e["name"]) == "nccl":
                comm[e["name"].split("(")[0]].append(e)
        if comm:
            compute = [e for e in kernels if family(e["name"]) != "nccl"]
            print("\ncollectives (ms/step: time, of it while other kernels ran, exposed):")
            for name, group in sorted(comm.items(), key=lambda kv: -sum(e["dur"] for e in kv[1])) + [
                    ("all", [e for group in comm.values() for e in group])]:
                t, hidden = sum(e["dur"] for e in group), overlap(group, compute)
                print(f"  {per_step(t):8.2f} {per_step(hidden):8.2f} {per_step(t - hidden):8.2f}  {name}")
        kinds, op_time, op_count = by_launch(events)
        print(f"\nby launch (GPU work + the idle time before it in gaps of up to {GAP_CAP_US} us, count a step):")
        for name, (t, idle, n) in kinds.items():
            print(f"  {per_step(t):8.2f} + {per_step(idle):.2f} ms/step  x{n // steps:<5d} {name}")
        for op, t in op_time.most_common(10):
            print(f"  {per_step(t):8.2f} ms/step  x{op_count[op] // steps:<5d}   {op[:90]}")
        regions = collections.Counter()  # train_gpt.py's record_function ranges, as the GPU ran them
        for e in events:
            if e.get("cat") == "gpu_user_annotation":
                regions[e["name"]] += e["dur"]
        if regions:
            print("\nby region (first to last kernel of each range; kernels of other streams may run inside):")
            for name, t in regions.most_common():
                print(f"  {per_step(t):8.2f} ms/step  {name}")
    else:  # a CPU run's trace: the host's ops are all there is
        ops = collections.Counter()
        for e in events:
            if e.get("cat") == "cpu_op":
                ops[e["name"]] += e["dur"]
        if not ops:
            raise UserError(f"{path}: no GPU kernels and no CPU ops in the trace, nothing to summarize; profile "
                            "steps that run (--profile_steps a:b)")
        print("no GPU kernels in the trace (a CPU run's): host time per step by op, inclusive (an op's time holds "
              "the ops it calls)")
        for name, t in ops.most_common(30):
            print(f"  {per_step(t):8.2f} ms/step  {name[:100]}")
    host = collections.Counter()  # the same ranges as the host ran them (Python, launches, graph replays)
    for e in events:
        if e.get("cat") == "user_annotation":
            host["step" if e["name"].startswith("ProfilerStep") else e["name"]] += e["dur"]
    if host:
        print("\nhost time per step: " + ", ".join(f"{name} {per_step(t):.2f} ms" for name, t in host.most_common()))
    if kernels:
        print("\ntop kernels:")
        for name, (t, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:30]:
            print(f"  {per_step(t):8.2f} ms/step {share(t):5.1f}%  x{n // steps:<5d} {name[:100]}")


@cli.program
def main(argv=None):
    parser = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", help="<log_dir>/<run_id>_trace.json, written by train_gpt.py --profile_steps a:b")
    parser.add_argument("steps", nargs="?", type=cli.whole(1),
                        help="the profiled steps, b - a (default: the trace's count of them)")
    args = parser.parse_args(argv)
    summarize(args.trace, args.steps)


if __name__ == "__main__":
    main()
