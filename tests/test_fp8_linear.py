"""FP8 linear layer on RMS-normed rows (the QKV projection with --fp8_body): the custom op's forward against the same
e4m3 roundings in fp64, its backward against the exact formulas, and its distance from the unquantized layer. Then
the blockwise-scaled FP8 matmul (the MLP's dx with --fp8_body) and its weight operand.

    python -m pytest -q tests/test_fp8_linear.py

cuBLASLt runs the op on a GPU; PyTorch's CPU _scaled_mm on the CPU (fp32/fp16 there, bf16 on the GPU too).
"""
import pytest
import torch
import torch.nn.functional as F

from kernels.fp8_linear import (E4M3, E4M3_MAX, FP8_BLOCK, amax_scale, fp8_block_mm, fp8_block_mm_reference,
                                fp8_linear, fp8_linear_op, fp8_linear_reference, fp8_operands, fp8_tensor,
                                fp8_weight_blocks)
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
    size = fp8_linear_reference(*(op.double().abs() for op in ops))  # CUDA has no abs of e4m3
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


def _block_by_block(a, a_scale, b, b_scale):
    """a @ bᵀ as cuBLASLt's blockwise FP8 forms it: one product per 128-wide slice of K, scaled by that slice's row
    scales of a and 128-column block scales of b, summed over the slices."""
    out = 0
    for j in range(a.size(1) // FP8_BLOCK):
        k = slice(j * FP8_BLOCK, (j + 1) * FP8_BLOCK)
        col_scale = b_scale[:, j].double().repeat_interleave(FP8_BLOCK)
        out = out + (a[:, k] @ b[:, k].T) * a_scale[j].double()[:, None] * col_scale[None, :]
    return out


# (M, K, N) for a @ bᵀ: M a multiple of 4, K of 512, N of 128
BLOCK_SHAPES = [(4, 512, 128), (8, 1024, 384), (132, 512, 768), pytest.param(49152, 3072, 768, marks=GPU_ONLY)]


@pytest.mark.parametrize("m,k,n", BLOCK_SHAPES)
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_fp8_block_mm(m, k, n, out_dtype, poison_empty):
    """Against fp64 products of each 128-wide slice of K times its scales, summed (as cuBLASLt forms them; the CPU
    path's reference, which scales the operands first, too); scales spanning 2^±20 between blocks, as a gradient's
    rows do. A wrong or misaligned scale is off by a whole block's share of the sums."""
    a8 = torch.randn(m, k, device=DEVICE).mul(64).to(E4M3)
    sizes = torch.exp2(torch.randint(-20, 20, (k // FP8_BLOCK, m), device=DEVICE).float())
    a_scale = sizes * (torch.rand(k // FP8_BLOCK, m, device=DEVICE) + 0.5)
    b8 = torch.randn(n, k, device=DEVICE).mul(64).to(E4M3)
    b_scale = torch.rand(n // FP8_BLOCK, k // FP8_BLOCK, device=DEVICE) + 0.5
    y = fp8_block_mm(a8, a_scale, b8, b_scale, out_dtype)
    assert y.shape == (m, n) and y.dtype == out_dtype and not y.isnan().any()
    expected = _block_by_block(a8.double(), a_scale, b8.double(), b_scale)
    size = _block_by_block(a8.double().abs(), a_scale, b8.double().abs(), b_scale)
    # the reference (what the CPU returns) scales the operands first: the same sums in another order
    assert ((fp8_block_mm_reference(a8, a_scale, b8, b_scale) - expected).abs() <= 1e-12 * size).all()
    out_eps = {torch.float32: 2**-24, torch.bfloat16: 2**-8}[out_dtype]
    err = (y.double() - expected).abs() - out_eps * expected.abs()
    # cuBLASLt sums each 128-product block in the tensor cores' reduced precision (up to 3.0e-4 of the products'
    # size on an H100), then scales and adds the blocks in fp32
    assert (err <= 2**-10 * size).all(), f"off by {(err / size).max().item():.2e} of the products' size"


def test_fp8_weight_blocks():
    """e4m3 copy of w over each 128x128 block's amax / 448, read from a transposed view as the MLP passes w_inᵀ."""
    w = torch.randn(384, 256, device=DEVICE) * torch.exp2(torch.arange(384, device=DEVICE) % 7.0)[:, None]
    w[:128, 128:] = 0  # an all-zero block needs a non-zero scale (0/0 in the copy)
    w8, scale = fp8_weight_blocks(w.T)
    assert w8.shape == (256, 384) and w8.dtype == E4M3 and w8.is_contiguous() and scale.shape == (2, 3)
    blocks = w.T.reshape(2, FP8_BLOCK, 3, FP8_BLOCK)
    assert torch.equal(scale[0, 1], (blocks[0, :, 1].abs().max() / E4M3_MAX).float()) and (scale > 0).all()
    expected = (blocks / scale[:, None, :, None]).to(E4M3).reshape(256, 384)
    assert torch.equal(w8.view(torch.uint8), expected.view(torch.uint8))
    assert (w8.float().view(2, FP8_BLOCK, 3, FP8_BLOCK).abs().amax((1, 3))[scale > 1e-30] == E4M3_MAX).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_stack_of_weights_is_each_weight_on_its_own(dtype):
    """The trainer makes the copies of a whole bank of layers at once (one graph of a few kernels): each layer's copy
    and scales equal, bit for bit, the ones made from that layer alone, also from transposed views."""
    stack = torch.randn(3, 512, 384, device=DEVICE) * torch.exp2(torch.arange(3.0, device=DEVICE) * 5)[:, None, None]
    stack[1, :128, 128:256] = 0  # one all-zero block
    stack = stack.to(dtype)
    for make, view in ((fp8_tensor, lambda t: t), (fp8_weight_blocks, lambda t: t.mT)):
        together = make(view(stack))
        for i, layer in enumerate(stack.unbind(0)):
            for got, alone in zip(together, make(view(layer))):
                assert got[i].shape == alone.shape and got[i].dtype == alone.dtype
                assert torch.equal(got[i].view(torch.uint8) if got.dtype == E4M3 else got[i],
                                   alone.view(torch.uint8) if alone.dtype == E4M3 else alone), f"{make.__name__}, {i}"
                assert got[i].data_ptr() % 16 == 0, "cuBLASLt refuses operands and scales off 16-byte boundaries"


def test_fp8_block_mm_refuses_scales_cublaslt_misreads():
    """cuBLASLt returns wrong sums, without an error, for scale rows that do not start at 16-byte multiples."""
    a8, b8 = torch.ones(6, 512, device=DEVICE).to(E4M3), torch.ones(128, 512, device=DEVICE).to(E4M3)
    with pytest.raises(AssertionError, match="M % 4"):
        fp8_block_mm(a8, torch.ones(4, 6, device=DEVICE), b8, torch.ones(1, 4, device=DEVICE), torch.float32)
    with pytest.raises(AssertionError, match="K % 512"):
        fp8_block_mm(a8[:4, :384], torch.ones(3, 4, device=DEVICE), b8[:, :384], torch.ones(1, 3, device=DEVICE),
                     torch.float32)
