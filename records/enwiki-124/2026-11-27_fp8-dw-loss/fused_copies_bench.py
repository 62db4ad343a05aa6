# the MLP backward kernel writing transposed e4m3 copies of post and d_pre (for FP8 dW), timed against main's
import sys, torch
# run from the repository root; relu_exp.py (kernels/relu_square.py with fused_copies.patch applied) beside this file
import os
sys.path.insert(0, '.'); sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from triton.testing import do_bench
import relu_exp as rx
from kernels import bench as kb
from kernels.relu_square import MLPConfig
from kernels.fp8_linear import fp8_rows, fp8_tensor
E4 = torch.float8_e4m3fn
def t(fn): return sorted(do_bench(fn, warmup=20, rep=100) for _ in range(3))[1]
for tokens in (49152, 16384):
    x, grad_out, bank, _, post = kb._mlp_inputs(tokens)
    (g8, g_scale), (w_out8, w_out_scale) = fp8_rows(grad_out), fp8_tensor(bank[1])
    H = post.shape[1]
    post_scale = (post.float().abs().amax() / 448).reshape(())
    postT8 = torch.empty(H, tokens, dtype=E4, device='cuda')
    ref_d = rx.matmul_relu_square_triton(g8, w_out8, post=post, scale=w_out_scale, row_scale=g_scale, fp8_out=True)[0]
    d_scale = (ref_d.float().abs().amax() / 448).reshape(())
    dT8 = torch.empty(H, tokens, dtype=E4, device='cuda'); d_amax = torch.zeros((), device='cuda')
    for cfg in (None, MLPConfig(128, 256, 128, 2, 8), MLPConfig(128, 128, 128, 3, 8), MLPConfig(128, 128, 128, 4, 8), MLPConfig(256, 128, 128, 2, 8)):
        row = []
        for name, kw in (("main", {}), ("+postT8", dict(post_t8=(postT8, post_scale))),
                         ("+postT8+dT8", dict(post_t8=(postT8, post_scale), d_t8=(dT8, d_scale, d_amax))),
                         ("+postT8+dT8-bf16", dict(post_t8=(postT8, post_scale), d_t8=(dT8, d_scale, d_amax), write_out=False))):
            f = lambda: rx.matmul_relu_square_triton(g8, w_out8, post=post, scale=w_out_scale, row_scale=g_scale, fp8_out=True, config=cfg, **kw)
            try:
                out = f(); torch.cuda.synchronize()
                ms = t(f)
                err = ""
                if "post_t8" in kw:
                    e1 = ((postT8.float() * post_scale - post.float().T).abs().max() / post.float().abs().max()).item()
                    err += f" postT8 err {e1:.3f}"
                if "d_t8" in kw:
                    e2 = ((dT8.float() * d_scale - ref_d.float().T).abs().max() / ref_d.float().abs().max()).item()
                    err += f" dT8 err {e2:.3f} amax {d_amax.item():.3e}/{ref_d.float().abs().max().item():.3e}"
                row.append(f"{name} {ms:.3f}{err}")
            except Exception as ex:
                row.append(f"{name} FAIL {type(ex).__name__}: {str(ex)[:80]}")
        print(f"T={tokens} {cfg}: " + "; ".join(row), flush=True)
    # forward with fp8_out for reference, and cuBLAS dW
    print(f"T={tokens} dW bf16 {t(lambda: post.T @ grad_out):.3f} ms", flush=True)
    del x, grad_out, bank, post, postT8, dT8
