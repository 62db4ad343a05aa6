"""The LM head's dW matmul: fp32 output then a bf16 copy (main) against bf16 output (the change): bits and time."""
import sys

import torch

if not torch.cuda.is_available():
    sys.exit("error: needs a CUDA GPU of compute capability 9.0 (FP8 matmuls); run it on the GPU machine")
torch.manual_seed(0)
D, V = 768, 50304
for T in (16384, 49152):
    x8t = (torch.randn(D, T, device="cuda") * 2).to(torch.float8_e4m3fn)          # transposed(x_saved)
    g8t = (torch.randn(V, T, device="cuda") * 8).to(torch.float8_e5m2)            # transposed(grad_logits)
    sa, sb = torch.tensor(100 / 448, device="cuda"), torch.tensor(0.75 / 448 / 8, device="cuda")
    old = lambda: torch._scaled_mm(x8t, g8t.T, scale_a=sa, scale_b=sb, out_dtype=torch.float32, use_fast_accum=False).to(torch.bfloat16)
    new = lambda: torch._scaled_mm(x8t, g8t.T, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=False)
    a, b = old(), new()
    same = (a.view(torch.int16) == b.view(torch.int16)).float().mean().item()
    diff = ((a.float() - b.float()).abs().max() / a.float().abs().max()).item()
    times = {}
    for name, f in (("fp32 out + bf16 copy", old), ("bf16 out", new)) * 2:
        ts = []
        for _ in range(20):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); f(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
        times[name] = sorted(ts)[10]
    print(f"T={T}: bit-identical fraction {same:.6f}, max |diff| / max |dW| {diff:.2e}; median ms: "
          + ", ".join(f"{k} {v:.3f}" for k, v in times.items()))
