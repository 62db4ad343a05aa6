"""Host (CPU) time per call of the ops a training step launches, with tiny shapes so that the GPU never
limits: where a host-bound step (stage 1 of the proxy) spends its time. CUDA only.

    python3 tools/host_overhead.py
"""
import sys
import time
from pathlib import Path

import torch
from torch.nn.attention.varlen import varlen_attn
from triton.tools.tensor_descriptor import TensorDescriptor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root
import train_gpt as tg  # noqa: E402
from kernels.relu_square import matmul_relu_square_triton, relu_square_d_pre_op  # noqa: E402
from kernels.transpose import transpose_copy  # noqa: E402
from harness import cli  # noqa: E402
from harness.cli import UserError  # noqa: E402


@torch.library.custom_op("host_overhead::clone", mutates_args=())
def clone_op(a: torch.Tensor) -> torch.Tensor:
    return a.clone()


@cli.program
def main(argv=None):
    cli.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    if not torch.cuda.is_available():
        raise UserError("tools/host_overhead.py measures CUDA launches; run it on a GPU machine")
    T, D, H, V, dev, bf16 = 256, 768, 3072, 50304, "cuda", torch.bfloat16
    x = torch.randn(T, D, device=dev, dtype=bf16)
    w_in, w_out = (0.02 * torch.randn(H, D, device=dev, dtype=bf16) for _ in range(2))
    post = matmul_relu_square_triton(x, w_in)
    head = 0.01 * torch.randn(D, V, device=dev, dtype=bf16)
    defaults = tg.GPTConfig  # its class attributes are the model's soft cap and FP8 scales
    targets = torch.randint(0, V, (T,), device=dev)
    mtp = torch.tensor([1.0, 0.5, 0.0], device=dev)
    q = torch.randn(T, 6, 128, device=dev, dtype=bf16)
    cu = torch.tensor([0, 100, T], dtype=torch.int32, device=dev)
    cases = {
        "cuBLAS x @ w_in.T": lambda: x @ w_in.T,
        "x.clone()": lambda: x.clone(),
        "custom op around x.clone()": lambda: clone_op(x),
        "TensorDescriptor.from_tensor": lambda: TensorDescriptor.from_tensor(x, [128, 64]),
        "matmul_relu_square_triton forward": lambda: matmul_relu_square_triton(x, w_in),
        "matmul_relu_square_triton backward": lambda: matmul_relu_square_triton(x, w_out, post=post),
        "relu_square_mlp_op": lambda: tg.relu_square_mlp_op(x, w_in, w_out),
        "relu_square_d_pre_op": lambda: relu_square_d_pre_op(x, w_out, post),
        "varlen_attn": lambda: varlen_attn(q, q, q, cu, cu, T, T, scale=0.1, window_size=(128, 0)),
        "transpose_copy (256, 768)": lambda: transpose_copy(x, torch.empty(D, T, device=dev, dtype=bf16)),
        "head_loss_op (FP8)": lambda: tg.head_loss_op(x, head, targets, mtp, defaults.logit_cap, defaults.head_x_scale,
                                                      defaults.head_w_scale, defaults.head_grad_scale, fp8=True,
                                                      tanh_sigmoid=True),
    }
    print(f"{'host us/call':>12}  {'with GPU':>9}  op")
    for name, fn in cases.items():
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        n = 200
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        host = (time.perf_counter() - t0) / n * 1e6
        torch.cuda.synchronize()
        total = (time.perf_counter() - t0) / n * 1e6
        print(f"{host:12.1f}  {total:9.1f}  {name}")


if __name__ == "__main__":
    main()
