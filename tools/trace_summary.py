"""Summarize a `--profile_steps a:b` Chrome trace: GPU time per step by kernel family, by annotated region
(the optimizer step, the guard's check) and by kernel, how long the GPU sat idle inside the profiled
window (idle time = the host could not keep up), and the host's time per step (what 8 GPUs, at one
micro-batch per step, would have to hide under each step's GPU time).

    python3 tools/trace_summary.py logs/<run_id>_trace.json STEPS
"""
import collections
import json
import sys


def family(name: str) -> str:
    low = name.lower()
    if "nccl" in low:
        return "nccl"
    if "flash" in low or "fmha" in low:
        return "flash attention"
    if low.startswith("triton_"):
        return "inductor (compiled elementwise/norm/reduction)"
    if any(s in low for s in ("gemm", "nvjet", "xmma", "cutlass", "cublas")):
        return "cuBLAS matmul"
    return name.split("<")[0][:60]  # our Triton kernels and ATen kernels by name


def main(path: str, steps: int):
    events = json.load(open(path))["traceEvents"]
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    by_name = collections.defaultdict(lambda: [0.0, 0])
    for e in kernels:
        by_name[e["name"]][0] += e["dur"]
        by_name[e["name"]][1] += 1
    busy = sum(t for t, _ in by_name.values())
    idle, end = 0.0, kernels[0]["ts"]
    for e in kernels:
        idle += max(0.0, e["ts"] - end)
        end = max(end, e["ts"] + e["dur"])
    per_step = lambda us: us / 1e3 / steps  # noqa: E731
    print(f"{len(kernels) // steps} kernels/step; GPU busy {per_step(busy):.1f} ms/step, "
          f"idle inside the window {per_step(idle):.1f} ms/step")
    families = collections.Counter()
    for name, (t, _) in by_name.items():
        families[family(name)] += t
    print("\nby family:")
    for fam, t in families.most_common(15):
        print(f"  {per_step(t):8.2f} ms/step {100 * t / busy:5.1f}%  {fam}")
    regions = collections.Counter()  # train_gpt.py's record_function ranges, as the GPU ran them
    for e in events:
        if e.get("cat") == "gpu_user_annotation":
            regions[e["name"]] += e["dur"]
    if regions:
        print("\nby region (first to last kernel of each range; kernels of other streams may run inside):")
        for name, t in regions.most_common():
            print(f"  {per_step(t):8.2f} ms/step  {name}")
    host = collections.Counter()  # the same ranges as the host ran them (Python, launches, graph replays)
    for e in events:
        if e.get("cat") == "user_annotation":
            host["step" if e["name"].startswith("ProfilerStep") else e["name"]] += e["dur"]
    if host:
        print("\nhost time per step: " + ", ".join(f"{name} {per_step(t):.2f} ms" for name, t in host.most_common()))
    print("\ntop kernels:")
    for name, (t, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:30]:
        print(f"  {per_step(t):8.2f} ms/step {100 * t / busy:5.1f}%  x{n // steps:<5d} {name[:100]}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], int(sys.argv[2]))
