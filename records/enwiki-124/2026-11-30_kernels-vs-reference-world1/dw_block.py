"""Blockwise FP8 weight gradients of the MLP on this GPU: dW = aᵀ b over K = T tokens with 1x128 scales on the left
operand and 128x128 on the right (fp8_block_mm), both orientations, against bf16 and per-tensor FP8. Median us, L2
flushed."""
import torch, statistics, sys
sys.path.insert(0, ".")
from kernels.fp8_linear import fp8_block_mm, fp8_weight_blocks

E4M3 = torch.float8_e4m3fn
flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")

def timed(fn, n=50):
    ts = []
    for _ in range(5): fn()
    for _ in range(n):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    return statistics.median(ts)

def row_blocks(t):  # t (M, K) -> e4m3 (M, K) over 1x128 scales, scales (K/128, M) contiguous
    M, K = t.shape
    b = t.float().view(M, K // 128, 128)
    s = b.abs().amax(-1).clamp_min(1e-30) / 448
    return (b / s[..., None]).to(E4M3).view(M, K), s.T.contiguous()

D, H = 768, 3072
for T in (16384, 32768, 49152):
    post = torch.randn(T, H, device="cuda").relu().square().bfloat16()
    grad = torch.randn(T, D, device="cuda").bfloat16()
    ref = post.float().T @ grad.float()
    rms = ref.square().mean().sqrt()
    pT, gT = post.T.contiguous(), grad.T.contiguous()
    a8, a_s = row_blocks(pT)            # post^T rows (features) over 128-token blocks
    b8, b_s = fp8_weight_blocks(gT)     # grad^T in 128x128 blocks
    out1 = fp8_block_mm(a8, a_s, b8, b_s, torch.bfloat16)   # (H, D)
    c8, c_s = row_blocks(gT)
    d8, d_s = fp8_weight_blocks(pT)
    out2 = fp8_block_mm(c8, c_s, d8, d_s, torch.bfloat16)   # (D, H)
    e1 = ((out1.float() - ref).square().mean().sqrt() / rms).item()
    e2 = ((out2.float().T - ref).square().mean().sqrt() / rms).item()
    t_bf = timed(lambda: post.T @ grad)
    t1 = timed(lambda: fp8_block_mm(a8, a_s, b8, b_s, torch.bfloat16))
    t2 = timed(lambda: fp8_block_mm(c8, c_s, d8, d_s, torch.bfloat16))
    print(f"T={T}: bf16 {t_bf:.1f} us | blockwise post^T(1x128) x grad^T(128^2): {t1:.1f} us, rel err {e1:.4f} | "
          f"grad^T(1x128) x post^T(128^2): {t2:.1f} us, rel err {e2:.4f}")
