"""Fused ReLU² MLP (forward and all three input gradients) vs its fp64 PyTorch reference.

    python -m pytest -q tests/test_relu_square.py

On the CPU the Triton path runs through the interpreter (fp32/fp16, small shapes); with CUDA the same
tests run bf16 at the model's shapes.
"""
import pytest
import torch

from kernels.relu_square import relu_square_mlp, relu_square_mlp_reference, relu_square_mlp_triton
from tests.utils import DEVICE, HAS_CUDA, assert_close

# (x shape (..., D), hidden H); a 3-D batch included
SHAPES = [((1, 64), 96), ((7, 40), 264), ((2, 5, 64), 128), ((129, 768), 384)] + (
    [((1000, 768), 3072), ((16384, 768), 3072)] if HAS_CUDA else [])  # interpreter dots are slow
# (dtype, atol as a fraction of the reference's largest magnitude, rtol)
DTYPES = [(torch.bfloat16, 2e-2, 2e-2), (torch.float16, 4e-3, 4e-3)] if HAS_CUDA else [
    (torch.float32, 1e-5, 1e-5), (torch.float16, 4e-3, 4e-3)]  # the interpreter mishandles bf16 dots


def check(actual, expected, atol, rtol, name):
    assert actual.dtype == expected.dtype or expected.dtype == torch.float64, name
    assert_close(actual, expected, atol * expected.abs().max().item(), rtol, name)


@pytest.mark.parametrize("x_shape,hidden", SHAPES)
@pytest.mark.parametrize("dtype,atol,rtol", DTYPES)
def test_mlp_forward_backward(x_shape, hidden, dtype, atol, rtol, poison_empty):
    dim = x_shape[-1]
    x = torch.randn(x_shape, device=DEVICE).to(dtype).requires_grad_()
    # the weights are slices of one bank, as in the model; gradients must land in it
    w_fc = (torch.rand(hidden, dim, device=DEVICE) * 2 - 1) / dim**0.5
    w_proj = torch.randn(hidden, dim, device=DEVICE) / hidden**0.5
    bank = torch.stack([w_fc, w_proj]).to(dtype).requires_grad_()
    w_fc, w_proj = bank.unbind(0)
    out = relu_square_mlp_triton(x, w_fc, w_proj)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)

    ref_x, ref_bank = x.detach().double().requires_grad_(), bank.detach().double().requires_grad_()
    ref_out = relu_square_mlp_reference(ref_x, *ref_bank.unbind(0))
    ref_out.backward(grad_out.double())
    check(out, ref_out, atol, rtol, "out")
    check(x.grad, ref_x.grad, atol, rtol, "grad x")
    check(bank.grad[0], ref_bank.grad[0], atol, rtol, "grad w_fc")
    check(bank.grad[1], ref_bank.grad[1], atol, rtol, "grad w_proj")


def test_public_op_dispatch():
    """relu_square_mlp runs the fused kernel on CUDA and the reference on the CPU; both agree."""
    x, w_fc, w_proj = (torch.randn(s, device=DEVICE) / 8 for s in [(33, 64), (128, 64), (128, 64)])
    dtype = torch.bfloat16 if HAS_CUDA else torch.float32
    x, w_fc, w_proj = x.to(dtype), w_fc.to(dtype), w_proj.to(dtype)
    ref = relu_square_mlp_reference(x.double(), w_fc.double(), w_proj.double())
    check(relu_square_mlp(x, w_fc, w_proj), ref, *DTYPES[0][1:], "out")
