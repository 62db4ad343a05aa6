"""Symmetric products for Polar Express: X·Xᵀ, Xᵀ·X and b·A + c·A·A, computing one triangle.

Provenance: computing only one triangle of the Gram matrix and mirroring it is the idea of
@byronxu99 in modded-nanogpt (https://github.com/KellerJordan/modded-nanogpt); this code is
written from scratch.

All three ops are one BLAS "SYRK" (symmetric rank-k update), out = alpha·Y·Yᵀ + beta·Y, where Y
is a strided view of the input:
    xxt(X)             Y = X    (M, K) rows of X               out (M, M)
    xtx(X)             Y = Xᵀ   (N, K) columns of X, K = rows   out (N, N)   (no transpose copy:
                                                                 the kernel just swaps strides)
    ba_plus_caa(A,b,c) Y = A    (M, M), symmetric so A·Aᵀ = A·A, alpha = c, beta = b
The kernel launches only the lower-triangle output tiles (square tiles, so the triangle is whole
tiles: nt·(nt+1)/2 of nt² programs) and stores each off-diagonal tile twice, at (i, j) and at
its mirror (j, i). Accumulation is fp32; the output is rounded once to out's dtype.
"""
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.configs import SM90, pick


@dataclass(frozen=True)
class SyrkConfig:
    block: int       # output tiles are block x block
    block_k: int     # reduction step
    num_warps: int
    num_stages: int  # software-pipelining depth of the reduction loop


# Configs by device, then (dtype, batch, M, K) of the product Y·Yᵀ (batch of M x M outputs, reduction length K).
# The batch matters: a 768 x 768 output is only 21 tiles of 128, so the 8-GPU shards (3 or 5 matrices) fill the
# GPU only with 64-tiles.
# Tuning note: bf16 Polar Express shapes (768 x 768 attention matrices; 3072 x 768 MLP matrices
# reduced over 3072; 5 / 3 per rank on 8 GPUs, 40 / 24 on 1 GPU), fastest of 9 candidates on one
# H100 SXM (torch 2.11, Triton 3.6) with `python -m kernels.bench --sweep`, records/kernels/2026-11-21_symmetric.
_BF16 = torch.bfloat16
SYRK_CONFIGS = {
    SM90: {
        (_BF16, 5, 768, 768): SyrkConfig(block=64, block_k=64, num_warps=4, num_stages=4),
        (_BF16, 3, 768, 768): SyrkConfig(block=64, block_k=64, num_warps=4, num_stages=4),
        (_BF16, 40, 768, 768): SyrkConfig(block=128, block_k=64, num_warps=8, num_stages=3),
        (_BF16, 24, 768, 768): SyrkConfig(block=128, block_k=64, num_warps=8, num_stages=3),
        (_BF16, 3, 768, 3072): SyrkConfig(block=64, block_k=128, num_warps=4, num_stages=3),
        (_BF16, 24, 768, 3072): SyrkConfig(block=128, block_k=64, num_warps=8, num_stages=3),
    },
}
# Fallback (fp32 and fp16, other shapes and GPUs, the interpreter): 64-tiles, the tuned choice when tiles are few.
SYRK_GENERIC = SyrkConfig(block=64, block_k=64, num_warps=4, num_stages=3)


def syrk_config(device: torch.device, dtype: torch.dtype, batch: int, M: int, K: int) -> SyrkConfig:
    return pick(SYRK_CONFIGS, device, (dtype, batch, M, K), SYRK_GENERIC)


@triton.jit
def _lower_triangle_tile(t):
    """Linear index t -> (row, col) of the t-th lower-triangle tile, row-major:
    0 -> (0, 0), 1 -> (1, 0), 2 -> (1, 1), 3 -> (2, 0), ...  (row = floor((sqrt(8t + 1) - 1) / 2))."""
    row = ((tl.sqrt(8.0 * t + 1.0) - 1.0) * 0.5).to(tl.int32)
    # One correction step each way in case sqrt rounded across an integer.
    row = tl.where(row * (row + 1) // 2 > t, row - 1, row)
    row = tl.where((row + 1) * (row + 2) // 2 <= t, row + 1, row)
    return row, t - row * (row + 1) // 2


@triton.jit
def _syrk_kernel(
    y_ptr, out_ptr,
    M, K,                                   # Y is (M, K) per batch entry, out is (M, M)
    y_batch_stride, y_row_stride, y_k_stride,
    out_batch_stride, out_row_stride,       # out has inner stride 1
    alpha, beta,
    BLOCK: tl.constexpr, BLOCK_K: tl.constexpr,
    ADD_Y: tl.constexpr,                    # add beta·Y (only for square Y, i.e. ba_plus_caa)
    DOT_PRECISION: tl.constexpr,            # "ieee" for fp32 inputs (else tf32 truncates them), "tf32" otherwise
):
    """out[b] = alpha·Y[b]·Y[b]ᵀ (+ beta·Y[b]); grid = (lower-triangle tiles, batch)."""
    tile_m, tile_n = _lower_triangle_tile(tl.program_id(0))
    batch = tl.program_id(1).to(tl.int64)
    y_ptr += batch * y_batch_stride
    out_ptr += batch * out_batch_stride

    offs_m = tile_m * BLOCK + tl.arange(0, BLOCK)  # rows of Y for the tile's rows
    offs_n = tile_n * BLOCK + tl.arange(0, BLOCK)  # rows of Y for the tile's columns
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        # left (BLOCK, BLOCK_K) = Y[m, k]; right (BLOCK_K, BLOCK) = Y[n, k]ᵀ, read straight
        # through transposed pointers (Triton picks the coalesced order from the strides).
        left = tl.load(y_ptr + offs_m[:, None] * y_row_stride + k[None, :] * y_k_stride,
                       mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
        right = tl.load(y_ptr + offs_n[None, :] * y_row_stride + k[:, None] * y_k_stride,
                        mask=(offs_n[None, :] < M) & (k[:, None] < K), other=0.0)
        acc = tl.dot(left, right, acc, input_precision=DOT_PRECISION)

    # Scalars may arrive as fp64 depending on the Triton version: keep the epilogue in fp32.
    acc = acc * tl.cast(alpha, tl.float32)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < M)
    if ADD_Y:
        y_tile = tl.load(y_ptr + offs_m[:, None] * y_row_stride + offs_n[None, :] * y_k_stride, mask=mask)
        acc += tl.cast(beta, tl.float32) * y_tile.to(tl.float32)
    result = acc.to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + offs_m[:, None] * out_row_stride + offs_n[None, :], result, mask=mask)
    if tile_m != tile_n:  # mirror: element (m, n) also goes to out[n, m]; a diagonal tile is whole
        tl.store(out_ptr + offs_n[None, :] * out_row_stride + offs_m[:, None], result, mask=mask)


def _launch_syrk(name: str, X: torch.Tensor, out: torch.Tensor, transpose: bool,
                 alpha: float, beta: float, add_input: bool, config: SyrkConfig | None) -> torch.Tensor:
    """Shared host wrapper: checks, picks the config, launches the triangle grid.
    transpose=False: Y = X (rows of X, out M x M); True: Y = Xᵀ (columns of X, out N x N)."""
    assert X.ndim in (2, 3), f"{name}: X must be (M, N) or (B, M, N), got shape {tuple(X.shape)}"
    rows, cols = X.shape[-2:]
    size, K = (cols, rows) if transpose else (rows, cols)
    batch = X.shape[0] if X.ndim == 3 else 1
    expected = (*X.shape[:-2], size, size)
    assert out.shape == expected, f"{name}: out must have shape {expected}, got {tuple(out.shape)}"
    assert X.dtype == out.dtype, f"{name}: dtype mismatch: X {X.dtype}, out {out.dtype}"
    assert X.dtype in (torch.bfloat16, torch.float16, torch.float32), f"{name}: unsupported dtype {X.dtype}"
    assert X.device == out.device, f"{name}: device mismatch: X {X.device}, out {out.device}"
    assert X.is_contiguous() and out.is_contiguous(), f"{name}: X and out must be contiguous"
    assert rows * cols < 2**31, f"{name}: one matrix must have < 2^31 elements (int32 offsets)"
    if out.numel() == 0:
        return out
    if K == 0:
        return out.zero_()
    row_stride, k_stride = (1, cols) if transpose else (cols, 1)
    config = config or syrk_config(X.device, X.dtype, batch, size, K)
    tiles = triton.cdiv(size, config.block)
    _syrk_kernel[(tiles * (tiles + 1) // 2, batch)](
        X, out, size, K,
        rows * cols, row_stride, k_stride,
        size * size, size,
        alpha, beta,
        BLOCK=config.block, BLOCK_K=config.block_k, ADD_Y=add_input,
        DOT_PRECISION="ieee" if X.dtype == torch.float32 else "tf32",
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return out


def xxt_triton(X: torch.Tensor, out: torch.Tensor, config: SyrkConfig | None = None) -> torch.Tensor:
    """out (..., M, M) = X·Xᵀ for X (..., M, K) with the Triton kernel; `config` overrides the
    table (benchmarks)."""
    return _launch_syrk("xxt", X, out, transpose=False, alpha=1.0, beta=0.0, add_input=False, config=config)


def xtx_triton(X: torch.Tensor, out: torch.Tensor, config: SyrkConfig | None = None) -> torch.Tensor:
    """out (..., N, N) = Xᵀ·X for X (..., K, N) with the Triton kernel."""
    return _launch_syrk("xtx", X, out, transpose=True, alpha=1.0, beta=0.0, add_input=False, config=config)


def ba_plus_caa_triton(A: torch.Tensor, b: float, c: float, out: torch.Tensor,
                       config: SyrkConfig | None = None) -> torch.Tensor:
    """out = b·A + c·A·A for symmetric A (..., M, M) with the Triton kernel."""
    assert A.shape[-1] == A.shape[-2], f"ba_plus_caa: A must be square, got shape {tuple(A.shape)}"
    return _launch_syrk("ba_plus_caa", A, out, transpose=False, alpha=c, beta=b, add_input=True, config=config)


def xxt_reference(X: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    return torch.matmul(X, X.mT, out=out)


def xtx_reference(X: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    return torch.matmul(X.mT, X, out=out)


def ba_plus_caa_reference(A: torch.Tensor, b: float, c: float, out: torch.Tensor) -> torch.Tensor:
    fused_multiply_add = torch.baddbmm if A.ndim == 3 else torch.addmm
    return fused_multiply_add(A, A, A, beta=b, alpha=c, out=out)


def xxt(X: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """out = X·Xᵀ: Triton for CUDA tensors, PyTorch for CPU tensors."""
    return xxt_triton(X, out) if X.is_cuda else xxt_reference(X, out)


def xtx(X: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """out = Xᵀ·X: Triton for CUDA tensors, PyTorch for CPU tensors."""
    return xtx_triton(X, out) if X.is_cuda else xtx_reference(X, out)


def ba_plus_caa(A: torch.Tensor, b: float, c: float, out: torch.Tensor) -> torch.Tensor:
    """out = b·A + c·A·A for symmetric A: Triton for CUDA tensors, PyTorch for CPU tensors."""
    return ba_plus_caa_triton(A, b, c, out) if A.is_cuda else ba_plus_caa_reference(A, b, c, out)
