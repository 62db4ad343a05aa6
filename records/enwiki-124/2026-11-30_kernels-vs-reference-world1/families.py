"""Side-by-side GPU time per step by kernel role: the project's and the reference's traces of the same steps.
usage: python3 families.py OURS_TRACE REF_TRACE  (run from the repository root)"""
import collections, re, sys
sys.path.insert(0, ".")
from tools.trace_summary import load_events, launched_in_steps

def role(name):
    low = name.lower()
    if "nccl" in low: return "collectives"
    if low.startswith("triton_"): return "Inductor (elementwise, norms, reductions)"
    if "flash" in low: return "attention (FA3: forward, backward, pre/post)"
    if re.search(r"sm90_(qq|qr|rq)", low): return "FP8 matmuls (cuBLASLt)"
    if "splitkreduce" in low: return "bf16 matmuls (cuBLAS)"
    if any(s in low for s in ("nvjet", "gemm", "cutlass", "cublas")): return "bf16 matmuls (cuBLAS)"
    if "relu_square" in low: return "ReLU² MLP kernels (Triton)"
    if "softcapped" in low: return "soft-capped CE (Triton)"
    if "transpose" in low: return "transposes (Triton)"
    if low.startswith("_embedding_grad") or "_flagged_rows" in low: return "token-table gradients (Triton)"
    if any(s in low for s in ("syrk", "xxt", "xtx", "ba_plus")): return "Polar Express Gram kernels (Triton)"
    return "ATen kernels (copies, adds, fills, gathers)"

def per_role(path):
    events, _ = launched_in_steps(load_events(path))
    steps = sum(e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep") for e in events)
    t, n = collections.Counter(), collections.Counter()
    for e in events:
        if e.get("cat") == "kernel":
            t[role(e["name"])] += e["dur"]; n[role(e["name"])] += 1
    return {k: v / 1e3 / steps for k, v in t.items()}, {k: v / steps for k, v in n.items()}

(ours, on), (ref, rn) = per_role(sys.argv[1]), per_role(sys.argv[2])
print(f"| kernels | reference ms/step | project ms/step | project - reference |")
print("| --- | --- | --- | --- |")
for k in sorted(set(ours) | set(ref), key=lambda k: -max(ours.get(k, 0), ref.get(k, 0))):
    a, b = ref.get(k, 0.0), ours.get(k, 0.0)
    print(f"| {k} | {a:.1f} | {b:.1f} | {b - a:+.1f} |")
print(f"| **GPU busy** | **{sum(ref.values()):.1f}** | **{sum(ours.values()):.1f}** | **{sum(ours.values()) - sum(ref.values()):+.1f}** ({sum(ours.values()) / sum(ref.values()):.3f}x) |")
