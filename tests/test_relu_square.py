"""Fused ReLU² MLP: the custom op training runs (forward and all three input gradients, through its registered
autograd) vs its fp64 PyTorch reference.

    python -m pytest -q tests/test_relu_square.py

On the CPU the op's Triton kernel runs through the interpreter (fp32/fp16, small shapes); with CUDA the same
tests add bf16 and the model's shapes (shown as skipped without it).
"""
import pytest
import torch

from kernels.fp8_linear import fp8_operands
from kernels.relu_square import (relu_square_mlp, relu_square_mlp_fp8, relu_square_mlp_fp8_op,
                                 relu_square_mlp_op, relu_square_mlp_reference)
from tests.utils import DEVICE, GPU_ONLY, HAS_CUDA, assert_close

CPU_ONLY = pytest.mark.skipif(HAS_CUDA, reason="fp32 dots run as tf32 on the GPU: the CPU case checks exact math")
# (T, D, hidden H)
SHAPES = [(1, 64, 96), (7, 40, 264), (10, 64, 128), (129, 768, 384),
          pytest.param(1000, 768, 3072, marks=GPU_ONLY), pytest.param(16384, 768, 3072, marks=GPU_ONLY)]
# (dtype, atol as a fraction of the reference's largest magnitude, rtol)
DTYPES = [pytest.param(torch.float32, 1e-5, 1e-5, marks=CPU_ONLY), (torch.float16, 4e-3, 4e-3),
          pytest.param(torch.bfloat16, 2e-2, 2e-2, marks=GPU_ONLY)]


def check(actual, expected, atol, rtol, name):
    assert actual.dtype == expected.dtype or expected.dtype == torch.float64, name
    assert_close(actual, expected, atol * expected.abs().max().item(), rtol, name)


@pytest.mark.parametrize("tokens,dim,hidden", SHAPES)
@pytest.mark.parametrize("dtype,atol,rtol", DTYPES)
def test_mlp_op_forward_backward(tokens, dim, hidden, dtype, atol, rtol, poison_empty):
    x = torch.randn(tokens, dim, device=DEVICE).to(dtype).requires_grad_()
    # the weights are slices of one bank, as in the model; gradients must land in it
    w_in = (torch.rand(hidden, dim, device=DEVICE) * 2 - 1) / dim**0.5
    w_out = torch.randn(hidden, dim, device=DEVICE) / hidden**0.5
    bank = torch.stack([w_in, w_out]).to(dtype).requires_grad_()
    w_in, w_out = bank.unbind(0)
    out, post = relu_square_mlp_op(x, w_in, w_out)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)

    ref_x, ref_bank = x.detach().double().requires_grad_(), bank.detach().double().requires_grad_()
    ref_out = relu_square_mlp_reference(ref_x, *ref_bank.unbind(0))
    ref_out.backward(grad_out.double())
    check(out, ref_out, atol, rtol, "out")
    check(post, torch.relu(ref_x @ ref_bank[0].T).square().detach(), atol, rtol, "post (saved for backward)")
    check(x.grad, ref_x.grad, atol, rtol, "grad x")
    check(bank.grad[0], ref_bank.grad[0], atol, rtol, "grad w_in")
    check(bank.grad[1], ref_bank.grad[1], atol, rtol, "grad w_out")


def test_public_dispatch_keeps_batched_shapes():
    """relu_square_mlp runs the op on CUDA (any leading dims) and the reference on the CPU; both agree."""
    x, w_in, w_out = (torch.randn(s, device=DEVICE) / 8 for s in [(3, 11, 64), (128, 64), (128, 64)])
    dtype = torch.bfloat16 if HAS_CUDA else torch.float32
    x, w_in, w_out = x.to(dtype), w_in.to(dtype), w_out.to(dtype)
    ref = relu_square_mlp_reference(x.double(), w_in.double(), w_out.double())
    check(relu_square_mlp(x, w_in, w_out), ref, 2e-2, 2e-2, "out")


# (T, D, H): FP8 rows are D and H bytes, which TMA needs in multiples of 16
FP8_SHAPES = [(1, 64, 96), (7, 48, 272), (129, 768, 384),
              pytest.param(1000, 768, 3072, marks=GPU_ONLY), pytest.param(16384, 768, 3072, marks=GPU_ONLY)]


@pytest.mark.parametrize("tokens,dim,hidden", FP8_SHAPES)
@pytest.mark.parametrize("dtype", [torch.float16, pytest.param(torch.bfloat16, marks=GPU_ONLY)])
def test_fp8_mlp_op_forward_backward(tokens, dim, hidden, dtype, poison_empty):
    """relu_square_mlp_fp8 (--fp8_body): the forward's first matmul on e4m3 copies of x and w_in / amax-scale, the
    backward the unquantized formulas from x, w_in, w_out and that forward's post. Reference: the same roundings in
    fp64. (fp16 on the CPU: the Triton interpreter mishandles the bf16 backward.)"""
    x = (torch.randn(tokens, dim, device=DEVICE) * 2).to(dtype).requires_grad_()
    bank = torch.stack([(torch.rand(hidden, dim, device=DEVICE) * 2 - 1) / dim**0.5,
                        torch.randn(hidden, dim, device=DEVICE) / hidden**0.5]).to(dtype).requires_grad_()
    out = relu_square_mlp_fp8(x, *bank.unbind(0))
    grad_out = torch.randn_like(out)
    out.backward(grad_out)

    x64, w_in, w_out, g = x.detach().double(), bank[0].detach().double(), bank[1].detach().double(), grad_out.double()
    x8, w8, scale = fp8_operands(x.detach(), bank[0].detach())
    assert x8.dtype == w8.dtype == torch.float8_e4m3fn and scale == bank[0].detach().abs().max().float() / 448
    pre = x8.double() @ (w8.double() * scale.double()).T
    post = torch.relu(pre).square()
    d_pre = (g @ w_out.T) * 2 * torch.relu(pre)
    check(out, post @ w_out, 2e-2, 2e-2, "out")
    check(relu_square_mlp_fp8_op(x.detach(), *bank.detach().unbind(0), x8, w8, scale)[1], post, 2e-2, 2e-2,
          "post (saved for backward)")
    check(x.grad, d_pre @ w_in, 2e-2, 2e-2, "grad x")
    check(bank.grad[0], d_pre.T @ x64, 2e-2, 2e-2, "grad w_in")
    check(bank.grad[1], post.T @ g, 2e-2, 2e-2, "grad w_out")
    # the FP8 forward stays within e4m3's error of the bf16 MLP (3 mantissa bits on each operand)
    exact = relu_square_mlp_reference(x64, w_in, w_out)
    assert (out.double() - exact).norm() <= 0.1 * exact.norm(), "FP8 output far from the exact MLP"
