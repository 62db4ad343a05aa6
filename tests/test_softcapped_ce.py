"""Fused soft-capped MTP cross entropy (losses and logit gradient in one kernel) vs its fp64 PyTorch reference.

    python -m pytest -q tests/test_softcapped_ce.py

On the CPU the Triton launcher runs through the interpreter (fp32/fp16, small shapes); with CUDA the
same tests add bf16 logits, the real vocabulary (50304) and float8_e5m2 gradients (the interpreter's fp8
cast truncates below 2^-14 and drops the carry of a mantissa rounded up, 0.118 -> 0.0625: GPU only).
"""
import itertools
from functools import partial

import pytest
import torch
import triton
import triton.language as tl

import kernels.softcapped_ce as softcapped_ce_module
from kernels.softcapped_ce import (
    CPU_BLOCK_ROWS, CEConfig, _reciprocal_fma, ce_config, cpu_row_blocks, softcapped_ce, softcapped_ce_forward_reference,
    softcapped_ce_reference, softcapped_ce_triton,
)
from tests.utils import DEVICE, GPU_ONLY, assert_close

SOFTCAP = (23.0, 5.0, 7.5)  # (A, B, C), the model's (GPTConfig.logit_cap)
# (N rows, V columns)
SHAPES = [(1, 1), (7, 37), (129, 1000)] + [pytest.param(*s, marks=GPU_ONLY) for s in [(1, 50304), (129, 50304), (2048, 50304)]]
# logits dtypes; the losses are fp32 whatever the input
LOGIT_DTYPES = [torch.float32, torch.float16, pytest.param(torch.bfloat16, marks=GPU_ONLY)]
LOSS_ATOL, LOSS_RTOL = 1e-4, 1e-5
# (gradient dtype, atol, rtol) against the unrounded fp64 reference: rtol is about one rounding of the
# dtype; atol covers p = exp(z - lse), which inherits the absolute error of an fp32 lse near 20 (~2e-6)
GRAD_DTYPES = [(torch.float32, 2e-5, 1e-4), (torch.float16, 2e-5, 1e-3),
               pytest.param(torch.bfloat16, 2e-5, 8e-3, marks=GPU_ONLY)]
MTP_WEIGHTS = {1: [1.0], 2: [1.0, 0.5], 3: [1.0, 0.5, 0.25]}
# tanh_sigmoid's extra error (GPU only): tanh.approx.f32 is within 1.12e-5 relative of tanh over all fp32 inputs as
# measured (https://forums.developer.nvidia.com/t/hardware-accelerated-tanh-on-turing/173291; the PTX ISA promises
# 2^-11). That moves z = (A/2)(1 + th) by (A/2)·TANH_ERR, so a loss (its lse and its targets' z, weights summing to
# S) by at most A·S·TANH_ERR, and a gradient entry (A/C)(1 - th²)/4·(S·p - h), h its summed target weight, by
# (A/C)·TANH_ERR·(S·p·(1/2 + A/4) + h/2): (1 - th²)/4 moves by TANH_ERR/2, p by A·TANH_ERR relative
TANH_ERR = 1.12e-5
# (reverse_pass2, fma_reciprocal): every kernel variant the config table can pick
VARIANTS = list(itertools.product([False, True], repeat=2))
VARIANT_IDS = [f"{'reverse' if r else 'forward'}-{'fma' if f else 'mufu'}" for r, f in VARIANTS]


def make_inputs(n_rows, n_cols, dtype, mtp_weights, targets=None):
    """Fresh random logits spanning the soft cap's range, random targets, fp32 weights on DEVICE."""
    logits = (8 * torch.randn(n_rows, n_cols, device=DEVICE)).to(dtype)
    if targets is None:
        targets = torch.randint(0, n_cols, (n_rows,), device=DEVICE)
    return logits, targets.to(DEVICE), torch.tensor(mtp_weights, dtype=torch.float32, device=DEVICE)


def tanh_grad_bound(logits, targets, weights):
    """Per gradient entry (grad_scale 1), how far tanh_sigmoid may move it: see TANH_ERR."""
    A, B, C = SOFTCAP
    x, w = logits.double(), weights.double()
    _, lse = softcapped_ce_forward_reference(x, targets, w, *SOFTCAP)
    p = torch.exp(A * torch.sigmoid((x + B) / C) - lse[:, None])
    h = torch.zeros_like(p)  # each entry's summed target weight
    for k in range(min(len(w), len(targets))):
        n = len(targets) - k
        h[:n].scatter_add_(1, targets[k:, None], w[k].expand(n, 1).contiguous())
    return (A / C * TANH_ERR * (w.sum() * p * (0.5 + A / 4) + h / 2)).cpu()


def check_against_reference(logits, targets, weights, grad_dtype, atol, rtol, grad_scale=1.0, config=None,
                            tanh_sigmoid=False):
    losses, grad = softcapped_ce_triton(logits, targets, weights, *SOFTCAP, grad_scale=grad_scale,
                                        out_dtype=grad_dtype, tanh_sigmoid=tanh_sigmoid, config=config)
    ref_losses, ref_grad = softcapped_ce_reference(logits.double(), targets, weights, *SOFTCAP, grad_scale=grad_scale,
                                                   out_dtype=torch.float64)
    assert losses.dtype == torch.float32 and grad.dtype == grad_dtype
    loss_atol = LOSS_ATOL + (SOFTCAP[0] * weights.sum().item() * TANH_ERR if tanh_sigmoid else 0.0)
    assert_close(losses, ref_losses, loss_atol, LOSS_RTOL, "losses")
    # the atol is for gradients of size ~1 (grad_scale 1)
    if tanh_sigmoid:
        atol = atol + tanh_grad_bound(logits, targets, weights)
    assert_close(grad, ref_grad, atol / grad_scale, rtol, "grad_logits")


@pytest.mark.parametrize("n_rows,n_cols", SHAPES)
@pytest.mark.parametrize("dtype", LOGIT_DTYPES)
@pytest.mark.parametrize("grad_dtype,atol,rtol", GRAD_DTYPES)
@pytest.mark.parametrize("num_predict,grad_scale", [(1, 1.0), (2, 0.5), (3, 0.25)])
def test_softcapped_ce(n_rows, n_cols, dtype, grad_dtype, atol, rtol, num_predict, grad_scale, poison_empty):
    logits, targets, weights = make_inputs(n_rows, n_cols, dtype, MTP_WEIGHTS[num_predict])
    check_against_reference(logits, targets, weights, grad_dtype, atol, rtol, grad_scale)


@pytest.mark.parametrize("reverse_pass2,fma_reciprocal", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("n_rows,n_cols,dtype", [(129, 1000, torch.float32),
                                                 pytest.param(2048, 50304, torch.bfloat16, marks=GPU_ONLY)])
@pytest.mark.parametrize("block_rows,block_v,num_stages", [(1, 256, 1), (4, 128, 3)])
def test_variants(reverse_pass2, fma_reciprocal, n_rows, n_cols, dtype, block_rows, block_v, num_stages, poison_empty):
    """Both pass-2 orders and both reciprocals, with partial row and column blocks (129 rows, 1000 columns), with
    and without pipelined loads."""
    logits, targets, weights = make_inputs(n_rows, n_cols, dtype, MTP_WEIGHTS[3])
    config = CEConfig(block_rows, block_v, 4, reverse_pass2, fma_reciprocal, num_stages)
    check_against_reference(logits, targets, weights, torch.float32, 2e-5, 1e-4, 0.5, config)


@GPU_ONLY
@pytest.mark.parametrize("n_rows,n_cols,dtype", [(129, 1000, torch.float32), (2048, 50304, torch.bfloat16)])
@pytest.mark.parametrize("num_predict,grad_scale", [(1, 1.0), (3, 0.25)])
@pytest.mark.parametrize("config", [CEConfig(1, 8192, 16, fma_reciprocal=False),
                                    CEConfig(1, 4096, 32, fma_reciprocal=False),
                                    CEConfig(4, 128, 4, num_stages=3), CEConfig(1, 256, 4, reverse_pass2=False)],
                         ids=["training", "training-49152", "r4-v128-s3", "r1-v256-forward"])
def test_tanh_sigmoid(n_rows, n_cols, dtype, num_predict, grad_scale, config, poison_empty):
    """The sigmoid from tanh.approx (--fp8_body's CE) against the exact reference, within the bounds its error
    allows (TANH_ERR), with partial row and column blocks, both pass-2 orders and the config training runs (the
    sm_90 table's for tanh_sigmoid). The absolute floor is a tenth of the exact tests' (the fp32 math's own error is
    ~1e-7): the full vocabulary's entries are all below 1e-4, and a 10% error in them must fail."""
    logits, targets, weights = make_inputs(n_rows, n_cols, dtype, MTP_WEIGHTS[num_predict])
    check_against_reference(logits, targets, weights, torch.float32, 2e-6, 1e-4, grad_scale, config,
                            tanh_sigmoid=True)


@GPU_ONLY
@pytest.mark.parametrize("sigmoid", ["mufu", "fma", "tanh"])
@pytest.mark.parametrize("n_rows,num_predict", [(129, 3), (2048, 1)])
def test_e5m2_gradient(sigmoid, n_rows, num_predict, poison_empty):
    """The training output: bf16 logits of the real vocabulary, e5m2 gradients at the model's grad_scale, at most
    one e5m2 step (2 mantissa bits, subnormal below 2^-14) from the fp64 reference rounded to e5m2."""
    grad_scale = 0.75 / 448  # GPTConfig.head_grad_scale
    logits, targets, weights = make_inputs(n_rows, 50304, torch.bfloat16, MTP_WEIGHTS[num_predict])
    tanh_sigmoid = sigmoid == "tanh"
    config = ce_config(logits.device, n_rows, 50304, tanh_sigmoid)._replace(fma_reciprocal=sigmoid == "fma")
    _, grad = softcapped_ce_triton(logits, targets, weights, *SOFTCAP, grad_scale=grad_scale,
                                   out_dtype=torch.float8_e5m2, tanh_sigmoid=tanh_sigmoid, config=config)
    _, ref = softcapped_ce_reference(logits.double(), targets, weights, *SOFTCAP, grad_scale=grad_scale,
                                     out_dtype=torch.float64)
    ref8 = ref.float().to(torch.float8_e5m2).double()
    step = torch.exp2(ref8.abs().clamp_min(2.0**-14).log2().floor() - 2)
    bad = ~((grad.double() - ref8).abs() <= step)
    assert not bad.any(), f"{int(bad.sum())} gradients over one e5m2 step off, e.g. at {bad.nonzero()[:5].tolist()}"


# MTP edge cases: (name, N, V, weights, targets or None for random)
EDGE_CASES = [
    ("fewer_rows_than_predictions", 2, 37, [1.0, 0.5, 0.25], None),
    ("zero_weights", 7, 37, [1.0, 0.0, 0.0], None),
    ("only_later_predictions", 7, 37, [0.0, 0.5, 0.25], None),
    ("repeated_targets", 7, 37, [1.0, 0.5, 0.25], torch.full((7,), 3)),
    ("targets_repeating_in_windows", 9, 37, [1.0, 0.5, 0.25], torch.tensor([3, 5, 3, 3, 5, 7, 7, 3, 5])),
]


@pytest.mark.parametrize("reverse_pass2,fma_reciprocal", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("name,n_rows,n_cols,weights,targets", EDGE_CASES, ids=[c[0] for c in EDGE_CASES])
def test_mtp_edge_cases(reverse_pass2, fma_reciprocal, name, n_rows, n_cols, weights, targets, poison_empty):
    logits, targets, weights = make_inputs(n_rows, n_cols, torch.float32, weights, targets)
    config = ce_config(logits.device, n_rows, n_cols)._replace(reverse_pass2=reverse_pass2,
                                                             fma_reciprocal=fma_reciprocal)
    check_against_reference(logits, targets, weights, torch.float32, 2e-5, 1e-4, config=config)


@triton.jit
def _tanh_exact(x):
    return 2.0 / (1.0 + tl.exp(-2.0 * x)) - 1.0  # +-inf give +-1, as tanh.approx does


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")  # the stand-in at -inf, on purpose
@pytest.mark.parametrize("config", [CEConfig(4, 128, 4, num_stages=3), CEConfig(1, 256, 4, reverse_pass2=False)],
                         ids=["r4-v128-s3", "r1-v256-forward"])
@pytest.mark.parametrize("name,n_rows,n_cols,weights,targets", EDGE_CASES[:1] + EDGE_CASES[3:] + [
    ("random", 129, 1000, [1.0, 0.5, 0.25], None)], ids=lambda v: v if isinstance(v, str) else None)
def test_tanh_sigmoid_algebra(config, name, n_rows, n_cols, weights, targets, monkeypatch, poison_empty):
    """tanh_sigmoid's rewriting of z, exp(z - A) and s(1 - s) through th, with an exact tanh in place of the PTX
    instruction (which the interpreter cannot run; the GPU tests above run it): the exact reference's results."""
    if DEVICE != "cpu":
        pytest.skip("the interpreter's stand-in for tanh.approx; the GPU runs the instruction itself")
    monkeypatch.setattr(softcapped_ce_module, "_tanh_approx", _tanh_exact)
    logits, targets, weights = make_inputs(n_rows, n_cols, torch.float32, weights, targets)
    logits[0, :3] = torch.tensor([float("-inf"), float("inf"), -1e4])
    run = partial(softcapped_ce_triton, targets=targets, mtp_weights=weights, A=SOFTCAP[0], B=SOFTCAP[1],
                  C=SOFTCAP[2], grad_scale=0.5, out_dtype=torch.float32, tanh_sigmoid=True, config=config)
    losses, grad = run(logits)
    ref_losses, ref_grad = softcapped_ce_reference(logits.double(), targets, weights, *SOFTCAP, grad_scale=0.5,
                                                   out_dtype=torch.float64)
    assert_close(losses, ref_losses, LOSS_ATOL, LOSS_RTOL, "losses")
    assert_close(grad, ref_grad, 2e-5 / 0.5, 1e-4, "grad_logits")
    logits[1, 5] = float("nan")  # NaN stays NaN: its row's loss, for the trainer's non-finite check
    losses, _ = run(logits)
    assert losses[1].isnan() and torch.isfinite(losses[torch.arange(n_rows) != 1]).all(), losses


@pytest.mark.filterwarnings("ignore:overflow encountered in exp2")  # the interpreter's numpy, on purpose
@pytest.mark.parametrize("sigmoid", ["mufu", "fma", pytest.param("tanh", marks=GPU_ONLY)])
def test_saturated_and_nan_logits(sigmoid, poison_empty):
    """Logits far past the cap (sigmoid 0 or 1, inf included) give finite losses and gradients; a NaN logit
    makes its row's loss NaN, so a training run's non-finite check still sees it."""
    logits, targets, weights = make_inputs(6, 37, torch.float32, MTP_WEIGHTS[2])
    logits[0, :9] = torch.tensor([-1e4, -700.0, -650.0, 700.0, 1e4, float("-inf"), float("inf"), -1e38, 3e38])
    logits[1, targets[1]] = -1e4  # a target whose sigmoid is 0: loss = lse
    tanh_sigmoid = sigmoid == "tanh"
    config = ce_config(logits.device, 6, 37, tanh_sigmoid)._replace(fma_reciprocal=sigmoid == "fma")
    check_against_reference(logits, targets, weights, torch.float32, 2e-5, 1e-4, config=config,
                            tanh_sigmoid=tanh_sigmoid)
    logits[4, 20] = float("nan")
    losses, _ = softcapped_ce_triton(logits, targets, weights, *SOFTCAP, tanh_sigmoid=tanh_sigmoid, config=config)
    assert losses[4].isnan() and torch.isfinite(losses[torch.arange(6) != 4]).all(), losses


@triton.jit
def _reciprocal_fma_kernel(d_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, _reciprocal_fma(tl.load(d_ptr + offs, mask=offs < n, other=1.0)), mask=offs < n)


def test_reciprocal_fma():
    """Within 1 ulp of 1/d over its range [1, 2^125] (log-uniform samples, near 1, and the ends)."""
    d = torch.cat([torch.exp2(125 * torch.rand(100_000, dtype=torch.float64)).float(), 1 + torch.rand(10_000),
                   torch.tensor([1.0, 1.5, 2.0, 3.0, 2.0**125])]).to(DEVICE)
    out = torch.full_like(d, float("nan"))
    _reciprocal_fma_kernel[(triton.cdiv(d.numel(), 4096),)](d, out, d.numel(), BLOCK=4096)
    exact = 1 / d.cpu().double()
    ulp = (exact.float().nextafter(torch.tensor(0.0)) - exact.float()).abs().double()  # the spacing below 1/d
    err_ulp = (out.cpu().double() - exact).abs() / ulp
    assert err_ulp.max() <= 1.0, f"max error {err_ulp.max():.3f} ulp at d={d[err_ulp.argmax()].item()}"


def test_reference_grad_is_the_gradient_of_the_reference_forward():
    logits, targets, weights = make_inputs(9, 37, torch.float64, MTP_WEIGHTS[3], torch.full((9,), 3))
    logits.requires_grad_()
    losses, _ = softcapped_ce_forward_reference(logits, targets, weights, *SOFTCAP)
    losses.sum().backward()
    ref_losses, grad = softcapped_ce_reference(logits.detach(), targets, weights, *SOFTCAP, grad_scale=2.0,
                                               out_dtype=torch.float64)
    assert_close(ref_losses, losses, 0.0, 0.0, "losses")
    assert_close(grad, logits.grad / 2, 1e-12, 1e-10, "grad_logits")


# The CPU path: the reference's operations by row blocks, which must give its bits. Rows: one block, blocks and a
# remainder, a last single row (it joins the block before), fewer rows than predictions; 5003 columns make a
# block's logsumexp large enough for ATen to run it on several threads.
@pytest.mark.parametrize("n_rows", [1, 2, 7, 2 * CPU_BLOCK_ROWS + 1, 3 * CPU_BLOCK_ROWS + 5])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("weights", [[1.0], [1.0, 0.5, 0.25], [1.0, 0.0, 0.0], [0.0, 0.5, 0.25], [1.0, 0.0, 0.3]])
def test_cpu_path_gives_the_references_bits(n_rows, dtype, weights):
    logits, targets, mtp = (t.cpu() for t in make_inputs(n_rows, 5003, dtype, weights))
    logits[0, :4] = torch.tensor([float("-inf"), float("inf"), -1e4, 1e4]).to(dtype)  # saturated soft caps
    for out_dtype, grad_scale in [(dtype, 1.0), (torch.bfloat16, 0.37)]:
        got = softcapped_ce(logits, targets, mtp, *SOFTCAP, grad_scale=grad_scale, out_dtype=out_dtype)
        want = softcapped_ce_reference(logits, targets, mtp, *SOFTCAP, grad_scale=grad_scale, out_dtype=out_dtype)
        for name, a, b in zip(("losses", "grad"), got, want):
            assert a.dtype == b.dtype and a.shape == b.shape, name
            differ = a.view(-1).view(torch.uint8) != b.view(-1).view(torch.uint8)  # the bits, -0.0 and NaN included
            assert not differ.any(), f"{name}: {int(differ.sum())} bytes differ"


@pytest.mark.parametrize("n_rows", [1, 2, CPU_BLOCK_ROWS, CPU_BLOCK_ROWS + 1, 2 * CPU_BLOCK_ROWS + 1, 100])
def test_cpu_row_blocks_cover_the_rows_and_none_holds_one_row(n_rows):
    blocks = cpu_row_blocks(n_rows)
    assert [a for a, _ in blocks] + [blocks[-1][1]] == sorted({0, n_rows, *(b for _, b in blocks)}), blocks
    assert blocks[0][0] == 0 and blocks[-1][1] == n_rows and all(b == c for (_, b), (c, _) in zip(blocks, blocks[1:]))
    assert all(1 < b - a <= CPU_BLOCK_ROWS + 1 for a, b in blocks) or n_rows == 1, blocks
