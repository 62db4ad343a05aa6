# FP8 dW microbench: (H, T) @ (T, D) reduce over tokens, bf16 vs FP8 blockwise variants.
import torch, sys
from triton.testing import do_bench
torch.manual_seed(0)
E4 = torch.float8_e4m3fn
H, D = 3072, 768
for T in (16384, 49152):
    post = torch.randn(T, H, device="cuda", dtype=torch.bfloat16).relu().square()
    g = torch.randn(T, D, device="cuda", dtype=torch.bfloat16) * 1e-3
    flops = 2 * T * H * D
    def rep(name, f):
        try:
            out = f(); ms = do_bench(f, warmup=50, rep=300)
            ref = (post.float().T @ g.float())
            err = ((out.float() - ref).norm() / ref.norm()).item()
            print(f"T={T} {name:42s} {ms:.4f} ms {flops / ms / 1e9:7.1f} TFLOP/s relerr {err:.2e}", flush=True)
        except Exception as e:
            print(f"T={T} {name:42s} FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
    rep("bf16 post.T @ g", lambda: post.T @ g)
    rep("bf16 out fp32", lambda: torch.mm(post.T, g, out_dtype=torch.float32) if hasattr(torch.mm, '__call__') else None)
    # transposed FP8 copies (as a kernel would write them)
    pT = post.T.contiguous().float()  # (H, T)
    gT = g.T.contiguous().float()     # (D, T)
    a_s = pT.view(H, T // 128, 128).abs().amax(-1).clamp_min(1e-30) / 448  # (H, T/128)
    a8 = (pT.view(H, T // 128, 128) / a_s[..., None]).to(E4).view(H, T)
    b_s_row = gT.view(D, T // 128, 128).abs().amax(-1).clamp_min(1e-30) / 448  # (D, T/128) 1x128
    b8_row = (gT.view(D, T // 128, 128) / b_s_row[..., None]).to(E4).view(D, T)
    b_s_blk = gT.view(D // 128, 128, T // 128, 128).abs().amax((1, 3)).clamp_min(1e-30) / 448  # (D/128, T/128)
    b8_blk = (gT.view(D // 128, 128, T // 128, 128) / b_s_blk[:, None, :, None]).to(E4).view(D, T)
    aS = a_s.T.contiguous()  # (T/128, H)
    rep("fp8 1x128 x 128x128", lambda: torch._scaled_mm(a8, b8_blk.T, scale_a=aS.T, scale_b=b_s_blk.contiguous().T, out_dtype=torch.bfloat16))
    rep("fp8 1x128 x 1x128 (b_s (T/128,D).T)", lambda: torch._scaled_mm(a8, b8_row.T, scale_a=aS.T, scale_b=b_s_row.T.contiguous(), out_dtype=torch.bfloat16))
    rep("fp8 1x128 x 1x128 (b_s (D,T/128))", lambda: torch._scaled_mm(a8, b8_row.T, scale_a=aS.T, scale_b=b_s_row.contiguous(), out_dtype=torch.bfloat16))
    rep("fp8 1x128 x 1x128 fp32 out", lambda: torch._scaled_mm(a8, b8_row.T, scale_a=aS.T, scale_b=b_s_row.T.contiguous().T, out_dtype=torch.float32))
    # per-tensor for comparison
    s1 = torch.tensor(1.0, device="cuda")
    rep("fp8 per-tensor (fast accum)", lambda: torch._scaled_mm(a8, b8_row.T, scale_a=s1, scale_b=s1, out_dtype=torch.bfloat16, use_fast_accum=True) )
    # cost of the transposed quantize passes as torch ops (upper bound of a fused write)
    def qT():
        t = g.T.contiguous().float().view(D // 128, 128, T // 128, 128)
        s = t.abs().amax((1, 3)) / 448
        return (t / s[:, None, :, None]).to(E4)
    cq = torch.compile(qT)
    cq(); ms = do_bench(cq); print(f"T={T} compiled transpose-quantize g (T,D)->(D,T) blocks: {ms:.4f} ms")
    def qpT():
        t = post.T.contiguous().float().view(H, T // 128, 128)
        s = t.abs().amax(-1, keepdim=True) / 448
        return (t / s).to(E4), s
    cp = torch.compile(qpT)
    cp(); ms = do_bench(cp); print(f"T={T} compiled transpose-quantize post (T,H)->(H,T) 1x128: {ms:.4f} ms")
