"""The LM head fused with the soft-capped multi-token-prediction cross entropy: per-position losses of
logits = x @ w, as one custom op with its backward.

FP8 LM-head matmul by @YouJiacheng and the transposed (D, V) head by @ChrisJMcCormick in modded-nanogpt
(https://github.com/KellerJordan/modded-nanogpt); this is an independent implementation.

    forward   logits = x @ w              x (T, D), w (D, V); FP8 (e4m3 operands, fixed scales) on CUDA, else as is
              losses, lse = soft-capped MTP CE of the logits        kernels/softcapped_ce.py
    backward  g = dloss/dlogits                                     (T, V), e5m2 with FP8, divided by grad_scale
              dx = g @ wᵀ,  dw = xᵀ @ g                             FP8 matmuls with FP8

FP8 matmuls need both operands with the reduced dimension contiguous, so some operands are transposed, by the
tiled Triton kernel (kernels/transpose.py): PyTorch's FP8 transpose-copy of a (49152, 50304) logit gradient
took 18 ms on an H100, ~9x the Triton kernel's time. Custom ops keep the Triton and cuBLASLt calls opaque to
torch.compile.
"""
import torch
from torch import Tensor

from kernels.softcapped_ce import softcapped_ce_backward, softcapped_ce_forward, softcapped_ce_forward_reference
from kernels.transpose import transpose_copy


def transposed(t: Tensor) -> Tensor:
    return transpose_copy(t, t.new_empty(t.shape[::-1]))


@torch.library.custom_op("nanogpt::head_loss", mutates_args=())
def head_loss_op(x: Tensor, w: Tensor, targets: Tensor, mtp_weights: Tensor, softcap: list[float], x_scale: float,
                 w_scale: float, grad_scale: float, fp8: bool) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """x: (T, D), w: (D, V) -> per-position losses (T,), lse (T,), logits (T, V) and the FP8 operands kept for
    the backward (empty without fp8). softcap: (A, B, C) of A·sigmoid((logits + B)/C). With fp8, x and w are
    divided by x_scale and w_scale before the e4m3 cast, and the logit gradient by grad_scale before the e5m2
    one (grad_scale is used by the backward only)."""
    if fp8:
        x8 = x.div(x_scale).to(torch.float8_e4m3fn)
        w8 = w.div(w_scale).to(torch.float8_e4m3fn)
        one = x.new_ones((), dtype=torch.float32)
        logits = torch._scaled_mm(x8, transposed(w8).T, scale_a=one * x_scale, scale_b=one * w_scale,
                                  out_dtype=torch.bfloat16, use_fast_accum=True)
    else:
        x8, w8 = x.new_empty(0), x.new_empty(0)
        logits = x @ w
    losses, lse = softcapped_ce_forward(logits, targets, mtp_weights, *softcap)
    return losses, lse, logits, x8, w8


@head_loss_op.register_fake
def _(x, w, targets, mtp_weights, softcap, x_scale, w_scale, grad_scale, fp8):
    T, V = x.size(0), w.size(1)
    f8 = (lambda t: t.new_empty(t.shape, dtype=torch.float8_e4m3fn)) if fp8 else (lambda t: t.new_empty(0))
    return (x.new_empty(T, dtype=torch.float32), x.new_empty(T, dtype=torch.float32),
            x.new_empty(T, V), f8(x), f8(w))


@torch.library.custom_op("nanogpt::head_loss_backward", mutates_args=())
def head_loss_backward_op(grad_losses: Tensor, logits: Tensor, lse: Tensor, targets: Tensor, mtp_weights: Tensor,
                          x_saved: Tensor, w_saved: Tensor, softcap: list[float], x_scale: float, w_scale: float,
                          grad_scale: float, fp8: bool) -> tuple[Tensor, Tensor]:
    if fp8:
        g8 = softcapped_ce_backward(grad_losses, logits, lse, targets, mtp_weights, *softcap,
                                    grad_scale=grad_scale, out_dtype=torch.float8_e5m2)  # (T, V) = dlogits / grad_scale
        one = g8.new_ones((), dtype=torch.float32)
        grad_x = torch._scaled_mm(g8, w_saved.T, scale_a=one * grad_scale, scale_b=one * w_scale,
                                  out_dtype=torch.bfloat16, use_fast_accum=False)
        grad_w = torch._scaled_mm(transposed(x_saved), transposed(g8).T, scale_a=one * x_scale,
                                  scale_b=one * grad_scale, out_dtype=torch.float32, use_fast_accum=False)
        return grad_x, grad_w.to(torch.bfloat16)
    g = softcapped_ce_backward(grad_losses, logits, lse, targets, mtp_weights, *softcap, out_dtype=logits.dtype)
    return g @ w_saved.T, x_saved.T @ g


@head_loss_backward_op.register_fake
def _(grad_losses, logits, lse, targets, mtp_weights, x_saved, w_saved, softcap, x_scale, w_scale, grad_scale, fp8):
    T, V = logits.shape
    D = x_saved.size(1)
    return logits.new_empty(T, D), logits.new_empty(D, V)


def _head_loss_setup(ctx, inputs, output):
    x, w, targets, mtp_weights, softcap, x_scale, w_scale, grad_scale, fp8 = inputs
    _, lse, logits, x8, w8 = output
    ctx.save_for_backward(*((x8, w8) if fp8 else (x, w)), logits, lse, targets, mtp_weights)
    ctx.constants = (softcap, x_scale, w_scale, grad_scale, fp8)


def _head_loss_backward(ctx, grad_losses, *_):
    x_saved, w_saved, logits, lse, targets, mtp_weights = ctx.saved_tensors
    grad_x, grad_w = head_loss_backward_op(grad_losses.contiguous(), logits, lse, targets, mtp_weights,
                                           x_saved, w_saved, *ctx.constants)
    return grad_x, grad_w, None, None, None, None, None, None, None


head_loss_op.register_autograd(_head_loss_backward, setup_context=_head_loss_setup)


def head_loss_reference(x: Tensor, w: Tensor, targets: Tensor, mtp_weights: Tensor, softcap) -> Tensor:
    """The losses in plain PyTorch (fp32 math, or fp64 for fp64 inputs), differentiable."""
    return softcapped_ce_forward_reference(x @ w, targets, mtp_weights, *softcap)[0]
