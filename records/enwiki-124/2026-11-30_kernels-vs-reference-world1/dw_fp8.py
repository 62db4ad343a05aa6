"""Sizing the MLP's weight gradients in FP8 on this GPU: the bf16 matmuls the backward runs against per-tensor FP8
matmuls over transposed e4m3 copies, and what making those copies costs by the ways they could be made.
Median us over 50 calls, L2 flushed between calls."""
import torch, statistics, sys
sys.path.insert(0, ".")
from kernels.transpose import transpose_copy

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

@torch.compile(dynamic=False)
def cast_t(t, scale):  # e4m3(t / scale), transposed, one Inductor kernel
    return (t / scale).to(E4M3).t().contiguous()

@torch.compile(dynamic=False)
def cast(t, scale):
    return (t / scale).to(E4M3)

@torch.compile(dynamic=False)
def amax(t):
    return t.abs().amax().float()

D, H = 768, 3072
for T in (16384, 32768, 49152):
    post = torch.randn(T, H, device="cuda").relu().square().bfloat16()
    d_pre = torch.randn(T, H, device="cuda").bfloat16()
    grad = torch.randn(T, D, device="cuda").bfloat16()
    x = torch.randn(T, D, device="cuda").bfloat16()
    one = torch.ones((), device="cuda")
    s = amax(post) / 448
    p8t, g8t = cast_t(post, s), cast_t(grad, amax(grad) / 448)
    d8t, x8t = cast_t(d_pre, amax(d_pre) / 448), cast_t(x, amax(x) / 448)
    r = {}
    r["bf16 dW_out = post.T @ grad"] = timed(lambda: post.T @ grad)
    r["bf16 dW_in = d_pre.T @ x"] = timed(lambda: d_pre.T @ x)
    for fast in (True, False):
        r[f"fp8 dW_out (fast_accum={fast})"] = timed(lambda: torch._scaled_mm(p8t, g8t.T, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast))
        r[f"fp8 dW_in (fast_accum={fast})"] = timed(lambda: torch._scaled_mm(d8t, x8t.T, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast))
    r["amax (T,H) bf16"] = timed(lambda: amax(post))
    r["cast+transpose (T,H) one Inductor kernel"] = timed(lambda: cast_t(post, s))
    p8 = cast(post, s)
    r["cast (T,H) -> e4m3"] = timed(lambda: cast(post, s))
    r["transpose_copy (T,H) e4m3"] = timed(lambda: transpose_copy(p8, p8t))
    r["cast+transpose (T,D) one Inductor kernel"] = timed(lambda: cast_t(grad, s))
    x8 = cast(x, s)
    r["transpose_copy (T,D) e4m3"] = timed(lambda: transpose_copy(x8, x8t))
    # error of the fp8 product against fp32, relative to the exact product's RMS
    ref = post.float().T @ grad.float()
    sp, sg = amax(post) / 448, amax(grad) / 448
    got = torch._scaled_mm(cast_t(post, sp), cast_t(grad, sg).T, scale_a=sp, scale_b=sg, out_dtype=torch.bfloat16, use_fast_accum=True).float()
    bf = (post.T @ grad).float()
    rms = ref.square().mean().sqrt()
    print(f"T={T}: rel RMS error fp8 {((got - ref).square().mean().sqrt() / rms).item():.4f}, bf16 {((bf - ref).square().mean().sqrt() / rms).item():.5f}")
    for k, v in r.items():
        print(f"T={T}  {v:8.1f} us  {k}")
