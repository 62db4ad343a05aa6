"""Where the FP8 ReLU² kernels' time goes: do_bench medians of each case, or with `ncu` one call of each.

    PYTHONPATH=. python3 records/enwiki-124/2026-11-29_vs-reference-world1-8599132/mlp_kernels.py TOKENS [ncu]

from the repository root, on an H100 or H200 with Triton 3.6 (the backward's warp-specialized kernel).
"""
import sys

import torch
import triton

from kernels.fp8_linear import E4M3, fp8_block_mm, fp8_rows, fp8_tensor, fp8_weight_blocks
from kernels.relu_square import matmul_relu_square_triton, relu_square_backward_hopper

M, D, H = int(sys.argv[1]) if len(sys.argv) > 1 else 49152, 768, 3072
torch.manual_seed(0)
dev = "cuda"
x = torch.nn.functional.rms_norm(torch.randn(M, D, device=dev), (D,)).bfloat16()
w_in = (torch.randn(H, D, device=dev) / D ** 0.5).bfloat16()
w_out = (torch.randn(H, D, device=dev) / H ** 0.5).bfloat16()
g = torch.randn(M, D, device=dev).bfloat16()
x8 = x.to(E4M3)
w_in8, w_scale = fp8_tensor(w_in)
post, post8, post_scale = matmul_relu_square_triton(x8, w_in8, scale=w_scale, out_dtype=torch.bfloat16, fp8_out=True)
g8, g_scale = fp8_rows(g)
w_out8, w_out_scale = fp8_tensor(w_out)
w_out_blocks, w_out_bscale = fp8_weight_blocks(w_out.T)
one = torch.ones((), device=dev)

cases = {
    "fwd_triton_out8": lambda: matmul_relu_square_triton(x8, w_in8, scale=w_scale, out_dtype=torch.bfloat16,
                                                         fp8_out=True),
    "fwd_triton_bf16only": lambda: matmul_relu_square_triton(x8, w_in8, scale=w_scale, out_dtype=torch.bfloat16),
    "bwd_gluon": lambda: relu_square_backward_hopper(g8, w_out8, post, w_out_scale, g_scale),
    "cublas_fp8_same_gemm_bf16out": lambda: torch._scaled_mm(x8, w_in8.T, scale_a=one, scale_b=w_scale,
                                                             out_dtype=torch.bfloat16, use_fast_accum=True),
    "cublas_blockwise_down": lambda: fp8_block_mm(post8, post_scale, w_out_blocks, w_out_bscale, torch.bfloat16),
}
flops = 2 * M * D * H
only = sys.argv[2] if len(sys.argv) > 2 else None
for name, fn in cases.items():
    if only == "ncu":
        fn(); torch.cuda.synchronize()
        continue
    ms = triton.testing.do_bench(fn, warmup=200, rep=1000)
    print(f"{name:32s} {ms * 1e3:8.1f} us  {flops / ms / 1e9:7.0f} TFLOP/s", flush=True)
