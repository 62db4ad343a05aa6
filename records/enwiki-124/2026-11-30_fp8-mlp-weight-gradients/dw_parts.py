"""The FP8 weight gradients' parts at the MLP's shapes, one H200: median ms of do_bench."""
import torch
from triton.testing import do_bench
from kernels.fp8_linear import E4M3, fp8_rows, fp8_tensor
from kernels.relu_square import relu_square_d_pre_op, mlp_grads, mlp_grads_fp8, fp8_weight_blocks, _x_dw_scale

D, H = 768, 3072
def t(fn): return do_bench(fn, warmup=50, rep=300, return_mode="median")
for T in (16384, 49152):
    torch.manual_seed(0)
    x = torch.randn(T, D, device="cuda"); x = (x / x.square().mean(1, keepdim=True).sqrt()).bfloat16()
    grad = torch.randn(T, D, device="cuda").bfloat16()
    w_in, w_out = (torch.randn(2, H, D, device="cuda") / D**0.5).bfloat16().unbind(0)
    post = torch.relu(x @ w_in.T).square()
    post_rows = post.float().view(T, -1, 128).amax(-1).amax(-1) / 448
    g8, gs = fp8_rows(grad); wo8, wos = fp8_tensor(w_out)
    t_mul = torch.tensor([448 / post.float().max().item(), 1.0], device="cuda")
    a = t(lambda: relu_square_d_pre_op(grad, w_out, post, True, g8, gs, wo8, wos))
    b = t(lambda: relu_square_d_pre_op(grad, w_out, post, True, g8, gs, wo8, wos, t_mul))
    print(f"T={T} hopper backward: {a:.3f} ms, with transposed copies {b:.3f} ms")
    _, _, pt8, dpt8 = relu_square_d_pre_op(grad, w_out, post, True, g8, gs, wo8, wos, t_mul)
    one = torch.ones((), device="cuda")
    gt8, xt8 = grad.to(E4M3).T.contiguous(), x.to(E4M3).T.contiguous()
    d_pre = relu_square_d_pre_op(grad, w_out, post)[0]
    c = t(lambda: (torch._scaled_mm(pt8, gt8.T, one, one, out_dtype=torch.bfloat16, use_fast_accum=True),
                   torch._scaled_mm(dpt8, xt8.T, one, one, out_dtype=torch.bfloat16, use_fast_accum=True)))
    d = t(lambda: (post.T @ grad, d_pre.T @ x))
    print(f"T={T} dW pair: FP8 {c:.3f} ms, bf16 {d:.3f} ms")
    prep = torch.compile(lambda grad, x, gs: ((grad / gs.amax()).to(E4M3).T.contiguous(),
                                              (x * 16).to(E4M3).T.contiguous(), grad.float().norm(dim=1)))
    prep(grad, x, gs)
    e = t(lambda: prep(grad, x, gs))
    print(f"T={T} compiled gradᵀ, xᵀ casts and grad's row norms: {e:.3f} ms")
    wib = fp8_weight_blocks(w_in.T)
    f_old = torch.compile(lambda grad, x, post: mlp_grads(grad, x, w_in, w_out, post, *wib, *fp8_rows(grad), wo8, wos))
    f_new = torch.compile(lambda grad, x, post, pr: mlp_grads_fp8(grad, x, w_out, post, pr, *wib, *fp8_rows(grad), wo8, wos))
    f_old(grad, x, post); f_new(grad, x, post, post_rows)
    g_old = t(lambda: f_old(grad, x, post)); g_new = t(lambda: f_new(grad, x, post, post_rows))
    print(f"T={T} compiled mlp_grads (bf16 dW) {g_old:.3f} ms, mlp_grads_fp8 {g_new:.3f} ms")
