"""The LM head fused with the soft-capped multi-token-prediction cross entropy: the summed loss of
logits = x @ w, as one custom op with its backward.

FP8 LM-head matmul by @YouJiacheng and the transposed (D, V) head by @ChrisJMcCormick in modded-nanogpt
(https://github.com/KellerJordan/modded-nanogpt); this is an independent implementation.

    forward   logits = x @ w              x (T, D), w (D, V); FP8 (e4m3 operands, fixed scales) on CUDA, else as is
              losses, G = soft-capped MTP CE of the logits and    kernels/softcapped_ce.py, one kernel
                          G = d(sum losses)/dlogits               (T, V), e5m2 divided by grad_scale with FP8
              loss = sum of the losses
    backward  g = dL/dloss, a scalar
              dx = g·G @ wᵀ,  dw = g·xᵀ @ G                       FP8 matmuls with FP8, g folded into their scales

The loss is a sum, so its gradient is a scalar times G, and G is computed with the losses: the logits are
freed when the forward returns (~5 GB at the last stage's micro-batch) and never read again.

FP8 matmuls need both operands with the reduced dimension contiguous, so some operands are transposed, by the
tiled Triton kernel (kernels/transpose.py): PyTorch's FP8 transpose-copy of a (49152, 50304) logit gradient
took 18 ms on an H100, ~9x the Triton kernel's time. Custom ops keep the Triton and cuBLASLt calls opaque to
torch.compile.
"""
import torch
from torch import Tensor

from kernels.softcapped_ce import softcapped_ce, softcapped_ce_forward_reference
from kernels.transpose import transposed


@torch.library.custom_op("nanogpt::head_loss", mutates_args=())
def head_loss_op(x: Tensor, w: Tensor, targets: Tensor, mtp_weights: Tensor, softcap: list[float], x_scale: float,
                 w_scale: float, grad_scale: float, fp8: bool, tanh_sigmoid: bool
                 ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """x: (T, D), w: (D, V) -> the summed loss (0-d fp32), which alone is differentiable; the per-position
    losses (T,); and what the backward reads: the logit gradient of the summed loss (T, V) and the FP8
    operands (empty without fp8). softcap: (A, B, C) of A·sigmoid((logits + B)/C). With fp8, x and w are
    divided by x_scale and w_scale before the e4m3 cast, and the logit gradient by grad_scale before the
    e5m2 one; without, the gradient is in the logits' dtype and grad_scale is unused. tanh_sigmoid: the CE kernel's
    sigmoid from tanh.approx (kernels/softcapped_ce.py)."""
    if fp8:
        x8 = x.div(x_scale).to(torch.float8_e4m3fn)
        w8 = w.div(w_scale).to(torch.float8_e4m3fn)
        one = x.new_ones((), dtype=torch.float32)
        logits = torch._scaled_mm(x8, transposed(w8).T, scale_a=one * x_scale, scale_b=one * w_scale,
                                  out_dtype=torch.bfloat16, use_fast_accum=True)
        losses, grad = softcapped_ce(logits, targets, mtp_weights, *softcap, grad_scale=grad_scale,
                                     out_dtype=torch.float8_e5m2, tanh_sigmoid=tanh_sigmoid)
    else:
        x8, w8 = x.new_empty(0), x.new_empty(0)
        logits = x @ w
        losses, grad = softcapped_ce(logits, targets, mtp_weights, *softcap, out_dtype=logits.dtype,
                                     tanh_sigmoid=tanh_sigmoid)
    return losses.sum(), losses, grad, x8, w8


@head_loss_op.register_fake
def _(x, w, targets, mtp_weights, softcap, x_scale, w_scale, grad_scale, fp8, tanh_sigmoid):
    T, V = x.size(0), w.size(1)
    f8 = (lambda t: t.new_empty(t.shape, dtype=torch.float8_e4m3fn)) if fp8 else (lambda t: t.new_empty(0))
    return (x.new_empty((), dtype=torch.float32), x.new_empty(T, dtype=torch.float32),
            x.new_empty(T, V, dtype=torch.float8_e5m2 if fp8 else x.dtype), f8(x), f8(w))


@torch.library.custom_op("nanogpt::head_loss_backward", mutates_args=())
def head_loss_backward_op(grad_loss: Tensor, grad_logits: Tensor, x_saved: Tensor, w_saved: Tensor, x_scale: float,
                          w_scale: float, grad_scale: float, fp8: bool) -> tuple[Tensor, Tensor]:
    """grad_loss: 0-d fp32; grad_logits: (T, V), the forward's gradient of the summed loss -> (dx, dw)."""
    if fp8:
        one = grad_loss.new_ones((), dtype=torch.float32)
        g_scale = grad_loss * grad_scale  # the e5m2 gradient's scale, times the upstream gradient
        grad_x = torch._scaled_mm(grad_logits, w_saved.T, scale_a=g_scale, scale_b=one * w_scale,
                                  out_dtype=torch.bfloat16, use_fast_accum=False)
        grad_w = torch._scaled_mm(transposed(x_saved), transposed(grad_logits).T, scale_a=one * x_scale,
                                  scale_b=g_scale, out_dtype=torch.bfloat16, use_fast_accum=False)
        return grad_x, grad_w
    return grad_loss * (grad_logits @ w_saved.T), grad_loss * (x_saved.T @ grad_logits)


@head_loss_backward_op.register_fake
def _(grad_loss, grad_logits, x_saved, w_saved, x_scale, w_scale, grad_scale, fp8):
    (T, V), D = grad_logits.shape, x_saved.size(1)
    dtype = torch.bfloat16 if fp8 else x_saved.dtype
    return grad_logits.new_empty(T, D, dtype=dtype), grad_logits.new_empty(D, V, dtype=dtype)


def _head_loss_setup(ctx, inputs, output):
    x, w, targets, mtp_weights, softcap, x_scale, w_scale, grad_scale, fp8, _ = inputs
    _, losses, grad_logits, x8, w8 = output
    ctx.mark_non_differentiable(losses, grad_logits, x8, w8)
    ctx.save_for_backward(*((x8, w8) if fp8 else (x, w)), grad_logits)
    ctx.constants = (x_scale, w_scale, grad_scale, fp8)


def _head_loss_backward(ctx, grad_loss, *_):
    x_saved, w_saved, grad_logits = ctx.saved_tensors
    grad_x, grad_w = head_loss_backward_op(grad_loss, grad_logits, x_saved, w_saved, *ctx.constants)
    return grad_x, grad_w, None, None, None, None, None, None, None, None


head_loss_op.register_autograd(_head_loss_backward, setup_context=_head_loss_setup)


def head_loss_reference(x: Tensor, w: Tensor, targets: Tensor, mtp_weights: Tensor, softcap) -> Tensor:
    """The per-position losses in plain PyTorch (fp32 math, or fp64 for fp64 inputs), differentiable."""
    return softcapped_ce_forward_reference(x @ w, targets, mtp_weights, *softcap)[0]
