"""The fused CE kernel of kernels/softcapped_ce.py with L2 eviction hints as constexprs (EV1: pass 1's loads, EV2:
pass 2's, ST and CM: the gradient's store), each variant timed against none and checked bit for bit against the
committed kernel. From the repository root, on a GPU:

    PYTHONPATH=. python3 records/kernels/2026-11-29_ce-eviction-hints/ce_hints.py
"""
import math
import statistics
import time

import torch
import triton
import triton.language as tl
import triton.testing

import kernels.softcapped_ce as ce

LOG2E = math.log2(math.e)


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
    EV1: tl.constexpr, EV2: tl.constexpr, ST: tl.constexpr, CM: tl.constexpr,
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
                    eviction_policy=EV1).to(tl.float32)
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
        x = tl.load(logits_row_ptrs[:, None] + cols[None, :], mask=mask, other=0.0, eviction_policy=EV2).to(tl.float32)
        if TANH_SIGMOID:  # s(1 - s) = (1 - th²)/4
            th = _softcap_tanh(x, H_SCALE, H_SHIFT)
            p = tl.exp2(th * HALF_A_LOG2E + (HALF_A_LOG2E - lse_log2e)[:, None])
            grad = (1.0 - th * th) * (0.25 * row_scale)[:, None] * p
        else:
            s = _softcap_sigmoid(x, X_SCALE, X_SHIFT, FMA_RECIPROCAL)
            p = tl.exp2(s * A_LOG2E - lse_log2e[:, None])  # exp(z - lse)
            grad = (s - s * s) * row_scale[:, None] * p
        tl.store(grad_row_ptrs[:, None] + cols[None, :], grad.to(out_dtype), mask=mask, eviction_policy=ST,
                 cache_modifier=CM)

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
# The bench: every hint variant against none, each checked bit for bit against kernels/softcapped_ce.py

A, B, C = 23.0, 5.0, 7.5  # the model's soft cap
VARIANTS = {"none": {}, "p1_last": dict(ev1="evict_last"),
            "p1_last_p2_first": dict(ev1="evict_last", ev2="evict_first"),
            "p1_last_p2_first_st_first": dict(ev1="evict_last", ev2="evict_first", st="evict_first"),
            "st_cs": dict(cm=".cs"), "p1_last_p2_first_st_cs": dict(ev1="evict_last", ev2="evict_first", cm=".cs")}


def run(logits, targets, weights, cfg, tanh, ev1="", ev2="", st="", cm=""):
    n_rows, n_cols = logits.shape
    losses = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
    grad = torch.empty(n_rows, n_cols, dtype=torch.float8_e5m2, device=logits.device)
    _softcapped_ce_fused_kernel[(triton.cdiv(n_rows, cfg.block_rows),)](
        logits, targets, weights, losses, grad, n_rows, n_cols, logits.stride(0), grad.stride(0),
        DZ_DS=A / (C * 2.0), **ce._softcap_constants(A, B, C), NUM_PREDICT=weights.numel(),
        BLOCK_ROWS=cfg.block_rows, BLOCK_V=cfg.block_v, REVERSE_PASS2=cfg.reverse_pass2,
        FMA_RECIPROCAL=cfg.fma_reciprocal and not tanh, NUM_STAGES=cfg.num_stages, TANH_SIGMOID=tanh,
        EV1=ev1, EV2=ev2, ST=st, CM=cm, num_warps=cfg.num_warps)
    return losses, grad


def main():
    for tanh in (True, False):
        for n in (16384, 32768, 49152):
            logits = (8 * torch.randn(n, 50304, device="cuda")).to(torch.bfloat16)
            targets = torch.randint(0, 50304, (n,), device="cuda")
            K = {16384: 3, 32768: 2, 49152: 1}[n]  # each stage's MTP targets
            weights = torch.tensor([1.0, 0.5, 0.25][:K], device="cuda")
            cfg = ce.ce_config(logits.device, n, 50304, tanh)
            want = ce.softcapped_ce_triton(logits, targets, weights, A, B, C, grad_scale=2.0,
                                           out_dtype=torch.float8_e5m2, tanh_sigmoid=tanh, config=cfg)
            calls, same = {}, {}
            for name, hints in VARIANTS.items():
                got = run(logits, targets, weights, cfg, tanh, **hints)
                same[name] = (torch.equal(got[0], want[0])
                              and torch.equal(got[1].view(torch.int8), want[1].view(torch.int8)))
                calls[name] = lambda hints=hints: run(logits, targets, weights, cfg, tanh, **hints)
            t0 = time.time()
            while time.time() - t0 < 0.5:  # clocks up
                calls["none"]()
            ms = {name: [] for name in calls}
            for order in (list(calls), list(calls)[::-1], list(calls)):  # medians of 3 calls of do_bench, 3 rounds
                for name in order:
                    ms[name].append(statistics.median(triton.testing.do_bench(calls[name], warmup=50, rep=300)
                                                      for _ in range(3)))
            print(f"{'tanh' if tanh else 'sigmoid'} N={n} K={K} {tuple(cfg)}: " + "  ".join(
                f"{name} {min(t):.3f}{'' if same[name] else ' (bits DIFFER)'}" for name, t in ms.items()), flush=True)


if __name__ == "__main__":
    main()
