"""The LM head + soft-capped MTP cross entropy op that training runs (kernels/lm_head.py): the summed loss, the
per-position losses and the gradients of x and w through its registered autograd (a non-unit upstream scalar
gradient, like the trainer's loss scale), against the fp64 PyTorch reference.

    python -m pytest -q tests/test_lm_head.py

On the CPU the op runs its bf16/fp32 path (a plain matmul, the CE reference); with CUDA the CE runs on the
Triton kernel and the FP8 path (e4m3 operands, e5m2 logit gradients) at the model's shapes.
"""
import pytest
import torch

from kernels.lm_head import head_loss_op, head_loss_reference
from tests.utils import DEVICE, GPU_ONLY, rel_error

SOFTCAP = (23.0, 5.0, 7.5)  # (A, B, C), the model's (GPTConfig.logit_cap)
FP8_SCALES = dict(x_scale=100 / 448, w_scale=1.6 / 448, grad_scale=0.75 / 448)  # the model's (GPTConfig.head_*)
LOSS_SCALE = 1 / 8  # the upstream gradient: the trainer's loss scale at 8 accumulation steps
# (T, D, V); V = 50304 is the padded GPT-2 vocabulary. FP8 matmuls need every size a multiple of 16.
SHAPES = [(1, 8, 5), (9, 16, 37), (130, 64, 1000), pytest.param(2048, 768, 50304, marks=GPU_ONLY)]
FP8_SHAPES = [(64, 128, 512), (2048, 768, 50304)]
# (dtype, largest relative error (Frobenius) of the losses, of the gradients): bf16 rounds logits and gradients once
DTYPES = [pytest.param(torch.float32, 1e-6, 1e-5, id="fp32"), pytest.param(torch.bfloat16, 1e-2, 2e-2, id="bf16")]
# FP8 rounds the operands to 3 mantissa bits and the logit gradients to 2: emulating those roundings on the CPU at
# both FP8 shapes gave 1.3-2.0e-3 for the losses and 5.9-6.3e-2 for the gradients; these bounds allow 2.5x that,
# far below what a wrong scale or transpose gives (errors of order 1)
FP8_LOSS_TOL, FP8_GRAD_TOL = 1e-2, 0.15


def check_head_loss(T, D, V, dtype, fp8, loss_tol, grad_tol, tanh_sigmoid=False):
    torch.manual_seed(T + V)
    x = torch.randn(T, D, device=DEVICE).to(dtype).requires_grad_()  # a normed stream: unit scale
    w = (0.05 * torch.randn(D, V, device=DEVICE)).to(dtype).requires_grad_()  # a trained head's scale: logits ~1
    targets = torch.randint(0, V, (T,), device=DEVICE)
    mtp = torch.tensor([1.0, 0.5, 0.25], device=DEVICE)
    loss, losses = head_loss_op(x, w, targets, mtp, SOFTCAP, **FP8_SCALES, fp8=fp8, tanh_sigmoid=tanh_sigmoid)[:2]
    (loss * LOSS_SCALE).backward()

    ref_x, ref_w = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    ref = head_loss_reference(ref_x, ref_w, targets, mtp.double(), SOFTCAP)
    (ref.sum() * LOSS_SCALE).backward()
    assert loss.shape == () and loss.dtype == losses.dtype == torch.float32 and torch.isfinite(losses).all()
    assert not losses.requires_grad, "only the summed loss is differentiable"
    assert rel_error(losses, ref) < loss_tol, ("losses", rel_error(losses, ref))
    assert rel_error(loss, losses.sum()) < 1e-6, ("loss", loss.item(), losses.sum().item())
    for name, got, want in (("grad x", x.grad, ref_x.grad), ("grad w", w.grad, ref_w.grad)):
        assert got.dtype == dtype and torch.isfinite(got).all(), name
        assert rel_error(got, want) < grad_tol, (name, rel_error(got, want))


@pytest.mark.parametrize("T,D,V", SHAPES)
@pytest.mark.parametrize("dtype,loss_tol,grad_tol", DTYPES)
def test_head_loss_op(T, D, V, dtype, loss_tol, grad_tol):
    check_head_loss(T, D, V, dtype, False, loss_tol, grad_tol)


@GPU_ONLY
@pytest.mark.parametrize("T,D,V", FP8_SHAPES)
@pytest.mark.parametrize("tanh_sigmoid", [False, True], ids=["exact-sigmoid", "tanh-sigmoid"])
def test_head_loss_op_fp8(T, D, V, tanh_sigmoid):
    """The trainer's head: FP8, with the CE's sigmoid exact or from tanh.approx (--fp8_body; its error is ~1e-4 of
    FP8's)."""
    check_head_loss(T, D, V, torch.bfloat16, True, FP8_LOSS_TOL, FP8_GRAD_TOL, tanh_sigmoid)


def test_losses_use_the_given_soft_cap():
    """The cap reaches the kernel: another (A, B, C) gives the reference's other losses."""
    x, w = torch.randn(5, 8, device=DEVICE), torch.randn(8, 11, device=DEVICE)
    targets, mtp = torch.randint(0, 11, (5,), device=DEVICE), torch.tensor([1.0], device=DEVICE)
    for cap in (SOFTCAP, (15.0, 2.0, 3.0)):
        got = head_loss_op(x, w, targets, mtp, cap, **FP8_SCALES, fp8=False, tanh_sigmoid=False)[1]
        assert rel_error(got, head_loss_reference(x.double(), w.double(), targets, mtp.double(), cap)) < 1e-5


@pytest.mark.parametrize("fp8", [False, pytest.param(True, marks=GPU_ONLY)])
def test_saved_tensors_exclude_the_logits(fp8):
    """The backward keeps x, w (or their FP8 copies) and the logit gradient: no logits, no logsumexp."""
    T, D, V = FP8_SHAPES[0]
    x = torch.randn(T, D, device=DEVICE).to(torch.bfloat16).requires_grad_()
    w = (0.05 * torch.randn(D, V, device=DEVICE)).to(torch.bfloat16).requires_grad_()
    targets, mtp = torch.randint(0, V, (T,), device=DEVICE), torch.tensor([1.0, 0.5], device=DEVICE)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append((tuple(t.shape), t.dtype)) or t, lambda t: t):
        head_loss_op(x, w, targets, mtp, SOFTCAP, **FP8_SCALES, fp8=fp8, tanh_sigmoid=False)
    operand, grad = (torch.float8_e4m3fn, torch.float8_e5m2) if fp8 else (torch.bfloat16, torch.bfloat16)
    assert sorted(saved, key=str) == sorted([((T, D), operand), ((D, V), operand), ((T, V), grad)], key=str), saved
