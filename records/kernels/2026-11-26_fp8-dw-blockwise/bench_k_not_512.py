# Blockwise FP8 with K % 512 != 0: do padded 128x128 scale rows work? Timings for QKV dX and O forward shapes.
import torch
from triton.testing import do_bench
torch.manual_seed(0)
E4 = torch.float8_e4m3fn
def q_rows(a):  # (M, K) -> e4m3, scale (K/128, M)
    M, K = a.shape
    s = a.float().view(M, K // 128, 128).abs().amax(-1).clamp_min(1e-30) / 448
    return (a.float().view(M, K // 128, 128) / s[..., None]).to(E4).view(M, K), s.T.contiguous()
def q_blocks(b):  # (N, K) -> e4m3, scale (N/128, K/128)
    N, K = b.shape
    v = b.float().view(N // 128, 128, K // 128, 128)
    s = v.abs().amax((1, 3)).clamp_min(1e-30) / 448
    return (v / s[:, None, :, None]).to(E4).view(N, K), s
def deq(a8, s_rows=None, s_blk=None):
    if s_rows is not None:
        return a8.double() * s_rows.double().T.repeat_interleave(128, 1)
    return a8.double() * s_blk.double().repeat_interleave(128, 0).repeat_interleave(128, 1)
for T, K, N, name in [(49152, 2304, 768, "QKV dX"), (49152, 768, 768, "O fwd"), (16384, 2304, 768, "QKV dX"), (49152, 3072, 768, "MLP dx (K%512=0)")]:
    g = torch.randn(T, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) * 0.02  # b (N, K): out = g @ w.T
    a8, a_s = q_rows(g); b8, b_s = q_blocks(w)
    ref = (deq(a8, s_rows=a_s) @ deq(b8, s_blk=b_s).T)
    def err(o): return ((o.double() - ref).norm() / ref.norm()).item()
    ms_bf = do_bench(lambda: g @ w.T, warmup=50, rep=300)
    print(f"{name} T={T} K={K} N={N}: bf16 {ms_bf:.4f} ms", flush=True)
    kb = K // 128; kp = (kb + 3) // 4 * 4
    pad = torch.zeros(N // 128, kp, device="cuda"); pad[:, :kb] = b_s
    for label, bs in [("contiguous", b_s), ("padded view", pad[:, :kb])]:
        try:
            f = lambda: torch._scaled_mm(a8, b8.T, scale_a=a_s.T, scale_b=bs.T, out_dtype=torch.bfloat16)
            o = f(); ms = do_bench(f, warmup=50, rep=300)
            print(f"   fp8 blockwise, b scale {label}: {ms:.4f} ms ({ms_bf / ms:.2f}x) relerr vs dequantized {err(o):.2e}", flush=True)
        except Exception as e:
            print(f"   fp8 blockwise, b scale {label}: FAILED {str(e)[:150]}", flush=True)
