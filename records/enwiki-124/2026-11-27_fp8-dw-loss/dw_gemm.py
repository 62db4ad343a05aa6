# dW = Xᵀ G over T tokens: bf16 (as trained) vs FP8 per-tensor scaled_mm (fast accum on/off), plus error vs fp64
import torch
from triton.testing import do_bench
torch.manual_seed(0)
E4 = torch.float8_e4m3fn
def t(fn): return sorted(do_bench(fn, warmup=20, rep=100) for _ in range(3))[1]
def q(x):
    s = x.abs().amax().float() / 448.0
    return (x.float() / s).to(E4), s
for name, T, M, N in [("mlp dW (3072x768)", 49152, 3072, 768), ("qkv dW (2304x768)", 49152, 2304, 768),
                      ("out dW (768x768)", 49152, 768, 768), ("mlp dW T=16384", 16384, 3072, 768)]:
    X = torch.relu(torch.randn(T, M, device='cuda')).square().bfloat16()  # like post
    G = (torch.randn(T, N, device='cuda') * 1e-3).bfloat16()
    bf = t(lambda: X.t() @ G)
    ref = X.double().t() @ G.double()
    err_bf = ((X.t() @ G).double() - ref).norm() / ref.norm()
    XT8, sx = q(X.t().contiguous()); GT8, sg = q(G.t().contiguous())  # (M, T), (N, T) row-major
    res = [f"{name}: bf16 {bf:.3f} ms ({2*T*M*N/bf/1e9:.0f} TF/s) err {err_bf:.2e}"]
    for fast in (True, False):
        f = lambda: torch._scaled_mm(XT8, GT8.t(), sx, sg, out_dtype=torch.bfloat16, use_fast_accum=fast)
        ms = t(f); err = (f().double() - ref).norm() / ref.norm()
        res.append(f"fp8 fast={fast} {ms:.3f} ms ({2*T*M*N/ms/1e9:.0f} TF/s) err {err:.2e}")
    tr = t(lambda: q(X.t().contiguous()))
    res.append(f"torch transpose+quant of X {tr:.3f} ms")
    print("; ".join(res), flush=True)
