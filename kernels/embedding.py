"""Embedding backward into a persistent fp32 gradient: acc[idx[i]] += grad[i] for every looked-up row, and the
lookup op whose backward it is.

Why: autograd's embedding backward builds a dense (rows, D) gradient for the whole table on every
micro-batch (zero-fill, scatter, round to bf16) and then adds it to .grad. For the three token tables
of train_gpt.py (11 x 50304 rows of 768) that is ~6.8 GB of memory traffic per micro-batch, ~3 ms on
an H100, whatever the micro-batch size. Scattering the looked-up rows straight into one fp32
accumulator per table touches only the rows used. The scatter also flags the rows it wrote (one byte per table row),
so that the optimizer rounds (for the wire) and zeroes only those rows, not the whole table, once per Adam step: at
the world-8 share of a step, a few tens of thousands of the value table's 251,520 rows.

The scatter uses fp32 atomic adds (as PyTorch's own accumulating index_put does), so the summation
order, and the last bits of the result, vary from run to run.
"""
from typing import NamedTuple

import torch
import triton
import triton.language as tl


class EmbeddingConfig(NamedTuple):
    block_rows: int  # looked-up rows per program
    block_d: int     # columns per loop iteration
    num_warps: int


# One config for every device and shape, untuned, and no table: on an H100 it already runs at 95-100% of the copy
# bandwidth on the training's value-embedding lookups (5 x 16384 and 5 x 49152 rows of 768;
# `python -m kernels.bench --only embedding`, records/kernels/2026-11-21_embedding-grad-scatter).
EMBEDDING_CONFIG = EmbeddingConfig(block_rows=16, block_d=256, num_warps=4)


@triton.jit
def _embedding_grad_add_kernel(
    grad_ptr, idx_ptr, acc_ptr, flags_ptr,  # grad (n, D) rows, idx (n,) table rows, acc (rows, D) fp32 with inner
    n, D, grad_row_stride, acc_row_stride,  # stride 1, flags (rows,) uint8
    BLOCK_ROWS: tl.constexpr, BLOCK_D: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_ok = rows < n
    dest = tl.load(idx_ptr + rows, mask=row_ok, other=0).to(tl.int64)
    tl.store(flags_ptr + dest, tl.full((BLOCK_ROWS,), 1, tl.uint8), mask=row_ok)  # racing stores all write 1
    for start in tl.range(0, D, BLOCK_D):
        cols = start + tl.arange(0, BLOCK_D)
        mask = row_ok[:, None] & (cols[None, :] < D)
        vals = tl.load(grad_ptr + rows[:, None].to(tl.int64) * grad_row_stride + cols[None, :], mask=mask)
        # relaxed: nothing reads the accumulator inside this kernel, so no ordering is needed
        tl.atomic_add(acc_ptr + dest[:, None] * acc_row_stride + cols[None, :], vals.to(tl.float32),
                      mask=mask, sem="relaxed")


@triton.jit
def _flagged_rows_kernel(
    acc_ptr, flags_ptr, wire_ptr,  # acc (rows, D) fp32, flags (rows,) uint8, wire (rows, D): inner stride 1
    n_rows, D, acc_row_stride, wire_row_stride,
    ZERO: tl.constexpr, HAS_WIRE: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Flagged rows only (the stores of the others are masked off, so they cost no memory traffic): ZERO clears acc,
    wire (HAS_WIRE) and the flags; else wire = acc rounded to wire's dtype."""
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    in_range = rows < n_rows
    hit = tl.load(flags_ptr + rows, mask=in_range, other=0) != 0
    rows = rows.to(tl.int64)
    for start in tl.range(0, D, BLOCK_D):
        cols = start + tl.arange(0, BLOCK_D)
        mask = hit[:, None] & (cols[None, :] < D)
        acc = acc_ptr + rows[:, None] * acc_row_stride + cols[None, :]
        wire = wire_ptr + rows[:, None] * wire_row_stride + cols[None, :]
        if ZERO:
            tl.store(acc, tl.zeros((BLOCK_ROWS, BLOCK_D), tl.float32), mask=mask)
            if HAS_WIRE:
                tl.store(wire, tl.zeros((BLOCK_ROWS, BLOCK_D), wire_ptr.dtype.element_ty), mask=mask)
        else:
            tl.store(wire, tl.load(acc, mask=mask).to(wire_ptr.dtype.element_ty), mask=mask)
    if ZERO:
        tl.store(flags_ptr + rows, tl.zeros((BLOCK_ROWS,), tl.uint8), mask=hit)


def _check(grad: torch.Tensor, idx: torch.Tensor, acc: torch.Tensor, flags: torch.Tensor):
    _check_table(acc, flags)
    assert grad.shape == (*idx.shape, acc.size(1)), \
        f"grad must be idx.shape + (D,) = {(*idx.shape, acc.size(1))}, got {tuple(grad.shape)}"
    assert not idx.is_floating_point(), f"idx must be integer, got {idx.dtype}"
    assert grad.device == idx.device == acc.device, "grad, idx and acc must be on one device"


def _check_table(acc: torch.Tensor, flags: torch.Tensor, wire: torch.Tensor | None = None):
    assert acc.dtype == torch.float32, f"acc must be fp32 (it accumulates many rows), got {acc.dtype}"
    assert acc.ndim == 2 and acc.stride(1) == 1, \
        f"acc must be a (rows, D) table with contiguous rows, got shape {tuple(acc.shape)} strides {acc.stride()}"
    assert flags.shape == acc.shape[:1] and flags.dtype == torch.uint8 and flags.is_contiguous(), \
        f"flags must be contiguous uint8 of acc's {acc.size(0)} rows, got {flags.dtype} {tuple(flags.shape)}"
    assert wire is None or (wire.shape == acc.shape and wire.stride(1) == 1 and wire.is_floating_point()), \
        f"wire must be floating point, acc's shape {tuple(acc.shape)}, contiguous rows: got {wire.dtype} " \
        f"{tuple(wire.shape)} {wire.stride()}"
    assert flags.device == acc.device and (wire is None or wire.device == acc.device), "tensors on several devices"


def embedding_grad_add_triton(grad: torch.Tensor, idx: torch.Tensor, acc: torch.Tensor,
                              flags: torch.Tensor) -> torch.Tensor:
    """acc[idx[...]] += grad[...] and flags[idx[...]] = 1 with the Triton kernel; grad: idx.shape + (D,), any float
    dtype."""
    _check(grad, idx, acc, flags)
    grad, idx = grad.reshape(-1, acc.size(1)), idx.reshape(-1)
    if grad.stride(1) != 1:
        grad = grad.contiguous()
    n = idx.numel()
    if n:
        block_rows, block_d, num_warps = EMBEDDING_CONFIG
        _embedding_grad_add_kernel[(triton.cdiv(n, block_rows),)](
            grad, idx, acc, flags, n, acc.size(1), grad.stride(0), acc.stride(0),
            BLOCK_ROWS=block_rows, BLOCK_D=block_d, num_warps=num_warps)
    return acc


def embedding_grad_add_reference(grad: torch.Tensor, idx: torch.Tensor, acc: torch.Tensor,
                                 flags: torch.Tensor) -> torch.Tensor:
    _check(grad, idx, acc, flags)
    flags.index_fill_(0, idx.reshape(-1).long(), 1)
    return acc.index_add_(0, idx.reshape(-1), grad.reshape(-1, acc.size(1)).float())


def embedding_grad_add(grad: torch.Tensor, idx: torch.Tensor, acc: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
    """acc[idx[...]] += grad[...] and flags[idx[...]] = 1: Triton for CUDA tensors, PyTorch for CPU tensors."""
    fn = embedding_grad_add_triton if acc.is_cuda else embedding_grad_add_reference
    return fn(grad, idx, acc, flags)


def _flagged_rows(acc: torch.Tensor, flags: torch.Tensor, wire: torch.Tensor | None, zero: bool):
    _check_table(acc, flags, wire)
    if acc.size(0):
        block_rows, block_d, num_warps = EMBEDDING_CONFIG
        _flagged_rows_kernel[(triton.cdiv(acc.size(0), block_rows),)](
            acc, flags, acc if wire is None else wire, acc.size(0), acc.size(1), acc.stride(0),
            acc.stride(0) if wire is None else wire.stride(0),
            ZERO=zero, HAS_WIRE=wire is not None, BLOCK_ROWS=block_rows, BLOCK_D=block_d, num_warps=num_warps)


def round_flagged_rows_triton(acc: torch.Tensor, flags: torch.Tensor, wire: torch.Tensor) -> torch.Tensor:
    """wire[r] = acc[r] in wire's dtype for the rows r flagged (the others keep their value); returns wire."""
    _flagged_rows(acc, flags, wire, zero=False)
    return wire


def round_flagged_rows_reference(acc: torch.Tensor, flags: torch.Tensor, wire: torch.Tensor) -> torch.Tensor:
    _check_table(acc, flags, wire)
    hit = flags.bool()
    wire[hit] = acc[hit].to(wire.dtype)
    return wire


def zero_flagged_rows_triton(acc: torch.Tensor, flags: torch.Tensor, wire: torch.Tensor | None = None):
    """Zero the flagged rows of acc (and of wire), then the flags."""
    _flagged_rows(acc, flags, wire, zero=True)


def zero_flagged_rows_reference(acc: torch.Tensor, flags: torch.Tensor, wire: torch.Tensor | None = None):
    _check_table(acc, flags, wire)
    hit = flags.bool()
    for t in (acc, wire) if wire is not None else (acc,):
        t[hit] = 0
    flags.zero_()


def round_flagged_rows(acc: torch.Tensor, flags: torch.Tensor, wire: torch.Tensor) -> torch.Tensor:
    """wire[r] = acc[r] in wire's dtype for the flagged rows: Triton for CUDA tensors, PyTorch for CPU tensors."""
    return (round_flagged_rows_triton if acc.is_cuda else round_flagged_rows_reference)(acc, flags, wire)


def zero_flagged_rows(acc: torch.Tensor, flags: torch.Tensor, wire: torch.Tensor | None = None):
    """Zero the flagged rows of acc (and of wire), then the flags: Triton for CUDA tensors, PyTorch for CPU tensors."""
    (zero_flagged_rows_triton if acc.is_cuda else zero_flagged_rows_reference)(acc, flags, wire)


# Token-table lookups whose backward scatter-adds the looked-up rows' gradients into an fp32 accumulator instead
# of returning a dense table-sized gradient (autograd's way: ~3 ms per micro-batch on an H100 for the model's
# 11 x 50304-row tables, at any batch size). Several lookups in one table (the value-embedding tables are one
# parameter) are one op with separate outputs: the accumulator is written once per backward, and no kernel
# stacks the outputs' gradients. Custom ops, so torch.compile calls them as they are.
@torch.library.custom_op("nanogpt::lookup", mutates_args=())
def lookup_op(table: torch.Tensor, idx: torch.Tensor, grad_acc: torch.Tensor,
              flags: torch.Tensor) -> list[torch.Tensor]:
    """idx: (n, T) rows -> n tensors table[idx[i]] (T, D). grad_acc: fp32, table-shaped; the backward adds into it
    (the table itself gets no gradient) and sets flags (uint8, one per table row) of the rows it wrote."""
    return [torch.nn.functional.embedding(rows, table) for rows in idx]


@lookup_op.register_fake
def _(table, idx, grad_acc, flags):
    return [table.new_empty(idx.size(1), table.size(1)) for _ in range(idx.size(0))]


@torch.library.custom_op("nanogpt::lookup_backward", mutates_args=("grad_acc", "flags"))
def lookup_backward_op(grads: list[torch.Tensor], idx: torch.Tensor, grad_acc: torch.Tensor,
                       flags: torch.Tensor) -> None:
    for grad, rows in zip(grads, idx):
        embedding_grad_add(grad, rows, grad_acc, flags)  # takes any row stride


@lookup_backward_op.register_fake
def _(grads, idx, grad_acc, flags):
    return None


def _lookup_setup(ctx, inputs, output):
    _, idx, grad_acc, flags = inputs
    ctx.save_for_backward(idx, grad_acc, flags)


def _lookup_backward(ctx, grads):
    idx, grad_acc, flags = ctx.saved_tensors
    lookup_backward_op(list(grads), idx, grad_acc, flags)
    return None, None, None, None  # the table's gradient is in grad_acc


lookup_op.register_autograd(_lookup_backward, setup_context=_lookup_setup)
