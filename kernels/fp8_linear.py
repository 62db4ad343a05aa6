"""A linear layer on RMS-normed rows with its forward matmul in FP8: y = x @ wᵀ from e4m3 copies of x and w, the
backward in the inputs' dtype.

FP8 projections by @YouJiacheng (LM head, MLP) and @Glitchfix (packed QKV) in modded-nanogpt
(https://github.com/KellerJordan/modded-nanogpt); this is an independent implementation.

    forward   y = w_scale · (x8 @ w8ᵀ)      x8 = e4m3(x), unscaled; w8 = e4m3(w / w_scale), w_scale = amax|w| / 448
    backward  dx = g @ w,  dw = gᵀ x        in x's dtype, from x and w (the FP8 copies are dropped after the forward)

x must have RMS-normed rows (the model's norm(x)): no entry exceeds sqrt(D), far inside e4m3's 448, so x needs no
scale and no reduction over the activations. cuBLASLt's FP8 matmul wants both operands with the reduced dimension
contiguous, which x (T, K) and w (N, K) already are: no transposed copy. Under torch.compile the casts fuse into
the kernels that make x and w.
"""
import torch
from torch import Tensor

E4M3 = torch.float8_e4m3fn
E4M3_MAX = torch.finfo(E4M3).max  # 448


def amax_scale(t: Tensor) -> Tensor:
    """0-d fp32 amax(|t|) / 448, never zero or subnormal: t / scale fills e4m3's range."""
    return (t.abs().amax().float() / E4M3_MAX).clamp_min(torch.finfo(torch.float32).tiny)


def fp8_operands(x: Tensor, w: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """e4m3 x (unscaled: x must have RMS-normed rows), e4m3 w / scale, and that scale (amax_scale(w))."""
    w_scale = amax_scale(w)
    return x.to(E4M3), (w / w_scale).to(E4M3), w_scale


@torch.library.custom_op("nanogpt::fp8_linear", mutates_args=())
def fp8_linear_op(x: Tensor, w: Tensor, x8: Tensor, w8: Tensor, w_scale: Tensor) -> Tensor:
    """x (T, K), w (N, K) -> x @ wᵀ (T, N) in x's dtype, computed from x8 = e4m3(x) and w8 = e4m3(w / w_scale) (0-d
    fp32); x and w are what the backward reads."""
    # x8 carries no scale (hence the ones). Fast accumulation: faster (records/enwiki-124/2026-11-26_fp8-mlp-down-
    # projection), its error far below the operands' e4m3 rounding (tests/test_fp8_linear.py)
    return torch._scaled_mm(x8, w8.T, scale_a=w_scale.new_ones(()), scale_b=w_scale, out_dtype=x.dtype,
                            use_fast_accum=True)


@fp8_linear_op.register_fake
def _(x, w, x8, w8, w_scale):
    return x.new_empty(x.size(0), w.size(0))


def _setup(ctx, inputs, output):
    x, w = inputs[:2]
    ctx.save_for_backward(x, w)


def _backward(ctx, grad):
    x, w = ctx.saved_tensors
    return grad @ w, grad.T @ x, None, None, None


fp8_linear_op.register_autograd(_backward, setup_context=_setup)


def fp8_linear(x: Tensor, w: Tensor) -> Tensor:
    """F.linear(x, w) with the forward in FP8, for x (..., K) with RMS-normed rows and w (N, K); K and N multiples
    of 16 (cuBLASLt's FP8 rows)."""
    rows = x.reshape(-1, x.size(-1))
    return fp8_linear_op(rows, w, *fp8_operands(rows, w)).view(*x.shape[:-1], w.size(0))


def fp8_linear_reference(x8: Tensor, w8: Tensor, w_scale: Tensor) -> Tensor:
    """What fp8_linear_op computes from its FP8 operands, in fp64: exact products and sums."""
    return x8.double() @ w8.double().T * w_scale.double()
