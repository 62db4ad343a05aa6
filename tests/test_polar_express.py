"""kernels/polar_express.py: Nesterov momentum + Polar Express against the fp64 reference iteration.

Run: python -m pytest -q tests/test_polar_express.py   (CPU: Triton interpreter; GPU: compiled kernels)
"""
import pytest
import torch

from kernels.polar_express import (nesterov_momentum_, nesterov_scaled_reference, nesterov_scaled_triton,
                                   orthogonalize_reference, orthogonalize_triton, polar_express, polar_express_reference,
                                   spectral_norm_bound)
from tests.utils import DEVICE, GPU_ONLY, assert_close, rel_error


# (dtype, atol, max relative error) of orthogonalize_triton vs the fp64 iteration, with atol in
# units of the reference's RMS entry. Worst of 20 seeds on emulations with the same rounding
# points: fp32 ~3e-6 (interpreter; tf32 dots on the GPU are looser), fp16 2.3e-3 / 0.015, bf16
# 1.9e-2 / 0.11 (the polynomials amplify rounding: slope ~1000 near 0, ~16 near 1).
DTYPES = [
    pytest.param((torch.float32, 0.05, 1e-2), id="fp32"),
    pytest.param((torch.float16, 0.05, 5e-3), id="fp16"),
    pytest.param((torch.bfloat16, 0.25, 4e-2), id="bf16", marks=GPU_ONLY),
]
# Agreement with the reference is measured over many singular values, so errors average out. A
# matrix with one singular value (1 x n) shows that value's error alone (up to 13% in bf16), so
# those shapes are checked against the singular-value band only.
SINGLE_VALUE_SHAPES = [(1, 1), (1, 40), (40, 1)]
SHAPES = [
    (65, 129), (129, 65), (37, 1001), (2, 48, 80), (2, 80, 48),
    pytest.param((5, 768, 768), marks=GPU_ONLY, id="attn_shard"),   # per rank on 8 GPUs
    pytest.param((3, 3072, 768), marks=GPU_ONLY, id="mlp_shard"),
    pytest.param((40, 768, 768), marks=GPU_ONLY, id="attn_bank"),   # whole banks on 1 GPU
    pytest.param((24, 3072, 768), marks=GPU_ONLY, id="mlp_bank"),
]
# With every singular value of g/‖g‖_F/1.02 in [1e-3, 1], the five polynomials composed map it
# into [0.859, 1.141] (evaluated on a 2e5-point grid); bf16 rounding moved the extremes by < 0.003
# in emulation. The band leaves room for that, and still fails any missing or wrong iteration.
SINGULAR_VALUE_BAND = (0.8, 1.2)


def _with_spectrum(shape, low=0.1):
    """fp32 matrices U·diag(s)·Vᵀ with s ~ U[low, 1]: after Frobenius scaling the smallest singular
    value is >= low / (sqrt(min(M, N))·1.02) >= 1e-3 for every shape here."""
    *batch, M, N = shape
    rank = min(M, N)
    U = torch.linalg.qr(torch.randn(*batch, M, rank, device=DEVICE, dtype=torch.float64))[0]
    V = torch.linalg.qr(torch.randn(*batch, N, rank, device=DEVICE, dtype=torch.float64))[0]
    s = torch.empty(*batch, rank, device=DEVICE, dtype=torch.float64).uniform_(low, 1.0)
    return (U @ torch.diag_embed(s) @ V.mT).float()


def _assert_matches_reference(actual, expected, atol, max_rel, name):
    rms = expected.double().pow(2).mean().sqrt().item()
    assert_close(actual.double() / rms, expected.double() / rms, atol=atol, rtol=0, name=name)
    assert rel_error(actual, expected) < max_rel, f"{name}: relative error {rel_error(actual, expected):.3g}"


@pytest.mark.parametrize("case", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_orthogonalize_triton_matches_fp64(shape, case):
    dtype, atol, max_rel = case
    G = torch.randn(shape, device=DEVICE, dtype=torch.float64)
    X = G / spectral_norm_bound(G)
    out = orthogonalize_triton(X.to(dtype))
    assert out.dtype == dtype and out.shape == X.shape
    _assert_matches_reference(out, orthogonalize_reference(X), atol, max_rel, "orthogonalize_triton")


@pytest.mark.parametrize("shape", SHAPES + SINGLE_VALUE_SHAPES)
def test_polar_express_is_near_orthogonal(shape):
    """Public op on DEVICE (CUDA: bf16 Triton path; CPU: reference): singular values in the band."""
    grad = _with_spectrum(shape)
    out = polar_express(grad, torch.zeros_like(grad), 0.9)  # zero buffer: g = (1 - 0.9²)·grad
    assert out.dtype == torch.bfloat16 and out.shape == grad.shape
    X = out.double()
    gram = X.mT @ X if X.size(-2) > X.size(-1) else X @ X.mT  # its eigenvalues are σ², faster than an SVD
    singular_values = torch.linalg.eigvalsh(gram).clamp_min(0).sqrt()
    low, high = SINGULAR_VALUE_BAND
    assert low <= singular_values.min() and singular_values.max() <= high, (
        f"singular values span [{singular_values.min():.4f}, {singular_values.max():.4f}], band {SINGULAR_VALUE_BAND}")


@pytest.mark.parametrize("momentum", [0.95, torch.tensor(0.85)], ids=["float", "tensor0d"])
@pytest.mark.parametrize("shape", SHAPES)
def test_polar_express_matches_reference(shape, momentum):
    """Public op on DEVICE vs the fp64 reference, on the same Nesterov momentum inputs."""
    grad = torch.randn(shape, device=DEVICE)
    buffer = torch.randn(shape, device=DEVICE)
    buffer_ref = buffer.clone()
    out = polar_express(grad, buffer, momentum)
    expected = polar_express_reference(grad, buffer_ref, momentum, dtype=torch.float64)
    assert torch.equal(buffer, buffer_ref), "both paths must update the momentum buffer identically"
    # bf16 output either way; the CPU path runs fp32 math, so only the final rounding differs.
    atol, max_rel = (0.25, 4e-2) if grad.is_cuda else (0.05, 1e-2)
    _assert_matches_reference(out, expected, atol, max_rel, "polar_express")


@pytest.mark.parametrize("momentum", [0.9, torch.tensor(0.9)], ids=["float", "tensor0d"])
def test_nesterov_momentum(momentum):
    grad = torch.randn(3, 17, 29, device=DEVICE)
    buffer = torch.randn(3, 17, 29, device=DEVICE)
    m = float(momentum)
    expected_buffer = m * buffer.double() + (1 - m) * grad.double()
    expected_lookahead = (1 - m) * grad.double() + m * expected_buffer
    lookahead = nesterov_momentum_(grad, buffer, momentum)
    assert_close(buffer, expected_buffer, atol=1e-6, rtol=1e-6, name="momentum_buffer")
    assert_close(lookahead, expected_lookahead, atol=1e-6, rtol=1e-6, name="nesterov look-ahead")


# The start's output: bf16 on the GPU (the interpreter mishandles bf16 stores), fp32 on the CPU
START_DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float32
START_SHAPES = [(17, 29), (3, 65, 33), (2, 100, 90),  # numel not a multiple of the block, one block and several
                pytest.param((5, 768, 768), marks=GPU_ONLY, id="attn_shard"),
                pytest.param((11, 3072, 768), marks=GPU_ONLY, id="mlp_shard_world2")]


@pytest.mark.parametrize("momentum", [0.95, 0.3])  # both of lerp's branches, in each of the two lerps
@pytest.mark.parametrize("grad_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", START_SHAPES)
def test_nesterov_scaled_triton_matches_reference(shape, grad_dtype, momentum):
    """The two-pass start against the eager steps: the buffer within fp32 rounding, the scaled look-ahead within its
    dtype's rounding (the norm's sums are added in another order), relative to its RMS entry."""
    grad = torch.randn(shape, device=DEVICE).to(grad_dtype)
    buffer = torch.randn(shape, device=DEVICE)
    buffer_ref = buffer.clone()
    out = nesterov_scaled_triton(grad, buffer, momentum, dtype=START_DTYPE)
    expected = nesterov_scaled_reference(grad, buffer_ref, momentum, dtype=torch.float64)
    assert out.dtype == START_DTYPE and out.shape == grad.shape
    assert_close(buffer, buffer_ref, atol=1e-6, rtol=1e-6, name="momentum_buffer")
    rms = expected.square().mean().sqrt().item()
    rtol = 2 ** -8 if START_DTYPE == torch.bfloat16 else 1e-6
    assert_close(out.double() / rms, expected / rms, atol=1e-5, rtol=rtol, name="scaled look-ahead")


def test_nesterov_scaled_triton_is_deterministic_and_passes_nan():
    """The same inputs give the same bits (the sums are added in one order); a NaN in the gradient reaches the
    output (the guard must see it) instead of being masked."""
    grad, buffer = torch.randn(3, 65, 33, device=DEVICE), torch.randn(3, 65, 33, device=DEVICE)
    first, second = buffer.clone(), buffer.clone()
    a = nesterov_scaled_triton(grad, first, 0.9, dtype=START_DTYPE)
    b = nesterov_scaled_triton(grad, second, 0.9, dtype=START_DTYPE)
    assert torch.equal(a, b) and torch.equal(first, second)
    grad[1, 7, 3] = float("nan")
    out = nesterov_scaled_triton(grad, buffer.clone(), 0.9, dtype=START_DTYPE)
    assert out[1].isnan().all() and out[[0, 2]].isfinite().all(), "a NaN spoils its own matrix (the norm), no other"


def test_cpu_dispatch_uses_reference():
    grad, buffer = torch.randn(2, 12, 20), torch.randn(2, 12, 20)
    buffer_ref = buffer.clone()
    out = polar_express(grad, buffer, 0.9)
    assert torch.equal(out, polar_express_reference(grad, buffer_ref, 0.9))
    assert torch.equal(buffer, buffer_ref)


def test_rejects_bad_inputs():
    grad = torch.randn(4, 6, device=DEVICE)
    with pytest.raises(AssertionError, match="float32 or bfloat16"):
        polar_express(grad.half(), grad.float(), 0.9)
    with pytest.raises(AssertionError, match="in float32"):
        polar_express(grad.bfloat16(), grad.bfloat16(), 0.9)
    with pytest.raises(AssertionError, match="momentum_buffer must match"):
        polar_express(grad, torch.zeros(6, 4, device=DEVICE), 0.9)
