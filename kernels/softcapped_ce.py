"""Fused soft-capped multi-token-prediction (MTP) cross entropy over the LM-head logits: losses and the
logit gradient in one kernel.

Soft-capped logits and MTP cross entropy by @classiclarryd et al. in modded-nanogpt
(https://github.com/KellerJordan/modded-nanogpt); this is an independent implementation.

For logits x (N, V) the soft cap is z = A·sigmoid((x + B) / C) and lse_i = logsumexp_v z_iv. Row i
predicts the next K tokens with weights w (K,):

    loss_i = sum_k w_k · (lse_i - z_{i, targets[i + k]})    over k with i + k < N

so the last rows have fewer targets, and a zero weight switches a prediction off without a recompile
(weights live on the device). The gradient of the summed loss needs only x and lse:

    d (sum_i loss_i) / d x_iv = (S_i·p_iv - sum_k w_k·[v == targets[i+k]]) · (A/C)·s·(1 - s)

with s = sigmoid((x + B) / C), p = exp(z - lse) and S_i the sum of row i's valid weights.

Kernel notes:
- Training differentiates sum_i loss_i (times a constant), so the upstream gradient is one scalar g and
  d(g·sum_i loss_i)/dx = g·(the gradient above): the kernel writes the gradient during the forward and
  the caller scales by g later (kernels/lm_head.py folds it into the FP8 matmul scales). The logits are
  read once from device memory and freed after the forward instead of being kept for a backward that
  would read them again. On an H100 at N=49152 (bf16 logits, e5m2 gradient, K=1) it takes 3.87 ms, 1.92 TB/s
  counting the logits read once and the gradient written, against 1.98 + 2.54 = 4.52 ms for the separate
  forward and backward kernels it replaced.
- Each row block (BLOCK_ROWS whole rows) is one program's. Pass 1 walks it in BLOCK_V-wide column blocks
  and sums exp(z - A): z lies in (0, A), so the sum neither overflows nor underflows in fp32 (for A <= 64)
  and needs no running maximum. Pass 2 walks the same rows again for the gradient, which is where the
  fusion saves DRAM traffic: a bf16 row of the padded GPT-2 vocabulary is 100 KB, so with a few rows in
  flight per SM (x 132 SMs) they are still in the 50 MB L2. In pass-1 order every column is re-read after
  the same delay, so once the rows in flight outgrow L2 every re-read misses; REVERSE_PASS2 re-reads the
  columns read last first, spreading the delays from 0 to twice that, so the hit rate falls off gradually:
  3.99 ms against 4.13 in pass-1 order (H100, N=49152, BLOCK_V 2048). A persistent grid of 2 or 4 programs
  per SM, bounding the rows in flight, was 19-61% slower than one program per row block in every config tried.
  L2 eviction hints keep the rows for their re-read (pass 1's loads evict last, pass 2's first) and stream the
  gradient past L2 (written once, read by the next matmul from DRAM anyway): the same bits, 0.9-2.8% faster with
  tanh_sigmoid and 3.9-4.4% with the exact sigmoid on an H200. Keeping pass 1's tanh in shared memory instead of
  re-reading and recomputing it (one program of 1024 threads per SM for its 208 KB) was 8-20% slower
  (records/kernels/2026-11-29_ce-eviction-hints).
- The gradient's target columns also carry -sum of their weights. They are rewritten after a barrier
  (which orders those stores after the dense ones of other threads) rather than by comparing every column
  with every target, which keeps pass 2's cost independent of K.
- Special-function (MUFU) budget: an H100 SM issues 16 MUFU ops per clock against 128 FMAs, and each pass
  spends 3 per logit (2 exp2, and the sigmoid's reciprocal in an approximate tl.fdiv): the separate forward
  kernel this one replaced (1.98 ms at N=49152) was MUFU-bound. FMA_RECIPROCAL computes the reciprocal on
  the FMA pipe instead (_reciprocal_fma: 5 FMAs and an integer subtract, within 1 ulp of fp32, plus a
  clamp), leaving 2 MUFU ops per logit and pass for ~2 more instructions. In the sm_90 SASS (BLOCK_V 2048,
  8 warps) passes 1 and 2 issue 16.4 and 19.1 instructions per logit with it, 14.5 and 17.1 without. The
  fused kernel gains little from it: 3.99 ms against 4.02 with MUFU.RCP (H100, N=49152, BLOCK_V 2048, reverse
  pass 2).
- tanh_sigmoid (the trainer's --fp8_body numerics): s = (1 + th)/2 with th = tanh((x + B)/(2C)) by one MUFU.TANH
  (PTX tanh.approx.f32: relative error at most 2^-11 by the PTX ISA, 1.12e-5 as measured over all fp32 inputs), so
  exp(z - A) = exp2((A/2)·log2(e)·(th - 1)) and s(1 - s) = (1 - th²)/4 follow from th in one FMA each: 2 MUFU ops
  per logit and pass, and fewer FMA-pipe instructions than the FMA reciprocal's. On an H100 the losses moved by up
  to 9.1e-5 and the gradient by 1.1e-5 of its largest entry (bf16 logits carry 4e-3); 3.63 against 3.96 ms at
  N=49152, 1.22 against 1.31 at N=16384 (means of two runs; records/kernels/2026-11-27_ce-tanh-sigmoid).
  At N=49152 its config is now 32 warps: 3.37 ms (records/kernels/2026-11-27_ce-tanh-32-warps).
- A, B, C and grad_scale are compile-time constants. Passed as runtime Python floats they can reach
  the kernel as fp64 (the Triton 3.6 failure of the original kernel); as constexprs the compiler folds
  them into fp32 constants, e.g. (x + B)/C and the log2(e) factor of exp2 become one FMA.
- Sizes and variants come from CE_CONFIGS; 16-byte loads when V is a multiple of 8.
"""
import math
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from kernels.configs import SM90, pick

LOG2E = math.log2(math.e)
MAX_CAP = 64.0  # exp(-A) must stay a normal fp32 number (exp(-87) is the smallest)


# -----------------------------------------------------------------------------
# Triton kernels

@triton.jit
def _reciprocal_fma(d):
    """1/d for fp32 d in [1, 2^125] on the FMA pipe, within 1 ulp."""
    # Subtracting the bits from a magic constant negates the exponent and linearly approximates the
    # mantissa's reciprocal: relative error below 0.051 (the guess leaves the normal range above 2^125)
    y = (0x7EF311C3 - d.to(tl.int32, bitcast=True)).to(tl.float32, bitcast=True)
    e = tl.fma(-d, y, 1.0)  # 1 - d·y, the relative error
    y = tl.fma(y, tl.fma(e, e, e), y)  # y·(1 + e + e²): error e³ < 1.4e-4
    return tl.fma(y, tl.fma(-d, y, 1.0), y)  # Newton: error ~ 2e-8, plus the fp32 rounding


@triton.jit
def _softcap_sigmoid(x, X_SCALE: tl.constexpr, X_SHIFT: tl.constexpr, FMA_RECIPROCAL: tl.constexpr):
    """sigmoid((x + B)/C) for fp32 x, where exp(-(x + B)/C) = exp2(x·X_SCALE + X_SHIFT)."""
    t = x * X_SCALE + X_SHIFT
    if FMA_RECIPROCAL:
        # Clamped into the reciprocal's range in one instruction (NaN kept): below sigmoid 2^-125 (x < -650
        # for the model's cap, -inf included) it gives 2^-125, which is 0 in every use (z = A·s, s·(1 - s)·p)
        t = tl.minimum(t, 125.0, propagate_nan=tl.PropagateNan.ALL)
        return _reciprocal_fma(1.0 + tl.exp2(t))
    # approximate (full-range) division, one MUFU.RCP: the IEEE one costs several extra instructions
    return tl.fdiv(1.0, 1.0 + tl.exp2(t))


@triton.jit
def _tanh_approx(x):
    """tanh of fp32 x by one MUFU.TANH (PTX tanh.approx.f32; -inf and inf give -1 and 1, NaN gives NaN)."""
    return tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _softcap_tanh(x, H_SCALE: tl.constexpr, H_SHIFT: tl.constexpr):
    """th = tanh((x + B)/(2C)) for fp32 x, so that sigmoid((x + B)/C) = (1 + th)/2."""
    return _tanh_approx(x * H_SCALE + H_SHIFT)


@triton.jit
def _softcapped_ce_fused_kernel(
    logits_ptr, targets_ptr, weights_ptr,  # (N, V) logits, (N,) int64 targets, (K,) fp32 MTP weights
    losses_ptr, grad_ptr,                  # (N,) fp32 losses, (N, V) gradient in any float dtype
    n_rows, n_cols, logits_row_stride, grad_row_stride,
    A: tl.constexpr, A_LOG2E: tl.constexpr, X_SCALE: tl.constexpr, X_SHIFT: tl.constexpr, DZ_DS: tl.constexpr,
    NUM_PREDICT: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_V: tl.constexpr,
    REVERSE_PASS2: tl.constexpr, FMA_RECIPROCAL: tl.constexpr, NUM_STAGES: tl.constexpr,
    TANH_SIGMOID: tl.constexpr, H_SCALE: tl.constexpr, H_SHIFT: tl.constexpr, HALF_A_LOG2E: tl.constexpr,
):
    out_dtype = grad_ptr.dtype.element_ty
    n_blocks = tl.cdiv(n_cols, BLOCK_V)  # column blocks per row
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)  # (R,)
    row_ok = rows < n_rows
    logits_row_ptrs = logits_ptr + rows.to(tl.int64) * logits_row_stride
    grad_row_ptrs = grad_ptr + rows.to(tl.int64) * grad_row_stride

    # Pass 1: sum_v exp(z - A) = sum_v exp2(A·log2(e)·(s - 1)), accumulated per lane, reduced once at the end.
    # Masked columns load -inf, where A·s·log2(e) vanishes next to A·log2(e) (s = 0, or 2^-125 with
    # FMA_RECIPROCAL), so each padding column adds exactly exp2(-A·log2(e)): taken off after the loop, which
    # saves a select per logit (rows past the end are never stored)
    acc = tl.zeros([BLOCK_ROWS, BLOCK_V], dtype=tl.float32)
    for start in tl.range(0, n_cols, BLOCK_V, num_stages=NUM_STAGES):
        cols = start + tl.arange(0, BLOCK_V)
        mask = row_ok[:, None] & (cols < n_cols)[None, :]
        x = tl.load(logits_row_ptrs[:, None] + cols[None, :], mask=mask, other=float("-inf"),
                    eviction_policy="evict_last").to(tl.float32)
        if TANH_SIGMOID:  # z - A = (A/2)(th - 1); -inf gives th = -1, as it gives s = 0 above
            acc += tl.exp2(_softcap_tanh(x, H_SCALE, H_SHIFT) * HALF_A_LOG2E - HALF_A_LOG2E)
        else:
            s = _softcap_sigmoid(x, X_SCALE, X_SHIFT, FMA_RECIPROCAL)
            acc += tl.exp2(s * A_LOG2E - A_LOG2E)
    lse = A + tl.log(tl.sum(acc, axis=1) - (n_blocks * BLOCK_V - n_cols) * tl.exp2(-A_LOG2E))  # (R,)

    loss = tl.zeros([BLOCK_ROWS], dtype=tl.float32)
    weight_sum = tl.zeros([BLOCK_ROWS], dtype=tl.float32)  # S_i
    for k in tl.static_range(NUM_PREDICT):
        has_target = row_ok & (rows + k < n_rows)
        weight = tl.load(weights_ptr + k)
        target = tl.load(targets_ptr + rows + k, mask=has_target, other=0)
        x_target = tl.load(logits_row_ptrs + target, mask=has_target, other=0.0).to(tl.float32)
        if TANH_SIGMOID:
            z_target = 0.5 * A * (1.0 + _softcap_tanh(x_target, H_SCALE, H_SHIFT))
        else:
            z_target = A * _softcap_sigmoid(x_target, X_SCALE, X_SHIFT, FMA_RECIPROCAL)
        loss += tl.where(has_target, weight * (lse - z_target), 0.0)
        weight_sum += tl.where(has_target, weight, 0.0)
    tl.store(losses_ptr + rows, loss, mask=row_ok)

    # Pass 2: every column as if it were no target, d/ds = (A/C)/grad_scale·S·p (DZ_DS folds the constants)
    lse_log2e = lse * 1.4426950408889634  # log2(e)
    row_scale = DZ_DS * weight_sum
    for block in tl.range(n_blocks, num_stages=NUM_STAGES):
        start = (n_blocks - 1 - block) * BLOCK_V if REVERSE_PASS2 else block * BLOCK_V
        cols = start + tl.arange(0, BLOCK_V)
        mask = row_ok[:, None] & (cols < n_cols)[None, :]
        x = tl.load(logits_row_ptrs[:, None] + cols[None, :], mask=mask, other=0.0,
                    eviction_policy="evict_first").to(tl.float32)
        if TANH_SIGMOID:  # s(1 - s) = (1 - th²)/4
            th = _softcap_tanh(x, H_SCALE, H_SHIFT)
            p = tl.exp2(th * HALF_A_LOG2E + (HALF_A_LOG2E - lse_log2e)[:, None])
            grad = (1.0 - th * th) * (0.25 * row_scale)[:, None] * p
        else:
            s = _softcap_sigmoid(x, X_SCALE, X_SHIFT, FMA_RECIPROCAL)
            p = tl.exp2(s * A_LOG2E - lse_log2e[:, None])  # exp(z - lse)
            grad = (s - s * s) * row_scale[:, None] * p
        tl.store(grad_row_ptrs[:, None] + cols[None, :], grad.to(out_dtype), mask=mask, cache_modifier=".cs")

    # Rewrite the (at most K) target columns of each row with their -w_k terms
    tl.debug_barrier()
    for k in tl.static_range(NUM_PREDICT):
        has_target = row_ok & (rows + k < n_rows)
        target = tl.load(targets_ptr + rows + k, mask=has_target, other=0)
        hit = tl.zeros([BLOCK_ROWS], dtype=tl.float32)  # targets may repeat within a row's window
        for j in tl.static_range(NUM_PREDICT):
            other = tl.load(targets_ptr + rows + j, mask=row_ok & (rows + j < n_rows), other=-1)
            hit += tl.where(other == target, tl.load(weights_ptr + j), 0.0)
        x_target = tl.load(logits_row_ptrs + target, mask=has_target, other=0.0).to(tl.float32)
        if TANH_SIGMOID:
            th = _softcap_tanh(x_target, H_SCALE, H_SHIFT)
            p = tl.exp2(th * HALF_A_LOG2E + (HALF_A_LOG2E - lse_log2e))
            grad = (1.0 - th * th) * (0.25 * DZ_DS) * (weight_sum * p - hit)
        else:
            s = _softcap_sigmoid(x_target, X_SCALE, X_SHIFT, FMA_RECIPROCAL)
            p = tl.exp2(s * A_LOG2E - lse_log2e)
            grad = (s - s * s) * DZ_DS * (weight_sum * p - hit)
        tl.store(grad_row_ptrs + target, grad.to(out_dtype), mask=has_target)


# -----------------------------------------------------------------------------
# Launch configuration

class CEConfig(NamedTuple):
    block_rows: int  # rows per row block
    block_v: int     # columns per loop iteration
    num_warps: int
    reverse_pass2: bool = True  # pass 2 starts from the columns pass 1 read last (freshest in L2)
    fma_reciprocal: bool = True  # the sigmoid's reciprocal on the FMA pipe instead of MUFU.RCP
    num_stages: int = 1  # software pipelining of each pass's loads (cp.async through shared memory); 1: none


# Configs by device, then (N, V): one micro-batch of each training stage (N rows = tokens) and the padded GPT-2
# vocabulary. Swept at N=49152 only (the other two reuse its winner) on an H100, torch 2.11, Triton 3.6:
# bf16 logits, e5m2 gradient, K=1, ms by do_bench with L2 flushed (python -m kernels.bench --only
# softcapped_ce --sweep). r: block_rows, v: block_v, w: num_warps, then the pass-2 order, the reciprocal's
# pipe, and s3 for num_stages=3 (else 1):
#   r1 v4096 w16 reverse fma: 3.87 (fastest)
#   r1 v2048 w8: forward mufu 4.16, forward fma 4.13, reverse mufu 4.02, reverse fma 3.99, reverse fma s3 3.93
#   r1 v1024 w4 reverse fma: 4.11;  r2 v2048 w8 reverse fma: 4.07
#   persistent grids of 2 or 4 programs per SM (an option since removed): 19-61% slower than one per row block
# With tanh_sigmoid, at N=49152 (no reciprocal; the table's exact config 3.96 there, mean of two runs): r1 v8192 w16
# 3.63 ms (fastest, mean of two; 1.22 at N=16384), v4096 w16 3.72, v2048 w8 3.95, v4096 w8 4.13, v16384 w32 4.50;
# with ex2.approx.ftz for exp2 too, v8192 w16 3.62 and w32 3.59 (1.20 at N=16384): within run-to-run spread.
# Swept again at all three N (tanh, each stage's K; records/kernels/2026-11-27_ce-tanh-32-warps): r1 v4096 w32
# 3.37 ms at N=49152 against 3.61 for v8192 w16: two 1024-thread programs per SM hold half the rows in flight of
# four 512-thread ones, so more of pass 2's re-reads hit L2 (6.2 against 8.6 GB read from DRAM; v8192 w32, as few
# rows, 6.5 GB and 3.57 ms); a tie at N=32768 (2.32 against 2.30) and 16384 (1.19 against 1.18).
_SM90_CE = CEConfig(1, 4096, 16, reverse_pass2=True, fma_reciprocal=True, num_stages=1)
_SM90_CE_TANH = CEConfig(1, 8192, 16, reverse_pass2=True, fma_reciprocal=False, num_stages=1)
_SM90_CE_TANH_49152 = CEConfig(1, 4096, 32, reverse_pass2=True, fma_reciprocal=False, num_stages=1)
CE_CONFIGS = {SM90: {**{(n, 50304, False): _SM90_CE for n in (16384, 32768, 49152)},
                     (16384, 50304, True): _SM90_CE_TANH, (32768, 50304, True): _SM90_CE_TANH,
                     (49152, 50304, True): _SM90_CE_TANH_49152}}


def ce_config(device: torch.device, n_rows: int, n_cols: int, tanh_sigmoid: bool = False) -> CEConfig:
    # Fallback, untuned (other shapes and GPUs, the interpreter): ~2048 elements a step, several rows if V is small
    block_v = min(2048, triton.next_power_of_2(n_cols))
    return pick(CE_CONFIGS, device, (n_rows, n_cols, tanh_sigmoid), CEConfig(2048 // block_v, block_v, 4))


def _softcap_constants(A: float, B: float, C: float) -> dict:
    """Compile-time constants of z = A·sigmoid((x + B)/C), in the base-2 form the kernel uses."""
    assert 0.0 < A <= MAX_CAP, f"soft cap A={A} must be in (0, {MAX_CAP}] for the max-free logsumexp"
    assert C > 0.0, f"soft cap temperature C={C} must be positive"
    return dict(A=A, A_LOG2E=A * LOG2E, X_SCALE=-LOG2E / C, X_SHIFT=-B * LOG2E / C, H_SCALE=0.5 / C,
                H_SHIFT=0.5 * B / C, HALF_A_LOG2E=0.5 * A * LOG2E)


def _check_inputs(logits: torch.Tensor, targets: torch.Tensor, mtp_weights: torch.Tensor):
    assert logits.ndim == 2 and logits.stride(1) == 1, \
        f"logits must be (N, V) with contiguous rows, got {tuple(logits.shape)} strides {logits.stride()}"
    assert targets.shape == logits.shape[:1] and targets.dtype == torch.int64 and targets.is_contiguous(), \
        f"targets must be contiguous int64 (N,), got {targets.dtype} {tuple(targets.shape)}"
    assert mtp_weights.ndim == 1 and mtp_weights.numel() >= 1 and mtp_weights.dtype == torch.float32, \
        "mtp_weights must be fp32 (K,), K >= 1"
    assert targets.device == logits.device == mtp_weights.device, "logits, targets and mtp_weights must share a device"


# -----------------------------------------------------------------------------
# Host wrapper

def softcapped_ce_triton(logits, targets, mtp_weights, A, B, C, grad_scale=1.0, out_dtype=torch.bfloat16,
                         tanh_sigmoid=False, config=None):
    """Triton: logits (N, V) -> (losses fp32 (N,), d(sum_i losses_i)/d logits / grad_scale as (N, V) out_dtype).

    grad_scale is a compile-time constant (one compiled kernel per value): keep it fixed in training.
    tanh_sigmoid: the sigmoid from tanh.approx (inline PTX: CUDA only; the interpreter's tests swap in an exact
    tanh). config: CEConfig override.
    """
    _check_inputs(logits, targets, mtp_weights)
    n_rows, n_cols = logits.shape
    losses = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
    grad = torch.empty(n_rows, n_cols, dtype=out_dtype, device=logits.device)
    config = config or ce_config(logits.device, n_rows, n_cols, tanh_sigmoid)
    _softcapped_ce_fused_kernel[(triton.cdiv(n_rows, config.block_rows),)](
        logits, targets, mtp_weights.contiguous(), losses, grad,
        n_rows, n_cols, logits.stride(0), grad.stride(0),
        DZ_DS=A / (C * grad_scale), **_softcap_constants(A, B, C),
        NUM_PREDICT=mtp_weights.numel(), BLOCK_ROWS=config.block_rows, BLOCK_V=config.block_v,
        REVERSE_PASS2=config.reverse_pass2, FMA_RECIPROCAL=config.fma_reciprocal and not tanh_sigmoid,
        NUM_STAGES=config.num_stages, TANH_SIGMOID=tanh_sigmoid, num_warps=config.num_warps,
    )
    return losses, grad


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


def softcapped_ce_reference(logits, targets, mtp_weights, A, B, C, grad_scale=1.0, out_dtype=torch.bfloat16):
    """The losses and d(sum_i losses_i)/d logits / grad_scale as out_dtype, like softcapped_ce_triton."""
    losses, lse = softcapped_ce_forward_reference(logits, targets, mtp_weights, A, B, C)
    s = _softcap_reference(logits, A, B, C) / A  # sigmoid((x + B)/C), (N, V)
    p = torch.exp(A * s - lse[:, None])
    weights = mtp_weights.to(s.dtype)
    dz = torch.zeros_like(s)
    for k in range(min(mtp_weights.numel(), len(targets))):
        n = len(targets) - k
        dz[:n] += weights[k] * p[:n]
        dz[:n].scatter_add_(1, targets[k:, None], (-weights[k]).expand(n, 1).contiguous())
    grad = dz * (A / C) * s * (1 - s) / grad_scale
    return losses, grad.to(out_dtype)


# -----------------------------------------------------------------------------
# CPU: the reference's operations, a block of rows at a time

CPU_BLOCK_ROWS = 16  # fp32 temporaries of 16 rows: 3.2 MB at the GPT-2 vocabulary, in cache


def cpu_row_blocks(n_rows: int) -> list[tuple[int, int]]:
    """[start, end) blocks of CPU_BLOCK_ROWS rows, none of one row unless n_rows is 1 (a last row joins the block
    before it): ATen splits a single row's logsumexp across threads, which changes its last bits, while each row of
    a larger block is summed by one thread, in one order, whatever the block."""
    bounds = [*range(0, n_rows, CPU_BLOCK_ROWS), n_rows]
    if len(bounds) > 2 and bounds[-1] - bounds[-2] == 1:
        del bounds[-2]
    return list(zip(bounds, bounds[1:]))


def softcapped_ce_cpu(logits, targets, mtp_weights, A, B, C, grad_scale=1.0, out_dtype=torch.bfloat16):
    """softcapped_ce_reference's losses and gradient bit for bit, in about half its time at a training micro-batch of
    the GPT-2 vocabulary (384 x 50304 bf16 logits, K=3, one core: 78 against 140 ms). Every element goes through the
    same operations in the same order; what changes is where: after the soft cap, row blocks instead of (N, V)
    temporaries that each pass streams through memory; the soft cap computed once (the reference computes it twice,
    the same values); in-place updates. The soft cap's sigmoid runs over the whole (N, V) at once, as in the
    reference: ATen computes the last elements of each thread's share of a call with a scalar sigmoid whose last bit
    can differ from its vector one, so the cuts must fall where the reference's do. The other operations give the
    same bits however a tensor is cut (exact arithmetic, and exp and log by vector code throughout)."""
    _check_inputs(logits, targets, mtp_weights)
    N, V = logits.shape
    dtype = torch.promote_types(logits.dtype, torch.float32)
    weights = mtp_weights.to(dtype)
    K = min(weights.numel(), N)
    losses = logits.new_zeros(N, dtype=dtype)
    grad = logits.new_empty(N, V, dtype=out_dtype)
    z_all = logits.to(dtype, copy=True).add_(B).div_(C).sigmoid_().mul_(A)  # (N, V)
    for r0, r1 in cpu_row_blocks(N):
        z = z_all[r0:r1]  # (rows, V)
        lse = torch.logsumexp(z, dim=1)
        spans = [(k, min(r1, N - k) - r0) for k in range(K) if N - k > r0]  # (k, the block's rows with a target i + k)
        for k, n in spans:
            z_target = z[:n].gather(1, targets[r0 + k:r0 + k + n, None])[:, 0]
            losses[r0:r0 + n] += weights[k] * (lse[:n] - z_target)
        s = z.div_(A)  # sigmoid((x + B) / C), as the reference divides its own z
        p = (s * A).sub_(lse[:, None]).exp_()
        dz = p * weights[0]  # the reference adds this to zeros: the same bits (p > 0)
        for k, n in spans:  # spans[0] is k = 0, every row
            if k:
                dz[:n] += weights[k] * p[:n]
            dz[:n].scatter_add_(1, targets[r0 + k:r0 + k + n, None], (-weights[k]).expand(n, 1).contiguous())
        grad[r0:r1] = dz.mul_(A / C).mul_(s).mul_(1 - s).div_(grad_scale)
    return losses, grad


# -----------------------------------------------------------------------------
# Public op: CUDA -> Triton, CPU -> the reference's math by row blocks

def softcapped_ce(logits, targets, mtp_weights, A, B, C, grad_scale=1.0, out_dtype=torch.bfloat16,
                  tanh_sigmoid=False):
    """Per-row MTP losses, fp32 (N,), and the gradient of their sum w.r.t. the logits divided by grad_scale,
    as out_dtype (bf16, fp32, or float8_e5m2 to feed an FP8 matmul directly). tanh_sigmoid: the CUDA kernel's
    sigmoid from tanh.approx (the CPU's math is the reference's either way)."""
    if not logits.is_cuda:
        return softcapped_ce_cpu(logits, targets, mtp_weights, A, B, C, grad_scale, out_dtype)
    return softcapped_ce_triton(logits, targets, mtp_weights, A, B, C, grad_scale, out_dtype, tanh_sigmoid)
