import torch
from triton.testing import do_bench
E4 = torch.float8_e4m3fn
torch.manual_seed(0)
def rows8(t):
    s = (t.float().abs().amax(-1, keepdim=True) / 448).clamp_min(1e-30)
    return (t / s).to(E4), s
q = torch.compile(rows8)
for (M, K, N, name) in [(49152, 2304, 768, "QKV dX"), (49152, 768, 768, "O fwd / O dX"), (16384, 2304, 768, "QKV dX 16k"), (49152, 768, 2304, "QKV fwd")]:
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / 30
    t_bf = do_bench(lambda: a @ b.T, rep=300)
    a8, sa = rows8(a); b8, sb = rows8(b)
    f_row = lambda: torch._scaled_mm(a8, b8.T, scale_a=sa, scale_b=sb.T, out_dtype=torch.bfloat16, use_fast_accum=True)
    try:
        t_row = do_bench(f_row, rep=300)
        ref = (a.double() @ b.double().T); err = ((f_row().double() - ref).norm() / ref.norm()).item()
    except Exception as e:
        t_row, err = float("nan"), str(e)[:200]
    one = torch.ones((), device="cuda")
    t_ten = do_bench(lambda: torch._scaled_mm(a8, b8.T, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True), rep=300)
    q(a); t_q = do_bench(lambda: q(a), rep=300)
    print(f"{name} {M}x{K}x{N}: bf16 {t_bf:.4f} ms, rowwise fp8 {t_row:.4f} ms ({t_bf/t_row:.2f}x, err {err}), per-tensor fp8 {t_ten:.4f} ms, compiled row quantize {t_q:.4f} ms", flush=True)
