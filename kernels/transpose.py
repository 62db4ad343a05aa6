"""Transpose-copy and transpose-add: keep the tied token embedding (V, D) and the transposed LM
head (D, V) in sync (V = 50304, D = 768). transpose_copy also moves 1-byte types: the FP8 LM head
needs its weights, inputs and (T, V) logit gradients in both layouts.

Provenance: the idea of dedicated tiled transpose kernels for the tied embedding comes from
modded-nanogpt PR #233 (https://github.com/KellerJordan/modded-nanogpt/pull/233); this code is
written from scratch.

Why not `dst.copy_(src.T)`: PyTorch's elementwise kernel walks dst in order, so it reads src with
a stride of a whole row, and it launches one block per few elements, filling every SM while the
optimizer's NCCL collectives need some. Here each program loads a (BLOCK_M, BLOCK_N) tile of src
with row-contiguous reads, Triton transposes it through shared memory, and it is stored with
row-contiguous writes into dst. For the embedding's copies the grid is persistent (a few programs per
SM, each looping over tiles) so that the kernel leaves room for communication kernels running beside it.
"""
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.configs import SM90, pick, sm_count


@dataclass(frozen=True)
class TransposeConfig:
    block_m: int      # src rows per tile = contiguous elements per dst row segment
    block_n: int      # src columns per tile = contiguous elements per src row segment
    num_warps: int
    ctas_per_sm: int  # persistent grid size = ctas_per_sm * SMs; 0 launches one program per tile


# Tile configs by device, then the element size in bytes: it sets how many elements fill a 128-byte line, while
# the shape only changes the tile count. Tuning note: 32 candidates timed on one H100 SXM (torch 2.11, Triton 3.6)
# with `python -m kernels.bench --sweep` on the training shapes, bf16 copy (768, 50304) and add (50304, 768),
# records/kernels/2026-11-21_transpose. 128 x 64 tiles were fastest for both; 4 programs per SM are within 2% of one
# program per tile (85-90% of copy bandwidth either way) and hold half the SM's warp slots, leaving room for NCCL
# kernels. The training's add reads an fp32 source (the embedding's gradient accumulator): not swept, it takes
# the bf16 tiles.
# 1-byte elements (the FP8 LM head's operands and logit gradients, copy only), swept over 96 candidates at
# (49152, 50304), (16384, 50304), (49152, 768) and (768, 50304) (records/kernels/2026-11-26_fp8-transpose-tiles):
# 256 x 128 tiles, one program per tile, 2.86 TB/s on the logit gradient against 2.42 for the fallback below. They
# run inside the micro-step, where no collective needs SMs beside them.
_SM90_TILES = TransposeConfig(block_m=128, block_n=64, num_warps=8, ctas_per_sm=4)
TRANSPOSE_CONFIGS = {SM90: {1: TransposeConfig(block_m=256, block_n=128, num_warps=8, ctas_per_sm=0),
                            2: _SM90_TILES, 4: _SM90_TILES}}
# Fallbacks, any device. 64-element segments are >= 128 bytes for 2- and 4-byte types, a full cache line either way.
TRANSPOSE_GENERIC = TransposeConfig(block_m=64, block_n=64, num_warps=4, ctas_per_sm=4)
# 1-byte elements on other devices: 128-element segments keep every read and write a full 128-byte line.
TRANSPOSE_BYTES = TransposeConfig(block_m=128, block_n=128, num_warps=8, ctas_per_sm=4)
BYTE_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2, torch.uint8, torch.int8)


def transpose_config(device: torch.device, dtype: torch.dtype) -> TransposeConfig:
    size = dtype.itemsize
    return pick(TRANSPOSE_CONFIGS, device, size, TRANSPOSE_BYTES if size == 1 else TRANSPOSE_GENERIC)


@triton.jit
def _transpose_kernel(
    src_ptr, dst_ptr,          # src (M, N), dst (N, M), both with inner stride 1
    M, N,
    src_row_stride, dst_row_stride,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    ACCUMULATE: tl.constexpr,  # False: dst = src^T; True: dst += src^T
):
    """Program p handles tiles p, p + P, p + 2P, ... of src, numbered row-major."""
    tiles_n = tl.cdiv(N, BLOCK_N)
    num_tiles = tl.cdiv(M, BLOCK_M) * tiles_n
    for tile in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0)):
        offs_m = (tile // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
        offs_n = (tile % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)   # (BLOCK_N,)
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)          # (BLOCK_M, BLOCK_N)
        # int64 row offsets: M * N may exceed 2^31 elements for other callers.
        src_ptrs = src_ptr + offs_m[:, None].to(tl.int64) * src_row_stride + offs_n[None, :]
        # Element (m, n) of the tile goes to dst[n, m]: these pointers run contiguously down
        # the tile's columns, so Triton re-lays the tile out (through shared memory) before
        # the store, and the stores are as coalesced as the loads.
        dst_ptrs = dst_ptr + offs_n[None, :].to(tl.int64) * dst_row_stride + offs_m[:, None]
        tile_vals = tl.load(src_ptrs, mask=mask)
        if ACCUMULATE:
            summed = tile_vals.to(tl.float32) + tl.load(dst_ptrs, mask=mask).to(tl.float32)
            tile_vals = summed.to(dst_ptr.dtype.element_ty)
        tl.store(dst_ptrs, tile_vals, mask=mask)


def _launch_transpose(src: torch.Tensor, dst: torch.Tensor, accumulate: bool,
                      config: TransposeConfig | None) -> torch.Tensor:
    assert src.ndim == 2, f"src must be 2-D (M, N), got shape {tuple(src.shape)}"
    M, N = src.shape
    assert dst.shape == (N, M), f"dst must be (N, M) = {(N, M)} for src {(M, N)}, got {tuple(dst.shape)}"
    # transpose_add may also fold an fp32 src into a lower-precision dst (an fp32 gradient accumulator)
    assert src.dtype == dst.dtype or (accumulate and src.dtype == torch.float32), \
        f"dtype mismatch: src {src.dtype}, dst {dst.dtype} (only transpose_add takes an fp32 src for any dst)"
    copyable = (torch.bfloat16, torch.float16, torch.float32) + (() if accumulate else BYTE_DTYPES)
    assert src.dtype in copyable, f"unsupported dtype {src.dtype} for transpose_{'add' if accumulate else 'copy'}"
    assert src.device == dst.device, f"device mismatch: src {src.device}, dst {dst.device}"
    assert src.is_contiguous() and dst.is_contiguous(), "src and dst must be contiguous"
    if src.numel() == 0:
        return dst
    config = config or transpose_config(src.device, src.dtype)
    num_tiles = triton.cdiv(M, config.block_m) * triton.cdiv(N, config.block_n)
    grid_size = min(num_tiles, config.ctas_per_sm * sm_count(src.device)) if config.ctas_per_sm else num_tiles
    bytewise = src.dtype in BYTE_DTYPES  # moved as raw bytes: one kernel for every 1-byte type
    _transpose_kernel[(grid_size,)](
        src.view(torch.uint8) if bytewise else src, dst.view(torch.uint8) if bytewise else dst,
        M, N, src.stride(0), dst.stride(0),
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, ACCUMULATE=accumulate,
        num_warps=config.num_warps,
    )
    return dst


def transpose_copy_triton(src: torch.Tensor, dst: torch.Tensor, config: TransposeConfig | None = None) -> torch.Tensor:
    """dst (N, M) = src (M, N)^T with the Triton kernel; `config` overrides the table (benchmarks)."""
    return _launch_transpose(src, dst, accumulate=False, config=config)


def transpose_add_triton(src: torch.Tensor, dst: torch.Tensor, config: TransposeConfig | None = None) -> torch.Tensor:
    """dst (N, M) += src (M, N)^T with the Triton kernel (sum in fp32, rounded once); src is dst's dtype or fp32."""
    return _launch_transpose(src, dst, accumulate=True, config=config)


def transpose_copy_reference(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    return dst.copy_(src.T)


def transpose_add_reference(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    return dst.add_(src.T)


def transpose_copy(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """dst = src^T: Triton for CUDA tensors, PyTorch for CPU tensors."""
    return transpose_copy_triton(src, dst) if src.is_cuda else transpose_copy_reference(src, dst)


def transpose_add(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """dst += src^T: Triton for CUDA tensors, PyTorch for CPU tensors."""
    return transpose_add_triton(src, dst) if src.is_cuda else transpose_add_reference(src, dst)


def transposed(t: torch.Tensor) -> torch.Tensor:
    """tᵀ (N, M) as a new contiguous tensor (transpose_copy)."""
    return transpose_copy(t, t.new_empty(t.shape[::-1]))


@torch.library.custom_op("nanogpt::transposed", mutates_args=())
def transposed_op(t: torch.Tensor) -> torch.Tensor:
    """tᵀ (N, M) as a new contiguous tensor, by transpose_copy, for code under torch.compile: Inductor's own transposed
    copy of the FP8 weight gradients' (T, 768) e4m3 operands, with the token count symbolic, cost more than the
    matmul it feeds saved (records/enwiki-124/2026-11-30_fp8-mlp-weight-gradients)."""
    return transposed(t)


@transposed_op.register_fake
def _(t):
    return t.new_empty(t.shape[::-1])

