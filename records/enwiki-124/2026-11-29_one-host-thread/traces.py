"""This record's numbers from its --profile_steps traces: each traced step's span on the GPU (its ProfilerStep range
there), the GPU's idle gaps over 2 ms, the host operations that held the host longest, and the kernels (copies and
fills too) of under 6 us on average: how many a step, their run time and the idle time before each.

    python3 traces.py TRACE...   # <run_id>_trace.json or .json.xz files (the traces are not kept with the record)
"""
import collections
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
from harness import cli  # noqa: E402
from harness.cli import UserError  # noqa: E402
from trace_summary import GPU_WORK, load_events  # noqa: E402

HOST_OPS = ("aten::index_put_", "aten::pin_memory", "aten::copy_")
LONG_GAP_US, SMALL_US, GAP_CAP_US = 2000, 6, 50


def report(path: str):
    events = load_events(path)
    spans = sorted((e for e in events if e.get("cat") == "gpu_user_annotation" and e["name"].startswith("ProfilerStep")),
                   key=lambda e: e["ts"])
    if not spans:
        raise UserError(f"{path}: no ProfilerStep range on the GPU; pass a trace of a GPU run's --profile_steps")
    t0, t1, n = spans[0]["ts"], spans[-1]["ts"] + spans[-1]["dur"], len(spans)
    work = sorted((e for e in events if e.get("cat") in GPU_WORK and t0 <= e["ts"] < t1), key=lambda e: e["ts"])
    print(f"{Path(path).name}: {n} steps; GPU span per step (ms): "
          + " ".join(f"{e['dur'] / 1e3:.1f}" for e in spans) + f"; median {statistics.median(e['dur'] for e in spans) / 1e3:.2f}")
    gaps, end, by_name = [], None, collections.defaultdict(lambda: [0, 0.0, 0.0])
    for e in work:
        gap = 0.0 if end is None else max(0.0, e["ts"] - end)
        if gap > LONG_GAP_US:
            gaps.append(gap)
        row = by_name[re.sub(r"_\d+$", "", e["name"].split("<")[0][:70])]
        row[0], row[1], row[2] = row[0] + 1, row[1] + e["dur"], row[2] + min(gap, GAP_CAP_US)
        end = e["ts"] + e["dur"] if end is None else max(end, e["ts"] + e["dur"])
    print(f"  GPU idle gaps over {LONG_GAP_US / 1e3:.0f} ms: {len(gaps)}, {sum(gaps) / 1e3:.1f} ms in all"
          + (f" (largest {max(gaps) / 1e3:.1f})" if gaps else ""))
    host = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op" and e["name"] in HOST_OPS and t0 - 1e6 <= e["ts"] < t1:
            host[e["name"]].append(e["dur"] / 1e3)
    for name in HOST_OPS:
        if host[name]:
            print(f"  host {name}: {len(host[name])} calls, {sum(host[name]):.1f} ms, longest {max(host[name]):.2f} ms")
    small = {k: v for k, v in by_name.items() if v[1] / v[0] < SMALL_US}
    count, run, idle = (sum(v[i] for v in small.values()) for i in range(3))
    print(f"  kernels under {SMALL_US} us on average: {count / n:.0f} a step, {run / n / 1e3:.2f} ms running and "
          f"{idle / n / 1e3:.2f} ms idle before them (gaps counted up to {GAP_CAP_US} us) a step; the largest:")
    for name, (c, r, i) in sorted(small.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))[:10]:
        print(f"    x{c / n:5.0f}  {r / n / 1e3:.3f} + {i / n / 1e3:.3f} ms  {name}")


@cli.program
def main(argv=None):
    parser = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+", help="<run_id>_trace.json(.xz) files of train_gpt.py --profile_steps")
    for path in parser.parse_args(argv).traces:
        report(path)


if __name__ == "__main__":
    main()
