"""Fused soft-capped MTP cross entropy vs its fp64 PyTorch reference.

    python -m pytest -q tests/test_softcapped_ce.py

On the CPU the Triton launchers run through the interpreter (fp32/fp16, small shapes); with CUDA the
same tests add bf16 logits, the real vocabulary (50304) and float8_e5m2 gradients.
"""
import pytest
import torch

from kernels.softcapped_ce import (
    softcapped_ce_backward_reference, softcapped_ce_backward_triton, softcapped_ce_forward_reference,
    softcapped_ce_forward_triton,
)
from tests.utils import DEVICE, HAS_CUDA, assert_close

SOFTCAP = (23.0, 5.0, 7.5)  # (A, B, C), the model's (GPTConfig.logit_cap)
GPU_ONLY = pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA (the interpreter mishandles bf16 and fp8; real shapes are slow)")
# (N rows, V columns)
SHAPES = [(1, 1), (7, 37), (129, 1000)] + [pytest.param(*s, marks=GPU_ONLY) for s in [(1, 50304), (129, 50304), (2048, 50304)]]
# logits dtypes; the outputs are fp32 whatever the input (tolerances below)
LOGIT_DTYPES = [torch.float32, torch.float16, pytest.param(torch.bfloat16, marks=GPU_ONLY)]
FORWARD_ATOL, FORWARD_RTOL = 1e-4, 1e-5
# (gradient dtype, atol, rtol) against the unrounded fp64 reference: rtol is about one rounding of the
# dtype; atol covers p = exp(z - lse), which inherits the absolute error of an fp32 lse near 20 (~2e-6)
GRAD_DTYPES = [(torch.float32, 2e-5, 1e-4), (torch.float16, 2e-5, 1e-3),
               pytest.param(torch.bfloat16, 2e-5, 8e-3, marks=GPU_ONLY),
               pytest.param(torch.float8_e5m2, 2.0**-16, 0.13, marks=GPU_ONLY)]


def make_inputs(n_rows, n_cols, dtype, mtp_weights, targets=None):
    """Fresh random logits spanning the soft cap's range, random targets, fp32 weights on DEVICE."""
    logits = (8 * torch.randn(n_rows, n_cols, device=DEVICE)).to(dtype)
    if targets is None:
        targets = torch.randint(0, n_cols, (n_rows,), device=DEVICE)
    return logits, targets.to(DEVICE), torch.tensor(mtp_weights, dtype=torch.float32, device=DEVICE)


MTP_WEIGHTS = {1: [1.0], 2: [1.0, 0.5], 3: [1.0, 0.5, 0.25]}


@pytest.mark.parametrize("n_rows,n_cols", SHAPES)
@pytest.mark.parametrize("dtype", LOGIT_DTYPES)
@pytest.mark.parametrize("num_predict", [1, 2, 3])
def test_forward(n_rows, n_cols, dtype, num_predict, poison_empty):
    logits, targets, weights = make_inputs(n_rows, n_cols, dtype, MTP_WEIGHTS[num_predict])
    losses, lse = softcapped_ce_forward_triton(logits, targets, weights, *SOFTCAP)
    ref_losses, ref_lse = softcapped_ce_forward_reference(logits.double(), targets, weights, *SOFTCAP)
    assert_close(lse, ref_lse, FORWARD_ATOL, FORWARD_RTOL, "lse")
    assert_close(losses, ref_losses, FORWARD_ATOL, FORWARD_RTOL, "losses")


@pytest.mark.parametrize("n_rows,n_cols", SHAPES)
@pytest.mark.parametrize("dtype", LOGIT_DTYPES)
@pytest.mark.parametrize("grad_dtype,atol,rtol", GRAD_DTYPES)
@pytest.mark.parametrize("num_predict,grad_scale", [(1, 1.0), (3, 0.25)])
def test_backward(n_rows, n_cols, dtype, grad_dtype, atol, rtol, num_predict, grad_scale, poison_empty):
    logits, targets, weights = make_inputs(n_rows, n_cols, dtype, MTP_WEIGHTS[num_predict])
    grad_losses = torch.randn(n_rows, device=DEVICE)
    _, ref_lse = softcapped_ce_forward_reference(logits.double(), targets, weights, *SOFTCAP)
    grad = softcapped_ce_backward_triton(grad_losses, logits, ref_lse.float(), targets, weights, *SOFTCAP,
                                         grad_scale=grad_scale, out_dtype=grad_dtype)
    ref = softcapped_ce_backward_reference(grad_losses.double(), logits.double(), ref_lse, targets, weights, *SOFTCAP,
                                           grad_scale=grad_scale, out_dtype=torch.float64)
    assert grad.dtype == grad_dtype
    # the atol is for gradients of size ~1 (grad_scale 1)
    assert_close(grad, ref, atol / grad_scale, rtol, "grad_logits")


# MTP edge cases: (name, N, V, weights, targets or None for random)
EDGE_CASES = [
    ("fewer_rows_than_predictions", 2, 37, [1.0, 0.5, 0.25], None),
    ("zero_weights", 7, 37, [1.0, 0.0, 0.0], None),
    ("only_later_predictions", 7, 37, [0.0, 0.5, 0.25], None),
    ("repeated_targets", 7, 37, [1.0, 0.5, 0.25], torch.full((7,), 3)),
]


@pytest.mark.parametrize("name,n_rows,n_cols,weights,targets", EDGE_CASES, ids=[c[0] for c in EDGE_CASES])
def test_mtp_edge_cases(name, n_rows, n_cols, weights, targets, poison_empty):
    logits, targets, weights = make_inputs(n_rows, n_cols, torch.float32, weights, targets)
    grad_losses = torch.tensor(0.5, device=DEVICE).expand(n_rows)  # a broadcast scalar gradient (stride 0)
    losses, lse = softcapped_ce_forward_triton(logits, targets, weights, *SOFTCAP)
    grad = softcapped_ce_backward_triton(grad_losses, logits, lse, targets, weights, *SOFTCAP, out_dtype=torch.float32)
    ref_losses, ref_lse = softcapped_ce_forward_reference(logits.double(), targets, weights, *SOFTCAP)
    ref_grad = softcapped_ce_backward_reference(grad_losses.double(), logits.double(), ref_lse, targets, weights,
                                                *SOFTCAP, out_dtype=torch.float64)
    assert_close(losses, ref_losses, FORWARD_ATOL, FORWARD_RTOL, "losses")
    assert_close(grad, ref_grad, 2e-5, 1e-4, "grad_logits")


def test_reference_backward_is_the_gradient_of_the_reference_forward():
    logits, targets, weights = make_inputs(9, 37, torch.float64, [1.0, 0.5, 0.25], torch.full((9,), 3))
    logits.requires_grad_()
    grad_losses = torch.randn(9, dtype=torch.float64, device=DEVICE)
    losses, lse = softcapped_ce_forward_reference(logits, targets, weights, *SOFTCAP)
    (grad_losses * losses).sum().backward()
    grad = softcapped_ce_backward_reference(grad_losses, logits.detach(), lse.detach(), targets, weights, *SOFTCAP,
                                            grad_scale=2.0, out_dtype=torch.float64)
    assert_close(grad, logits.grad / 2, 1e-12, 1e-10, "grad_logits")
