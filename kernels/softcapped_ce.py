"""Fused soft-capped multi-token-prediction (MTP) cross entropy over the LM-head logits.

Soft-capped logits and MTP cross entropy by @classiclarryd et al. in modded-nanogpt
(https://github.com/KellerJordan/modded-nanogpt); this is an independent implementation.

For logits x (N, V) the soft cap is z = A·sigmoid((x + B) / C) and lse_i = logsumexp_v z_iv. Row i
predicts the next K tokens with weights w (K,):

    loss_i = sum_k w_k · (lse_i - z_{i, targets[i + k]})    over k with i + k < N

so the last rows have fewer targets, and a zero weight switches a prediction off without a recompile
(weights live on the device). The backward needs only x and lse:

    d loss_i / d x_iv = g_i · (S_i·p_iv - sum_k w_k·[v == targets[i+k]]) · (A/C)·s·(1 - s)

with s = sigmoid((x + B) / C), p = exp(z - lse) and S_i the sum of row i's valid weights.

Kernel notes:
- z lies in (0, A), so sum_v exp(z - A) neither overflows nor underflows in fp32 (for A <= 64): the
  forward is one plain pass of sums, with no running maximum to track and rescale.
- A, B, C and grad_scale are compile-time constants. Passed as runtime Python floats they can reach
  the kernel as fp64 (the Triton 3.6 failure of the original kernel); as constexprs the compiler folds
  them into fp32 constants, e.g. (x + B)/C and the log2(e) factor of exp2 become one FMA.
- Each program owns BLOCK_ROWS whole rows and walks them in BLOCK_V-wide column blocks (16-byte loads
  when V is a multiple of 8); the sizes come from CE_CONFIGS.
"""
import math
from typing import NamedTuple

import torch
import triton
import triton.language as tl

LOG2E = math.log2(math.e)
MAX_CAP = 64.0  # exp(-A) must stay a normal fp32 number (exp(-87) is the smallest)


# -----------------------------------------------------------------------------
# Triton kernels

@triton.jit
def _softcap_sigmoid(x, X_SCALE: tl.constexpr, X_SHIFT: tl.constexpr):
    """sigmoid((x + B)/C) for fp32 x, where exp(-(x + B)/C) = exp2(x·X_SCALE + X_SHIFT)."""
    # approximate (full-range) division: the IEEE one costs several extra instructions per element
    return tl.fdiv(1.0, 1.0 + tl.exp2(x * X_SCALE + X_SHIFT))


@triton.jit
def _softcapped_ce_fwd_kernel(
    logits_ptr, targets_ptr, weights_ptr,  # (N, V) logits, (N,) int64 targets, (K,) fp32 MTP weights
    losses_ptr, lse_ptr,                   # (N,) fp32 outputs
    n_rows, n_cols, logits_row_stride,
    A: tl.constexpr, A_LOG2E: tl.constexpr, X_SCALE: tl.constexpr, X_SHIFT: tl.constexpr,
    NUM_PREDICT: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_V: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)  # (R,)
    row_ok = rows < n_rows
    row_ptrs = logits_ptr + rows.to(tl.int64) * logits_row_stride

    # sum_v exp(z - A) = sum_v exp2(A·log2(e)·(s - 1)), accumulated per lane, reduced once at the end
    acc = tl.zeros([BLOCK_ROWS, BLOCK_V], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        mask = row_ok[:, None] & (cols < n_cols)[None, :]
        x = tl.load(row_ptrs[:, None] + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        s = _softcap_sigmoid(x, X_SCALE, X_SHIFT)
        # only padding columns are zeroed; rows past the end sum exp(z(0) - A) > 0 and are never stored
        acc += tl.where((cols < n_cols)[None, :], tl.exp2(s * A_LOG2E - A_LOG2E), 0.0)
    lse = A + tl.log(tl.sum(acc, axis=1))  # (R,)

    loss = tl.zeros([BLOCK_ROWS], dtype=tl.float32)
    for k in tl.static_range(NUM_PREDICT):
        has_target = row_ok & (rows + k < n_rows)
        target = tl.load(targets_ptr + rows + k, mask=has_target, other=0)
        x_target = tl.load(row_ptrs + target, mask=has_target, other=0.0).to(tl.float32)
        z_target = A * _softcap_sigmoid(x_target, X_SCALE, X_SHIFT)
        loss += tl.where(has_target, tl.load(weights_ptr + k) * (lse - z_target), 0.0)
    tl.store(lse_ptr + rows, lse, mask=row_ok)
    tl.store(losses_ptr + rows, loss, mask=row_ok)


@triton.jit
def _softcapped_ce_bwd_kernel(
    grad_losses_ptr, logits_ptr, lse_ptr, targets_ptr, weights_ptr,  # (N,), (N, V), (N,), (N,), (K,)
    grad_logits_ptr,                                                 # (N, V) output, any float dtype
    n_rows, n_cols, grad_losses_stride, logits_row_stride, grad_row_stride,
    A_LOG2E: tl.constexpr, X_SCALE: tl.constexpr, X_SHIFT: tl.constexpr, DZ_DS: tl.constexpr,
    NUM_PREDICT: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_V: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)  # (R,)
    row_ok = rows < n_rows
    logits_row_ptrs = logits_ptr + rows.to(tl.int64) * logits_row_stride
    grad_row_ptrs = grad_logits_ptr + rows.to(tl.int64) * grad_row_stride
    out_dtype = grad_logits_ptr.dtype.element_ty
    lse_log2e = tl.load(lse_ptr + rows, mask=row_ok, other=0.0) * 1.4426950408889634  # log2(e)
    # d loss / d s = g·(A/C)/grad_scale·(S·p - hit); DZ_DS folds the constants
    row_scale = tl.load(grad_losses_ptr + rows * grad_losses_stride, mask=row_ok, other=0.0) * DZ_DS
    weight_sum = tl.zeros([BLOCK_ROWS], dtype=tl.float32)
    for k in tl.static_range(NUM_PREDICT):
        weight_sum += tl.where(rows + k < n_rows, tl.load(weights_ptr + k), 0.0)

    # Dense pass: every column as if it were no target
    for start in range(0, n_cols, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        mask = row_ok[:, None] & (cols < n_cols)[None, :]
        x = tl.load(logits_row_ptrs[:, None] + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        s = _softcap_sigmoid(x, X_SCALE, X_SHIFT)
        p = tl.exp2(s * A_LOG2E - lse_log2e[:, None])  # exp(z - lse)
        grad = (s - s * s) * (row_scale * weight_sum)[:, None] * p
        tl.store(grad_row_ptrs[:, None] + cols[None, :], grad.to(out_dtype), mask=mask)

    # Rewrite the (at most K) target columns of each row, which also carry -sum of their weights.
    # Doing it here rather than comparing every column with every target keeps the dense pass
    # memory-bound for any K; the barrier orders these stores after the dense ones of other threads.
    tl.debug_barrier()
    for k in tl.static_range(NUM_PREDICT):
        has_target = row_ok & (rows + k < n_rows)
        target = tl.load(targets_ptr + rows + k, mask=has_target, other=0)
        hit = tl.zeros([BLOCK_ROWS], dtype=tl.float32)  # targets may repeat within a row's window
        for j in tl.static_range(NUM_PREDICT):
            other = tl.load(targets_ptr + rows + j, mask=row_ok & (rows + j < n_rows), other=-1)
            hit += tl.where(other == target, tl.load(weights_ptr + j), 0.0)
        s = _softcap_sigmoid(tl.load(logits_row_ptrs + target, mask=has_target, other=0.0).to(tl.float32),
                             X_SCALE, X_SHIFT)
        p = tl.exp2(s * A_LOG2E - lse_log2e)
        grad = (s - s * s) * row_scale * (weight_sum * p - hit)
        tl.store(grad_row_ptrs + target, grad.to(out_dtype), mask=has_target)


# -----------------------------------------------------------------------------
# Launch configuration

class CEConfig(NamedTuple):
    block_rows: int  # rows per program
    block_v: int     # columns per loop iteration
    num_warps: int


# Configs per (pass, vocabulary size). Tuned on one H100 (N=49152, bf16) for the padded GPT-2
# vocabulary (python -m kernels.bench --sweep): 8 candidates of 1-4 rows, 1024-4096 columns and 2-8
# warps came within 5% of each other (forward ~1.9 ms, bound by its 3 special-function ops per
# element; backward ~2.55 ms, at memory bandwidth). Any other V takes the generic rule.
CE_CONFIGS = {
    ("forward", 50304): CEConfig(1, 2048, 8),
    ("backward", 50304): CEConfig(1, 2048, 8),
}


def ce_config(direction: str, n_cols: int) -> CEConfig:
    if (direction, n_cols) in CE_CONFIGS:
        return CE_CONFIGS[direction, n_cols]
    # generic: ~2048 elements per program and iteration, rows packed together when V is small
    block_v = min(2048, triton.next_power_of_2(n_cols))
    return CEConfig(2048 // block_v, block_v, 4)


def _softcap_constants(A: float, B: float, C: float) -> dict:
    """Compile-time constants of z = A·sigmoid((x + B)/C), in the base-2 form the kernels use."""
    assert 0.0 < A <= MAX_CAP, f"soft cap A={A} must be in (0, {MAX_CAP}] for the max-free logsumexp"
    assert C > 0.0, f"soft cap temperature C={C} must be positive"
    return dict(A_LOG2E=A * LOG2E, X_SCALE=-LOG2E / C, X_SHIFT=-B * LOG2E / C)


def _check_inputs(logits: torch.Tensor, targets: torch.Tensor, mtp_weights: torch.Tensor):
    assert logits.ndim == 2 and logits.stride(1) == 1, \
        f"logits must be (N, V) with contiguous rows, got {tuple(logits.shape)} strides {logits.stride()}"
    assert targets.shape == logits.shape[:1] and targets.dtype == torch.int64 and targets.is_contiguous(), \
        f"targets must be contiguous int64 (N,), got {targets.dtype} {tuple(targets.shape)}"
    assert mtp_weights.ndim == 1 and mtp_weights.numel() >= 1 and mtp_weights.dtype == torch.float32, \
        "mtp_weights must be fp32 (K,), K >= 1"
    assert targets.device == logits.device == mtp_weights.device, "logits, targets and mtp_weights must share a device"


# -----------------------------------------------------------------------------
# Host wrappers

def softcapped_ce_forward_triton(logits, targets, mtp_weights, A, B, C, config=None):
    """Triton forward: logits (N, V) -> (losses fp32 (N,), lse fp32 (N,)). config: CEConfig override."""
    _check_inputs(logits, targets, mtp_weights)
    n_rows, n_cols = logits.shape
    losses = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
    lse = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
    block_rows, block_v, num_warps = config or ce_config("forward", n_cols)
    _softcapped_ce_fwd_kernel[(triton.cdiv(n_rows, block_rows),)](
        logits, targets, mtp_weights.contiguous(), losses, lse,
        n_rows, n_cols, logits.stride(0),
        A=A, **_softcap_constants(A, B, C),
        NUM_PREDICT=mtp_weights.numel(), BLOCK_ROWS=block_rows, BLOCK_V=block_v, num_warps=num_warps,
    )
    return losses, lse


def softcapped_ce_backward_triton(grad_losses, logits, lse, targets, mtp_weights, A, B, C,
                                  grad_scale=1.0, out_dtype=torch.bfloat16, config=None):
    """Triton backward: d(sum_i g_i·loss_i)/d logits / grad_scale as (N, V) out_dtype.

    grad_scale is a compile-time constant (one compiled kernel per value): keep it fixed in training.
    """
    _check_inputs(logits, targets, mtp_weights)
    n_rows, n_cols = logits.shape
    assert grad_losses.shape == lse.shape == (n_rows,) and lse.is_contiguous(), "grad_losses and lse must be (N,)"
    grad_losses = grad_losses.float()  # stride 0 (a broadcast scalar gradient) is fine
    grad_logits = torch.empty(n_rows, n_cols, dtype=out_dtype, device=logits.device)
    block_rows, block_v, num_warps = config or ce_config("backward", n_cols)
    _softcapped_ce_bwd_kernel[(triton.cdiv(n_rows, block_rows),)](
        grad_losses, logits, lse, targets, mtp_weights.contiguous(), grad_logits,
        n_rows, n_cols, grad_losses.stride(0), logits.stride(0), grad_logits.stride(0),
        DZ_DS=A / (C * grad_scale), **_softcap_constants(A, B, C),
        NUM_PREDICT=mtp_weights.numel(), BLOCK_ROWS=block_rows, BLOCK_V=block_v, num_warps=num_warps,
    )
    return grad_logits


# -----------------------------------------------------------------------------
# PyTorch references (fp32 math, or fp64 for fp64 inputs)

def _softcap_reference(logits, A, B, C):
    return A * torch.sigmoid((logits.to(torch.promote_types(logits.dtype, torch.float32)) + B) / C)


def softcapped_ce_forward_reference(logits, targets, mtp_weights, A, B, C):
    z = _softcap_reference(logits, A, B, C)  # (N, V)
    lse = torch.logsumexp(z, dim=1)
    losses = torch.zeros_like(lse)
    for k in range(min(mtp_weights.numel(), len(targets))):
        n = len(targets) - k  # rows i < n have a target at i + k
        z_target = z[:n].gather(1, targets[k:, None])[:, 0]
        losses[:n] += mtp_weights[k].to(z.dtype) * (lse[:n] - z_target)
    return losses, lse


def softcapped_ce_backward_reference(grad_losses, logits, lse, targets, mtp_weights, A, B, C,
                                     grad_scale=1.0, out_dtype=torch.bfloat16):
    s = _softcap_reference(logits, A, B, C) / A  # sigmoid((x + B)/C), (N, V)
    p = torch.exp(A * s - lse[:, None].to(s.dtype))
    weights = mtp_weights.to(s.dtype)
    dz = torch.zeros_like(s)
    for k in range(min(mtp_weights.numel(), len(targets))):
        n = len(targets) - k
        dz[:n] += weights[k] * p[:n]
        dz[:n].scatter_add_(1, targets[k:, None], (-weights[k]).expand(n, 1).contiguous())
    grad = grad_losses[:, None].to(s.dtype) * dz * (A / C) * s * (1 - s) / grad_scale
    return grad.to(out_dtype)


# -----------------------------------------------------------------------------
# Public ops: CUDA -> Triton, CPU -> reference

def softcapped_ce_forward(logits, targets, mtp_weights, A, B, C):
    """Per-row MTP losses and logsumexp of the soft-capped logits: fp32 (N,), fp32 (N,)."""
    fn = softcapped_ce_forward_triton if logits.is_cuda else softcapped_ce_forward_reference
    return fn(logits, targets, mtp_weights, A, B, C)


def softcapped_ce_backward(grad_losses, logits, lse, targets, mtp_weights, A, B, C,
                           grad_scale=1.0, out_dtype=torch.bfloat16):
    """Gradient of sum_i grad_losses_i·loss_i w.r.t. the logits, divided by grad_scale, as out_dtype
    (bf16, fp32, or float8_e5m2 to feed an FP8 matmul directly)."""
    fn = softcapped_ce_backward_triton if logits.is_cuda else softcapped_ce_backward_reference
    return fn(grad_losses, logits, lse, targets, mtp_weights, A, B, C, grad_scale, out_dtype)
