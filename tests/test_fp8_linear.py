"""FP8 linear layer on RMS-normed rows (the QKV projection with --fp8_body): the custom op's forward against the same
e4m3 roundings in fp64, its backward against the exact formulas, and its distance from the unquantized layer.

    python -m pytest -q tests/test_fp8_linear.py

cuBLASLt runs the op on a GPU; PyTorch's CPU _scaled_mm on the CPU (fp32/fp16 there, bf16 on the GPU too).
"""
import pytest
import torch
import torch.nn.functional as F

from kernels.fp8_linear import E4M3, amax_scale, fp8_linear, fp8_linear_op, fp8_linear_reference, fp8_operands
from tests.utils import DEVICE, GPU_ONLY, assert_close

# (T, K, N): rows of K and N bytes in e4m3 must be multiples of 16
SHAPES = [(1, 16, 32), (7, 48, 272), (130, 768, 2304), pytest.param(49152, 768, 2304, marks=GPU_ONLY)]
DTYPES = [torch.float32, torch.float16, pytest.param(torch.bfloat16, marks=GPU_ONLY)]


def _inputs(tokens, k, n, dtype):
    x = F.rms_norm(torch.randn(tokens, k, device=DEVICE), (k,))
    x[0, 0] = k**0.5  # one spike: its row's only non-zero entry, the largest a normed row holds
    x[0, 1:] = 0
    w = torch.randn(n, k, device=DEVICE) / k**0.5 * torch.rand(n, 1, device=DEVICE)  # rows of different sizes
    return x.to(dtype).requires_grad_(), w.to(dtype).requires_grad_()


def _check_forward(y, ops):
    """y against what the op computes from its FP8 operands ops = (x8, w8, w_scale): the products of e4m3 values
    are exact, what is left is the sums and the output's rounding. cuBLASLt's fast FP8 accumulation was off by up to
    1.1e-3 of the sum of the products' sizes at K=768 on an H100 (the CPU's _scaled_mm by up to 2e-4); a wrong scale
    or operand is off by their size."""
    expected = fp8_linear_reference(*ops)
    size = fp8_linear_reference(ops[0].abs(), ops[1].abs(), ops[2])
    out_eps = {torch.float32: 2**-24, torch.float16: 2**-11, torch.bfloat16: 2**-8}[y.dtype]
    err = (y.double() - expected).abs() - out_eps * expected.abs()
    assert not y.isnan().any() and (err <= 2**-8 * size).all(), \
        f"fp8 forward off by {(err / size)[size > 0].max().item():.2e} of the products' size"


@pytest.mark.parametrize("tokens,k,n", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_fp8_linear_forward_and_backward(tokens, k, n, dtype, poison_empty):
    x, w = _inputs(tokens, k, n, dtype)
    y = fp8_linear(x, w)
    assert y.shape == (tokens, n) and y.dtype == dtype and torch.isfinite(y).all()
    _check_forward(y, fp8_operands(x.detach(), w.detach()))

    g = torch.randn_like(y)
    y.backward(g)
    x64, w64, g64 = x.detach().double(), w.detach().double(), g.double()
    grad_tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]
    for name, actual, exact in [("grad x", x.grad, g64 @ w64), ("grad w", w.grad, g64.T @ x64)]:
        assert_close(actual.double(), exact, grad_tol * exact.abs().max().item(), grad_tol, name)


def test_fp8_linear_stays_near_the_exact_layer():
    """e4m3 keeps 3 mantissa bits of each operand: relative errors of 2^-4 per product, averaging out in the sums."""
    x, w = _inputs(512, 768, 2304, torch.float32)
    exact = F.linear(x.detach().double(), w.detach().double())
    err = (fp8_linear(x.detach(), w.detach()).double() - exact).norm() / exact.norm()
    assert 0.005 < err < 0.06, f"relative error {err:.4f} of the FP8 forward: not e4m3's"


def test_fp8_copies_and_scale():
    x, w = _inputs(9, 32, 48, torch.float32)
    scale = amax_scale(w.detach())
    assert scale == w.detach().abs().max() / 448
    assert amax_scale(torch.zeros(4, 4)) > 0, "an all-zero weight must not give a zero scale (0/0 in the copy)"
    # the op computes from the copies it is given, not from x and w (which only the backward reads)
    x8, w8, _ = fp8_operands(x.detach(), w.detach())
    assert x8.dtype == w8.dtype == E4M3 and (w8.float().abs().max() == 448)
    _check_forward(fp8_linear_op(x.detach(), w.detach(), x8, w8, scale * 2), (x8, w8, scale * 2))


def test_batched_input_is_rows():
    """x (B, T, K), as F.linear takes it: the same as its (B·T, K) rows."""
    x, w = _inputs(2 * 5, 48, 272, torch.float32)
    y = fp8_linear(x.detach().view(2, 5, 48), w.detach())
    assert y.shape == (2, 5, 272) and torch.equal(y.view(10, 272), fp8_linear(x.detach(), w.detach()))


def test_nan_in_the_input_reaches_the_output():
    x, w = _inputs(16, 32, 48, torch.float32)
    x = x.detach().clone()
    x[3, 5] = float("nan")
    y = fp8_linear(x, w.detach())
    assert y[3].isnan().all() and not y[[0, 1, 2, 4]].isnan().any()
