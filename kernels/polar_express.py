"""Nesterov momentum + Polar Express orthogonalization for the NorMuon matrix banks.

Pure functions; the optimizer that calls them lives in train_gpt.py.

Polar Express: Amsel, Persson, Musco, Gower, "The Polar Express: Optimal Matrix Sign Methods and
Their Application to the Muon Algorithm", https://arxiv.org/abs/2505.16932. Each iteration applies
the odd polynomial p(x) = a·x + b·x³ + c·x⁵ to the singular values of X, with per-iteration
(a, b, c) chosen so that five iterations push every singular value in [1e-3, 1] into [0.86, 1.14].
The fast path follows modded-nanogpt's use of it: bf16 throughout, the small Gram products on the
symmetric Triton kernels (kernels/symmetric.py), the update on cuBLAS. Its start (the momentum's update and the
look-ahead over its norm bound, from the bank's bf16 gradient) is two Triton passes (nesterov_scaled_triton).

Shapes: attention banks (B, 768, 768) are "wide" (M <= N) and use A = X·Xᵀ, X <- a·X + B·X; MLP banks
(B, 3072, 768) are "tall" and use A = Xᵀ·X, X <- a·X + X·B, which gives the same result as
transposing, iterating and transposing back, without the two transpose copies.
"""
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from kernels.symmetric import ba_plus_caa_triton, xtx_triton, xxt_triton


class PolynomialCoeffs(NamedTuple):
    """p(x) = a·x + b·x³ + c·x⁵, applied to the singular values by one iteration."""
    a: float
    b: float
    c: float


# One entry per iteration, computed for num_iters=5, safety_factor=2e-2, cushion=2 with the
# paper's method (values as published with modded-nanogpt's train_gpt.py).
POLAR_EXPRESS_COEFFS = (
    PolynomialCoeffs(a=8.156554524902461, b=-22.48329292557795, c=15.878769915207462),
    PolynomialCoeffs(a=4.042929935166739, b=-2.808917465908714, c=0.5000178451051316),
    PolynomialCoeffs(a=3.8916678022926607, b=-2.772484153217685, c=0.5060648178503393),
    PolynomialCoeffs(a=3.285753657755655, b=-2.3681294933425376, c=0.46449024233003106),
    PolynomialCoeffs(a=2.3465413258596377, b=-1.7097828382687081, c=0.42323551169305323),
)
# X = g / (‖g‖_F·(1 + NORM_SAFETY) + NORM_EPS): the Frobenius norm bounds the spectral norm, and
# the (1 + safety_factor) margin keeps bf16 rounding from pushing a singular value past 1, where
# the polynomials are not designed to converge.
NORM_SAFETY = 2e-2
NORM_EPS = 1e-6


def nesterov_momentum_(grad: torch.Tensor, momentum_buffer: torch.Tensor, momentum) -> torch.Tensor:
    """buffer <- momentum·buffer + (1 - momentum)·grad (in place); returns the Nesterov look-ahead
    (1 - momentum)·grad + momentum·buffer as a new tensor. `momentum`: float or 0-D tensor."""
    if isinstance(momentum, torch.Tensor):  # a 0-D CPU tensor keeps torch.compile from recompiling
        momentum = momentum.to(device=grad.device, dtype=grad.dtype, non_blocking=True)
    momentum_buffer.lerp_(grad, 1 - momentum)
    return grad.lerp(momentum_buffer, momentum)


def spectral_norm_bound(g: torch.Tensor) -> torch.Tensor:
    """Per-matrix divisor (..., 1, 1) that brings the spectral norm of g (..., M, N) below 1."""
    return torch.linalg.vector_norm(g, dim=(-2, -1), keepdim=True) * (1 + NORM_SAFETY) + NORM_EPS


def orthogonalize_reference(X: torch.Tensor) -> torch.Tensor:
    """Five Polar Express iterations in plain PyTorch, in X's dtype (use fp64 as ground truth).
    X (..., M, N) must already have spectral norm <= 1."""
    tall = X.size(-2) > X.size(-1)
    for a, b, c in POLAR_EXPRESS_COEFFS:
        A = X.mT @ X if tall else X @ X.mT  # (..., min(M,N), min(M,N))
        B = b * A + c * (A @ A)
        X = a * X + (X @ B if tall else B @ X)
    return X


def orthogonalize_triton(X: torch.Tensor) -> torch.Tensor:
    """Five Polar Express iterations with the symmetric Triton kernels for A and B and one fused
    cuBLAS call (addmm/baddbmm: out = a·X + B·X) for the update. Same contract as
    orthogonalize_reference; returns a new tensor of X's dtype (bf16 in training)."""
    tall = X.size(-2) > X.size(-1)
    small = min(X.shape[-2:])
    A = X.new_empty((*X.shape[:-2], small, small))  # Gram matrix
    B = torch.empty_like(A)                          # b·A + c·A·A
    gram = xtx_triton if tall else xxt_triton
    update = torch.baddbmm if X.ndim == 3 else torch.addmm
    X = X.contiguous()
    buffers = (torch.empty_like(X), torch.empty_like(X))  # ping-pong; the caller's X is only read
    for step, (a, b, c) in enumerate(POLAR_EXPRESS_COEFFS):
        gram(X, A)
        ba_plus_caa_triton(A, b, c, B)
        out = buffers[step % 2]
        if tall:
            update(X, X, B, beta=a, out=out)  # a·X + X·B
        else:
            update(X, B, X, beta=a, out=out)  # a·X + B·X
        X = out
    return X


def _check_inputs(grad: torch.Tensor, momentum_buffer: torch.Tensor):
    assert grad.ndim in (2, 3), f"grad must be (M, N) or (B, M, N), got shape {tuple(grad.shape)}"
    assert grad.dtype in (torch.float32, torch.bfloat16), f"grad must be float32 or bfloat16, got {grad.dtype}"
    assert momentum_buffer.shape == grad.shape and momentum_buffer.dtype == torch.float32, (
        f"momentum_buffer must match grad, in float32: got {tuple(momentum_buffer.shape)} {momentum_buffer.dtype}")
    assert momentum_buffer.device == grad.device, f"device mismatch: {grad.device} vs {momentum_buffer.device}"


def polar_express_reference(grad: torch.Tensor, momentum_buffer: torch.Tensor, momentum,
                            dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Nesterov momentum (updates momentum_buffer in place), then Polar Express with `dtype`
    math in plain PyTorch; returns the bf16 update, shaped like grad."""
    _check_inputs(grad, momentum_buffer)
    return orthogonalize_reference(nesterov_scaled_reference(grad, momentum_buffer, momentum, dtype)).to(torch.bfloat16)


def nesterov_scaled_reference(grad: torch.Tensor, momentum_buffer: torch.Tensor, momentum,
                              dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Where the iterations start: the Nesterov look-ahead of grad in fp32 (momentum_buffer updated in place),
    divided by spectral_norm_bound, in dtype."""
    g = nesterov_momentum_(grad.float(), momentum_buffer, momentum)
    return (g / spectral_norm_bound(g)).to(dtype)


@triton.jit
def _lerp(a, b, w):  # ATen's form: exact at both ends, and the branch a scalar weight takes
    return tl.where(w < 0.5, a + w * (b - a), b - (b - a) * (1 - w))


@triton.jit
def _nesterov_sums_kernel(grad_ptr, buf_ptr, partial_ptr, numel, momentum, weight, BLOCK: tl.constexpr):
    """One block of one matrix: the buffer's lerp toward grad by weight = 1 - momentum (stored), and the
    look-ahead's sum of squares. weight comes from the host: ATen rounds 1 - momentum from the double."""
    block, mat = tl.program_id(0), tl.program_id(1)
    offs = block * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    base = mat.to(tl.int64) * numel
    m = tl.cast(momentum, tl.float32)
    g = tl.load(grad_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
    b = _lerp(tl.load(buf_ptr + base + offs, mask=mask, other=0.0), g, tl.cast(weight, tl.float32))
    tl.store(buf_ptr + base + offs, b, mask=mask)
    look = _lerp(g, b, m)
    tl.store(partial_ptr + mat * tl.num_programs(0) + block, tl.sum(look * look))


@triton.jit
def _nesterov_scale_kernel(grad_ptr, buf_ptr, partial_ptr, out_ptr, numel, momentum, margin, eps,
                           BLOCK: tl.constexpr, PARTIALS: tl.constexpr):
    """One block of one matrix: the look-ahead again, over its matrix's norm bound from the first pass's sums."""
    block, mat = tl.program_id(0), tl.program_id(1)
    blocks = tl.num_programs(0)
    p = tl.arange(0, PARTIALS)
    sums = tl.load(partial_ptr + mat * blocks + p, mask=p < blocks, other=0.0)
    bound = tl.sqrt(tl.sum(sums)) * tl.cast(margin, tl.float32) + tl.cast(eps, tl.float32)  # spectral_norm_bound's
    offs = block * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    base = mat.to(tl.int64) * numel
    g = tl.load(grad_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
    look = _lerp(g, tl.load(buf_ptr + base + offs, mask=mask, other=0.0), tl.cast(momentum, tl.float32))
    tl.store(out_ptr + base + offs, (look / bound).to(out_ptr.dtype.element_ty), mask=mask)


NESTEROV_BLOCK = 4096  # elements a program: a 768 x 768 matrix is 144 blocks, a 3072 x 768 one 576


def nesterov_scaled_triton(grad: torch.Tensor, momentum_buffer: torch.Tensor, momentum: float,
                           dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """nesterov_scaled_reference in two passes over the matrices (40 bytes an element eager, 18 here; 3.2x faster,
    records/enwiki-124/2026-11-30_polar-express-start-triton): the first updates the buffer and sums each block's
    squares, the second recomputes the look-ahead and writes it over its matrix's norm bound. Deterministic (the
    sums are added in one order); momentum a Python float, which Triton does not specialize on. grad,
    momentum_buffer: contiguous (M, N) or (B, M, N)."""
    assert grad.is_contiguous() and momentum_buffer.is_contiguous(), "grad and momentum_buffer must be contiguous"
    M, N = grad.shape[-2:]
    numel, mats = M * N, grad.numel() // (M * N)
    blocks = triton.cdiv(numel, NESTEROV_BLOCK)
    partial = torch.empty(mats, blocks, dtype=torch.float32, device=grad.device)
    out = torch.empty(grad.shape, dtype=dtype, device=grad.device)
    momentum = float(momentum)
    _nesterov_sums_kernel[(blocks, mats)](grad, momentum_buffer, partial, numel, momentum, 1 - momentum,
                                          BLOCK=NESTEROV_BLOCK, num_warps=8)
    _nesterov_scale_kernel[(blocks, mats)](grad, momentum_buffer, partial, out, numel, momentum, 1 + NORM_SAFETY,
                                           NORM_EPS, BLOCK=NESTEROV_BLOCK, PARTIALS=triton.next_power_of_2(blocks),
                                           num_warps=8)
    return out


def polar_express(grad: torch.Tensor, momentum_buffer: torch.Tensor, momentum) -> torch.Tensor:
    """Nesterov momentum + bf16 Polar Express. grad: fp32 or bf16 (M, N) or (B, M, N); momentum_buffer: fp32,
    grad's shape, updated in place; momentum: float or 0-D CPU tensor. Returns the bf16 orthogonalized update shaped
    like grad. CUDA: the Triton path; CPU: polar_express_reference."""
    if not grad.is_cuda:
        return polar_express_reference(grad, momentum_buffer, momentum)
    _check_inputs(grad, momentum_buffer)
    return orthogonalize_triton(nesterov_scaled_triton(grad, momentum_buffer, momentum))
