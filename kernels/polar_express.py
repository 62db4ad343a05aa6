"""Nesterov momentum + Polar Express orthogonalization for the NorMuon matrix banks.

Pure functions; the optimizer that calls them lives in train_gpt.py.

Polar Express: Amsel, Persson, Musco, Gower, "The Polar Express: Optimal Matrix Sign Methods and
Their Application to the Muon Algorithm", https://arxiv.org/abs/2505.16932. Each iteration applies
the odd polynomial p(x) = a·x + b·x³ + c·x⁵ to the singular values of X, with per-iteration
(a, b, c) chosen so that five iterations push every singular value in [1e-3, 1] into [0.86, 1.14].
The fast path follows modded-nanogpt's use of it: bf16 throughout, the small Gram products on the
symmetric Triton kernels (kernels/symmetric.py), the update on cuBLAS.

Shapes: attention banks (B, 768, 768) are "wide" (M <= N) and use A = X·Xᵀ, X <- a·X + B·X; MLP banks
(B, 3072, 768) are "tall" and use A = Xᵀ·X, X <- a·X + X·B, which gives the same result as
transposing, iterating and transposing back, without the two transpose copies.
"""
from typing import NamedTuple

import torch

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
    assert grad.dtype == torch.float32, f"grad must be float32, got {grad.dtype}"
    assert momentum_buffer.shape == grad.shape and momentum_buffer.dtype == grad.dtype, (
        f"momentum_buffer must match grad: got {tuple(momentum_buffer.shape)} {momentum_buffer.dtype}")
    assert momentum_buffer.device == grad.device, f"device mismatch: {grad.device} vs {momentum_buffer.device}"


def polar_express_reference(grad: torch.Tensor, momentum_buffer: torch.Tensor, momentum,
                            dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Nesterov momentum (updates momentum_buffer in place), then Polar Express with `dtype`
    math in plain PyTorch; returns the bf16 update, shaped like grad."""
    _check_inputs(grad, momentum_buffer)
    g = nesterov_momentum_(grad, momentum_buffer, momentum)
    X = (g / spectral_norm_bound(g)).to(dtype)
    return orthogonalize_reference(X).to(torch.bfloat16)


def polar_express(grad: torch.Tensor, momentum_buffer: torch.Tensor, momentum) -> torch.Tensor:
    """Nesterov momentum + bf16 Polar Express. grad, momentum_buffer: fp32 (M, N) or (B, M, N);
    momentum_buffer is updated in place; momentum: float or 0-D CPU tensor. Returns the bf16
    orthogonalized update shaped like grad. CUDA: Triton path; CPU: polar_express_reference."""
    if not grad.is_cuda:
        return polar_express_reference(grad, momentum_buffer, momentum)
    _check_inputs(grad, momentum_buffer)
    g = nesterov_momentum_(grad, momentum_buffer, momentum)
    X = torch.empty(g.shape, dtype=torch.bfloat16, device=g.device)
    torch.div(g, spectral_norm_bound(g), out=X)  # scale and round to bf16 in one pass
    return orthogonalize_triton(X)
