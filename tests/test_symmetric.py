"""kernels/symmetric.py: X·Xᵀ, Xᵀ·X and b·A + c·A·A against fp64 PyTorch.

Run: python -m pytest -q tests/test_symmetric.py   (CPU: Triton interpreter; GPU: compiled kernels)
"""
import pytest
import torch

from kernels.symmetric import (ba_plus_caa, ba_plus_caa_reference, ba_plus_caa_triton, xtx, xtx_reference,
                               xtx_triton, xxt, xxt_reference, xxt_triton)
from tests.utils import DEVICE, GPU_ONLY, assert_close, rel_error


# (dtype, atol, rtol); inputs are scaled so outputs are O(1). Inputs are exact in their dtype and
# the sum is fp32, so the error is mostly the final rounding (2^-8 bf16, 2^-11 fp16). fp32 dots are
# full precision ("ieee"): the default tf32 truncates operands, ~1e-3 off on an H100.
DTYPES = [
    pytest.param((torch.float32, 1e-5, 1e-4), id="fp32"),
    pytest.param((torch.float16, 1e-4, 1e-3), id="fp16"),
    pytest.param((torch.bfloat16, 1e-3, 1e-2), id="bf16", marks=GPU_ONLY),
]
# X shapes, (M, K) or (B, M, K): xxt gives (.., M, M), xtx gives (.., K, K).
GRAM_SHAPES = [
    (37, 1001), (1001, 37), (1, 1), (129, 65), (65, 129), (3, 65, 129), (2, 129, 1),
    # Polar Express operands: wide/square banks use xxt, tall (MLP) banks use xtx; 8-GPU shards
    # (5 attn, 3 mlp matrices per rank) and 1-GPU full banks (40, 24).
    pytest.param((5, 768, 768), marks=GPU_ONLY, id="attn_shard"),
    pytest.param((40, 768, 768), marks=GPU_ONLY, id="attn_bank"),
    pytest.param((3, 3072, 768), marks=GPU_ONLY, id="mlp_shard"),
    pytest.param((24, 3072, 768), marks=GPU_ONLY, id="mlp_bank"),
    pytest.param((3072, 768), marks=GPU_ONLY, id="mlp_matrix"),
]
# A shapes (M, M) or (B, M, M) for ba_plus_caa.
SQUARE_SHAPES = [
    (1, 1), (37, 37), (129, 129), (3, 65, 65),
    pytest.param((768, 768), marks=GPU_ONLY, id="gram"),
    pytest.param((5, 768, 768), marks=GPU_ONLY, id="gram_shard"),
    pytest.param((40, 768, 768), marks=GPU_ONLY, id="gram_bank"),
]
GRAM_OPS = {"xxt": (xxt_triton, xxt_reference, False), "xtx": (xtx_triton, xtx_reference, True)}


def _random(shape, dtype, reduce_dim):
    """Fresh N(0, 1/reduce_dim) values, rounded to dtype, so that Gram entries are O(1)."""
    return (torch.randn(shape, device=DEVICE) / reduce_dim ** 0.5).to(dtype)


def _is_real_shape(shape):
    return min(shape[-2:]) >= 768


@pytest.mark.parametrize("case", DTYPES)
@pytest.mark.parametrize("shape", GRAM_SHAPES)
@pytest.mark.parametrize("op", GRAM_OPS)
def test_gram(op, shape, case):
    triton_fn, reference_fn, transposed = GRAM_OPS[op]
    if _is_real_shape(shape) and (op == "xtx") != (shape[-2] > shape[-1]):
        pytest.skip("real shapes are tested with the op Polar Express uses for them")
    dtype, atol, rtol = case
    size, reduce = (shape[-1], shape[-2]) if transposed else (shape[-2], shape[-1])
    X = _random(shape, dtype, reduce)
    out = torch.full((*shape[:-2], size, size), float("nan"), dtype=dtype, device=DEVICE)
    triton_fn(X, out)
    expected = reference_fn(X.double(), torch.empty(out.shape, dtype=torch.float64, device=DEVICE))
    assert_close(out, expected, atol=atol, rtol=rtol, name=op)


@pytest.mark.parametrize("case", DTYPES)
@pytest.mark.parametrize("shape", SQUARE_SHAPES)
def test_ba_plus_caa(shape, case):
    dtype, atol, rtol = case
    R = torch.randn(shape, device=DEVICE)
    A = ((R + R.mT) / (2 * shape[-1] ** 0.5)).to(dtype)  # symmetric, O(1) products
    b, c = -2.808917465908714, 0.5000178451051316      # a row of the Polar Express table
    out = torch.full(shape, float("nan"), dtype=dtype, device=DEVICE)
    ba_plus_caa_triton(A, b, c, out)
    expected = ba_plus_caa_reference(A.double(), b, c, torch.empty(shape, dtype=torch.float64, device=DEVICE))
    assert_close(out, expected, atol=atol, rtol=rtol, name="ba_plus_caa")


def test_keyword_order_matches_math():
    """b multiplies A and c multiplies A·A (a symmetric A with A·A != A tells them apart)."""
    A = torch.tensor([[2.0, 1.0], [1.0, 3.0]], device=DEVICE)
    out = torch.full_like(A, float("nan"))
    ba_plus_caa_triton(A, b=10.0, c=1.0, out=out)
    assert_close(out, 10.0 * A + A @ A, atol=1e-5, rtol=1e-5, name="ba_plus_caa")


def test_cpu_dispatch_uses_reference():
    X = torch.randn(2, 9, 5)
    assert torch.equal(xxt(X, torch.empty(2, 9, 9)), X @ X.mT)
    assert torch.equal(xtx(X, torch.empty(2, 5, 5)), X.mT @ X)
    A = X @ X.mT
    assert torch.equal(ba_plus_caa(A, 0.5, 2.0, torch.empty_like(A)), ba_plus_caa_reference(A, 0.5, 2.0, torch.empty_like(A)))


def test_output_is_symmetric():
    """The mirrored tiles carry the same values as the computed triangle (up to rounding)."""
    X = _random((3, 200, 150), torch.float32, 150)
    out = torch.full((3, 200, 200), float("nan"), device=DEVICE)
    xxt_triton(X, out)
    assert rel_error(out, out.mT) < 1e-6


@pytest.mark.parametrize("fn, X_shape, out_shape, match", [
    (xxt_triton, (4, 6), (6, 6), "out must have shape"),
    (xtx_triton, (4, 6), (4, 4), "out must have shape"),
    (xxt_triton, (2, 2, 4, 6), (2, 2, 4, 4), "must be"),
    (ba_plus_caa_triton, (4, 6), (4, 4), "square"),
])
def test_wrapper_rejects_bad_inputs(fn, X_shape, out_shape, match):
    X, out = torch.randn(X_shape, device=DEVICE), torch.empty(out_shape, device=DEVICE)
    with pytest.raises(AssertionError, match=match):
        fn(X, 1.0, 1.0, out) if fn is ba_plus_caa_triton else fn(X, out)
