"""The MLP, relu(x @ w_inᵀ)² @ w_out, with ReLU² fused into the first matmul's epilogue.

Fused linear→ReLU² kernel idea by @andrewbriand and @jrauvola in modded-nanogpt
(https://github.com/KellerJordan/modded-nanogpt); this is an independent implementation.

    forward   post  = relu(x @ w_inᵀ)²                 (T, H)  Triton, one pass, writes only post
              out   = post @ w_out                     (T, D)  cuBLAS
    backward  d_pre = (g @ w_outᵀ) · 2·sqrt(post)      (T, H)  Triton, same kernel, epilogue reads post
              dW_out = postᵀ g,  dW_in = d_preᵀ x,  dx = d_pre w_in      cuBLAS (cuBLASLt's FP8 with --fp8_body)

FP8 (--fp8_body, the trainer's default on CUDA): the forward's first matmul reads e4m3 copies of x and w_in, x
unscaled (an RMS-normed row has no entry above sqrt(D), far below e4m3's 448) and w_in divided by amax(|w_in|) / 448;
the epilogue multiplies that scale back in (upstream's FP8 up-projection: record #84). With block scales on, both
epilogues also write their output in e4m3, each 1x128 block of a row over its own amax / 448 (post and the gradient
d_pre have no bound to scale by, and a block's amax is in the tile), for out = post w_out and dx = d_pre w_in in
cuBLASLt's blockwise-scaled FP8 (the weights over 128x128 block scales); and the backward's matmul reads e4m3 copies
of g, each row over its own amax / 448 (the scale of a row of the accumulator), and of w_out over one scale.
The backward still reads the bf16 post. The weight gradients reduce over tokens, and cuBLASLt's blockwise FP8 over that
long K was barely faster than bf16 (records/kernels/2026-11-26_fp8-dw-blockwise): they run as per-tensor scaled FP8
matmuls (fast accumulation) of K-major copies, postᵀ and d_preᵀ written in e4m3 by the backward kernel in place of
its bf16 d_pre (mlp_grads_fp8 says how their scales are known before it runs), gᵀ and xᵀ by the tiled transpose
(records/enwiki-124/2026-11-30_fp8-mlp-weight-gradients).

Only post is saved: relu(pre) = sqrt(post), and the square root of the rounded post has a relative
error of at most 2^-10, below the 2^-9 of rounding pre itself to bf16. That halves the forward
epilogue's writes and the activation memory against saving both pre and post.

The kernel is persistent (one program per SM walking output tiles) and moves tiles with TMA tensor
descriptors; the descriptor kernel also runs under the Triton interpreter, which is how the tests
check it on the CPU. On an sm_90 GPU with Triton 3.6 the FP8 backward runs a warp-specialized version
of it written in Gluon instead (same sums, same bits; see "Hopper" below), which the GPU tests check.
"""
import math
from typing import NamedTuple

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_init, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDescriptor
from triton.tools.tensor_descriptor import TensorDescriptor

from kernels.configs import SM90, device_key, pick, sm_count
from kernels.fp8_linear import (E4M3, E4M3_MAX, FP8_BLOCK, fp8_block_mm, fp8_rows, fp8_tensor, fp8_weight_blocks,
                                scale_of)
from kernels.transpose import transposed_op


# -----------------------------------------------------------------------------
# Triton kernel

@triton.jit
def _relu_square_epilogue(acc, post, BACKWARD: tl.constexpr):
    """ReLU² of one fp32 accumulator tile (forward), or the gradient through it (backward: acc is d_post, post the
    forward's output tile in fp32)."""
    if BACKWARD:
        return acc * (2.0 * tl.sqrt(post))  # d_pre = d_post · 2·relu(pre)
    relu_pre = tl.maximum(acc, 0.0, propagate_nan=tl.PropagateNan.ALL)  # as torch.relu: NaN stays NaN
    return relu_pre * relu_pre


@triton.jit
def _e4m3_transposed(tile, multiplier):
    """tileᵀ · multiplier in e4m3, clamped to ±448 (a GPU's cast saturates; the interpreter's and torch's would not);
    NaN stays NaN (a plain clamp would make it ±448, a finite wrong weight gradient)."""
    t = tl.maximum(tile * multiplier, -448.0, propagate_nan=tl.PropagateNan.ALL)
    return tl.trans(tl.minimum(t, 448.0, propagate_nan=tl.PropagateNan.ALL)).to(tl.float8e4nv)


@triton.jit
def _matmul_relu_square_kernel(
    a_desc, b_desc,  # A (M, K), B (N, K): the kernel computes acc = A @ Bᵀ
    out_desc,        # (M, N) output: relu(acc)² forward, acc·2·sqrt(post) backward
    post_desc,       # (M, N) the forward's output, read in the backward only
    scale_ptr,       # fp32 scalar multiplying acc (SCALED: FP8 operands)
    row_scale_ptr,   # (M,) fp32 scales of A's rows, multiplying acc's rows too (ROW_SCALED)
    out8_desc,       # (M, N) e4m3 copy of the output over its row scales (FP8_OUT)
    out8_scale_ptr,  # (N / 128, M) fp32 row scales of out8, one per row of each 128-wide column block
    post_t_desc,     # (N, M) e4m3 postᵀ times t_mul_ptr[0] (TRANSPOSED)
    d_pre_t_desc,    # (N, M) e4m3 outputᵀ times t_mul_ptr[1] (TRANSPOSED); the output itself is then not written
    t_mul_ptr,       # 2 fp32 multipliers, the reciprocals of the transposed copies' scales
    M, N, K, num_programs,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BACKWARD: tl.constexpr,
    SCALED: tl.constexpr, ROW_SCALED: tl.constexpr, FP8_OUT: tl.constexpr, TRANSPOSED: tl.constexpr,
):
    tiles_n = tl.cdiv(N, BLOCK_N)
    num_tiles = tl.cdiv(M, BLOCK_M) * tiles_n
    # Row-major tile order: programs running together share rows of A, and B (at most 3072 x 768 here,
    # 4.7 MB in bf16) stays in L2 anyway, so no grouped ordering is needed. flatten=True lets the
    # compiler pipeline the next tile's loads under this tile's epilogue.
    for tile in tl.range(tl.program_id(0), num_tiles, num_programs, flatten=True):
        off_m = (tile // tiles_n) * BLOCK_M
        off_n = (tile % tiles_n) * BLOCK_N
        rows = off_m + tl.arange(0, BLOCK_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for off_k in range(0, K, BLOCK_K):  # TMA zero-fills past K, M and N
            acc = tl.dot(a_desc.load([off_m, off_k]), b_desc.load([off_n, off_k]).T, acc)
        if SCALED:
            acc = acc * tl.load(scale_ptr)
        if ROW_SCALED:
            acc = acc * tl.load(row_scale_ptr + rows, mask=rows < M, other=0.0)[:, None]
        # Store in two column halves: staging half a tile in shared memory leaves room for more
        # mainloop stages.
        left, right = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
        if BACKWARD:
            post_left = post_desc.load([off_m, off_n]).to(tl.float32)
            post_right = post_desc.load([off_m, off_n + BLOCK_N // 2]).to(tl.float32)
        else:
            post_left, post_right = left, right  # unused
        left = _relu_square_epilogue(left, post_left, BACKWARD)
        right = _relu_square_epilogue(right, post_right, BACKWARD)
        if TRANSPOSED:  # the weight gradients' K-major operands: (N, M) tiles at (off_n, off_m)
            post_mul, d_pre_mul = tl.load(t_mul_ptr), tl.load(t_mul_ptr + 1)
            post_t_desc.store([off_n, off_m], _e4m3_transposed(post_left, post_mul))
            post_t_desc.store([off_n + BLOCK_N // 2, off_m], _e4m3_transposed(post_right, post_mul))
            d_pre_t_desc.store([off_n, off_m], _e4m3_transposed(left, d_pre_mul))
            d_pre_t_desc.store([off_n + BLOCK_N // 2, off_m], _e4m3_transposed(right, d_pre_mul))
        else:
            out_desc.store([off_m, off_n], left.to(out_desc.dtype))
            out_desc.store([off_m, off_n + BLOCK_N // 2], right.to(out_desc.dtype))
        if FP8_OUT:  # each row's 128 entries over their amax / 448: the 1x128 blocks cuBLASLt's FP8 matmul reads
            # 1e-30, not fp32's tiny: all-zero blocks (ReLU's zeros, rows past M) keep 448 / amax finite, not 0·inf
            amax_left = tl.maximum(tl.max(tl.abs(left), axis=1), 1e-30)
            amax_right = tl.maximum(tl.max(tl.abs(right), axis=1), 1e-30)
            if BLOCK_N == 128:  # the two halves make one block
                amax_left = tl.maximum(amax_left, amax_right)
                amax_right = amax_left
            out8_desc.store([off_m, off_n], (left * (448.0 / amax_left)[:, None]).to(out8_desc.dtype))
            out8_desc.store([off_m, off_n + BLOCK_N // 2], (right * (448.0 / amax_right)[:, None]).to(out8_desc.dtype))
            tl.store(out8_scale_ptr + (off_n // 128) * M + rows, amax_left / 448.0, mask=rows < M)
            if BLOCK_N == 256:  # each half is a block
                tl.store(out8_scale_ptr + (off_n // 128 + 1) * M + rows, amax_right / 448.0, mask=rows < M)


# -----------------------------------------------------------------------------
# Launch configuration

class MLPConfig(NamedTuple):
    block_m: int
    block_n: int
    block_k: int
    num_stages: int
    num_warps: int


# Configs by device, then (pass, N, K): the weight is (N, K) = (3072, 768) in every pass. Tuned on one H100 for
# x (16384 or 49152, 768) @ (3072, 768)ᵀ over 5 candidates (python -m kernels.bench --sweep): 128x256x64 and
# 256x128x64 tiles came within 3% of each other, the forward within 6% of a bare cuBLAS matmul of the same shape
# (records/kernels/2026-11-21_relu-square). The token count M is not in the key: one config serves every stage's
# (16384-49152). The backward stages its post tile too and runs out of shared memory with 4 stages; swept at all
# three token counts, 256x128x64 ties 128x256x64 at 16384 and 32768 and is 3% faster at 49152
# (records/enwiki-124/2026-11-26_fp8-qkv-projection). The FP8 forward's 128-wide K tiles (128 bytes) were the
# fastest of 5 (records/enwiki-124/2026-11-26_fp8-mlp-up-projection). A pass writing its e4m3 copy too takes N tiles
# 128 wide (one 1x128 scale block) or 256 (a block per half): 128x256 tiles with 3 stages were the fastest of 7-8 for
# each such pass (records/enwiki-124/2026-11-26_fp8-mlp-backward-matmul).
MLP_CONFIGS = {
    SM90: {
        ("forward_bf16", 3072, 768): MLPConfig(128, 256, 64, 4, 8),
        ("backward_bf16", 3072, 768): MLPConfig(256, 128, 64, 3, 8),
        ("backward_bf16_out8", 3072, 768): MLPConfig(128, 256, 64, 3, 8),
        ("forward_fp8", 3072, 768): MLPConfig(128, 256, 128, 4, 8),
        ("forward_fp8_out8", 3072, 768): MLPConfig(128, 256, 128, 3, 8),
        ("backward_fp8_out8", 3072, 768): MLPConfig(128, 256, 128, 3, 8),
    },
}
# Fallback (other GPUs and shapes, the interpreter), untuned: half the tuned tile, so it needs less shared memory.
GENERIC_MLP_CONFIG = MLPConfig(128, 128, 64, 3, 4)


def mlp_config(device: torch.device, direction: str, N: int, K: int) -> MLPConfig:
    return pick(MLP_CONFIGS, device, (direction, N, K), GENERIC_MLP_CONFIG)


# -----------------------------------------------------------------------------
# Hopper: the FP8 backward as a warp-specialized kernel (Gluon)
#
# The Triton kernel runs each tile's epilogue (read post, scale, write d_pre and its e4m3 copy) after the tile's
# matmul, and the tensor cores idle meanwhile: with K = 768 the matmul is short and the epilogue moves three times
# its operands' bytes. Here one warp issues every TMA load (the operands' K stages into a ring, and each tile's
# post ahead of its epilogue) and two warpgroups take the CTA's tiles in turn, so that one's epilogue runs while the
# other's matmul does. Their mainloops alternate (the turn barriers): both wait on the ring's barriers by phase
# parity, which tells phases apart only for a waiter at most one lap ahead. The sums are the Triton kernel's, in
# its order: the outputs are bit-identical (tests/test_relu_square.py). Timings, alone and in training:
# records/kernels/2026-11-29_relu-square-backward-warp-specialized.
# Gluon's API changes between Triton releases: this is written for Triton 3.6; other versions use the Triton kernel.

HOPPER_TILE = 128  # rows, columns and K-slice of a tile: one e4m3 scale block wide
HOPPER_STAGES = 3  # K-slices in flight: with two post tiles and two output tiles, 224 KB of shared memory
HOPPER_TRITON = "3.6."


@gluon.jit
def _hopper_loader(a_desc, b_desc, post_desc, a_bufs, b_bufs, ready, empty, post_bufs, post_ready, post_empty,
                   M, N, K, STAGES: gl.constexpr):
    """One warp: the K-slices of A and B of each of the CTA's tiles in order, into the ring, and each tile's post
    into its warpgroup's buffer."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    tiles_n = gl.cdiv(N, BN)
    slot = 0  # K-slices loaded so far
    tile_index = 0  # the CTA's tiles so far: tile_index % 2 is the warpgroup that takes it
    for tile in range(gl.program_id(0), gl.cdiv(M, BM) * tiles_n, gl.num_programs(0)):
        off_m = (tile // tiles_n) * BM
        off_n = (tile % tiles_n) * BN
        for k in range(0, K, BK):
            s = slot % STAGES
            mbarrier.wait(empty.index(s), ((slot // STAGES) & 1) ^ 1)  # the first lap finds every stage free
            mbarrier.expect(ready.index(s), a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(a_desc, [off_m, k], ready.index(s), a_bufs.index(s))
            tma.async_copy_global_to_shared(b_desc, [off_n, k], ready.index(s), b_bufs.index(s))
            slot += 1
        group = tile_index % 2
        mbarrier.wait(post_empty.index(group), ((tile_index // 2) & 1) ^ 1)
        mbarrier.expect(post_ready.index(group), post_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(post_desc, [off_m, off_n], post_ready.index(group), post_bufs.index(group))
        tile_index += 1


@gluon.jit
def _hopper_consumer(a_bufs, b_bufs, ready, empty, turn, post_bufs, post_ready, post_empty, out_bufs, out_desc,
                     out8_desc, post_t_desc, d_pre_t_desc, scale_ptr, row_scale_ptr, out8_scale_ptr, t_mul_ptr, M, N, K,
                     GROUP: gl.constexpr, STAGES: gl.constexpr, TRANSPOSED: gl.constexpr):
    """One warpgroup: tiles GROUP, GROUP + 2, ... of the CTA's; each as the Triton kernel's backward epilogue."""
    BM: gl.constexpr = out8_desc.block_type.shape[0]
    BN: gl.constexpr = out8_desc.block_type.shape[1]
    BK: gl.constexpr = a_bufs.shape[2]
    gl.static_assert(BN == 128, "a tile's row is one 1x128 e4m3 scale block")
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 32])
    tiles_n = gl.cdiv(N, BN)
    k_slices = gl.cdiv(K, BK)
    if TRANSPOSED:  # two e4m3 tiles a group
        first_buf = out_bufs.index(2 * GROUP)
        second_buf = out_bufs.index(2 * GROUP + 1)
    else:
        out_buf = out_bufs.index(GROUP)
        out8_buf = out_buf._reinterpret(gl.float8e4nv, [BM, BN], out8_desc.layout)  # used once out_buf's store is done
    scale = gl.load(scale_ptr)
    tile_index = GROUP
    for tile in range(gl.program_id(0) + GROUP * gl.num_programs(0), gl.cdiv(M, BM) * tiles_n,
                      2 * gl.num_programs(0)):
        off_m = (tile // tiles_n) * BM
        off_n = (tile % tiles_n) * BN
        turn_phase = tile_index // 2
        if GROUP == 0:  # after the other group's previous mainloop (none before the first)
            mbarrier.wait(turn.index(0), (turn_phase - 1) & 1, pred=turn_phase > 0)
        else:  # after this tile's predecessor's
            mbarrier.wait(turn.index(1), turn_phase & 1)
        slot = tile_index * k_slices
        s = slot % STAGES
        mbarrier.wait(ready.index(s), (slot // STAGES) & 1)
        acc = gl.zeros((BM, BN), dtype=gl.float32, layout=mma_layout)
        acc = warpgroup_mma(a_bufs.index(s), b_bufs.index(s).permute((1, 0)), acc, use_acc=False, is_async=True)
        done = s
        for k in range(1, k_slices):
            s = (slot + k) % STAGES
            mbarrier.wait(ready.index(s), ((slot + k) // STAGES) & 1)
            acc = warpgroup_mma(a_bufs.index(s), b_bufs.index(s).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_init(warpgroup_mma_wait(num_outstanding=1, deps=(acc, )))  # slice k - 1's is done
            mbarrier.arrive(empty.index(done))
            done = s
        mbarrier.arrive(turn.index(1 - GROUP))
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        mbarrier.arrive(empty.index(done))

        rows = off_m + gl.arange(0, BM, layout=gl.SliceLayout(1, mma_layout))
        acc = acc * scale * gl.load(row_scale_ptr + rows, mask=rows < M, other=0.0)[:, None]
        mbarrier.wait(post_ready.index(GROUP), (tile_index // 2) & 1)
        post = post_bufs.index(GROUP).load(mma_layout).to(gl.float32)
        d_pre = acc * (2.0 * gl.sqrt(post))
        tma.store_wait(pendings=0)  # this group's stores of its previous tile have read its buffers
        if TRANSPOSED:
            first_buf.store(_e4m3_transposed_gl(post, gl.load(t_mul_ptr)))
            fence_async_shared()
            tma.async_copy_shared_to_global(post_t_desc, [off_n, off_m], first_buf)
        else:
            out_buf.store(d_pre.to(out_desc.dtype))
            fence_async_shared()
            tma.async_copy_shared_to_global(out_desc, [off_m, off_n], out_buf)
        mbarrier.arrive(post_empty.index(GROUP))  # the store waited for every thread's writes, so all read post
        amax = gl.maximum(gl.max(gl.abs(d_pre), axis=1), 1e-30)  # as the Triton kernel: zero rows keep a scale
        gl.store(out8_scale_ptr + (off_n // BN) * M + rows, amax / 448.0, mask=rows < M)
        d_pre8 = (d_pre * (448.0 / amax)[:, None]).to(gl.float8e4nv)
        if TRANSPOSED:
            second_buf.store(d_pre8)
            fence_async_shared()
            tma.async_copy_shared_to_global(out8_desc, [off_m, off_n], second_buf)
            d_pre_t8 = _e4m3_transposed_gl(d_pre, gl.load(t_mul_ptr + 1))
            tma.store_wait(pendings=1)  # postᵀ's store has read first_buf
            first_buf.store(d_pre_t8)
            fence_async_shared()
            tma.async_copy_shared_to_global(d_pre_t_desc, [off_n, off_m], first_buf)
        else:
            tma.store_wait(pendings=0)
            out8_buf.store(d_pre8)
            fence_async_shared()
            tma.async_copy_shared_to_global(out8_desc, [off_m, off_n], out8_buf)
        tile_index += 2
    tma.store_wait(pendings=0)


@gluon.jit
def _e4m3_transposed_gl(tile, multiplier):
    """_e4m3_transposed of a register tile, without its clamp: this kernel runs only on a GPU, whose e4m3 conversion
    (cvt.rn.satfinite) saturates at ±448 and keeps NaN: the same bits, and the kernel 16% fewer instructions."""
    return gl.permute((tile * multiplier).to(gl.float8e4nv), (1, 0))


@gluon.jit
def _relu_square_backward_hopper_kernel(a_desc, b_desc, post_desc, out_desc, out8_desc, post_t_desc, d_pre_t_desc,
                                        scale_ptr, row_scale_ptr, out8_scale_ptr, t_mul_ptr, M, N, K,
                                        STAGES: gl.constexpr, TRANSPOSED: gl.constexpr):
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BM, BK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BN, BK], b_desc.layout)
    post_bufs = gl.allocate_shared_memory(post_desc.dtype, [2, BM, BN], post_desc.layout)
    if TRANSPOSED:  # no 16-bit output: in its buffers' place, two e4m3 tiles a group
        out_bufs = gl.allocate_shared_memory(gl.float8e4nv, [4, BM, BN], out8_desc.layout)
    else:
        out_bufs = gl.allocate_shared_memory(out_desc.dtype, [2, BM, BN], out_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    post_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    post_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    for i in gl.static_range(2):
        mbarrier.init(post_ready.index(i), count=1)
        mbarrier.init(post_empty.index(i), count=1)
        mbarrier.init(turn.index(i), count=1)
    fence_async_shared()  # the initialized barriers, visible to the TMA unit
    gl.warp_specialize([  # (Gluon's frontend takes no starred arguments)
        (_hopper_consumer, (a_bufs, b_bufs, ready, empty, turn, post_bufs, post_ready, post_empty, out_bufs, out_desc,
                            out8_desc, post_t_desc, d_pre_t_desc, scale_ptr, row_scale_ptr, out8_scale_ptr, t_mul_ptr,
                            M, N, K, 0, STAGES, TRANSPOSED)),
        (_hopper_consumer, (a_bufs, b_bufs, ready, empty, turn, post_bufs, post_ready, post_empty, out_bufs, out_desc,
                            out8_desc, post_t_desc, d_pre_t_desc, scale_ptr, row_scale_ptr, out8_scale_ptr, t_mul_ptr,
                            M, N, K, 1, STAGES, TRANSPOSED)),
        (_hopper_loader, (a_desc, b_desc, post_desc, a_bufs, b_bufs, ready, empty, post_bufs, post_ready, post_empty,
                          M, N, K, STAGES)),
    ], [4, 1], [232, 40])  # registers per thread: the warpgroups hold a 128 x 128 fp32 tile each, the loader little


def hopper_backward_applies(a: torch.Tensor, N: int, fp8_out: bool, out_dtype: torch.dtype) -> bool:
    """Whether the FP8 backward runs the warp-specialized kernel: an sm_90 GPU, Triton 3.6, e4m3 operands with the
    e4m3 copy asked for, N in whole tiles, a 16-bit output."""
    return (a.is_cuda and device_key(a.device) == SM90 and triton.__version__.startswith(HOPPER_TRITON)
            and a.dtype == E4M3 and fp8_out and N % HOPPER_TILE == 0 and out_dtype in (torch.bfloat16, torch.float16))


def relu_square_backward_hopper(a: torch.Tensor, b: torch.Tensor, post: torch.Tensor, scale: torch.Tensor,
                                row_scale: torch.Tensor, out_dtype: torch.dtype = torch.bfloat16,
                                t_mul: torch.Tensor | None = None):
    """matmul_relu_square_triton(a, b, post=post, scale=scale, row_scale=row_scale, out_dtype=out_dtype,
    fp8_out=True, t_mul=t_mul), bit for bit, on the warp-specialized kernel (hopper_backward_applies)."""
    (M, K), N = a.shape, b.shape[0]
    assert a.is_contiguous() and b.is_contiguous() and b.shape[1] == K and a.dtype == b.dtype == E4M3, \
        f"need contiguous e4m3 a (M, K), b (N, K); got {a.dtype} {tuple(a.shape)}, {b.dtype} {tuple(b.shape)}"
    assert post.shape == (M, N) and post.dtype == out_dtype and post.is_contiguous() and M % 4 == 0, \
        "post must be the forward's contiguous (M, N) output, M a multiple of 4 (cuBLASLt reads the scales)"
    assert row_scale.shape == (M,) and row_scale.dtype == scale.dtype == torch.float32, "fp32 scale and (M,) row scales"
    tile, transposed = HOPPER_TILE, t_mul is not None
    out8, out8_scale, out, copies = _fp8_outputs(M, N, out_dtype, a.device, transposed)
    descs = [GluonDescriptor.from_tensor(t, [tile, tile], gl.NVMMASharedLayout.get_default_for(
        [tile, tile], gl.float8e4nv if t.dtype == E4M3 else gl.bfloat16))
        for t in (a, b, post, post if out is None else out, out8, *(copies or (out8, out8)))]
    programs = min(sm_count(a.device), triton.cdiv(M, tile) * triton.cdiv(N, tile))
    # maxnreg: 12 warps (the loader's rounded up to a warpgroup) share the 64K registers of an SM
    _relu_square_backward_hopper_kernel[(programs,)](*descs, scale, row_scale, out8_scale,
                                                     out8_scale if t_mul is None else t_mul, M, N, K,
                                                     STAGES=HOPPER_STAGES, TRANSPOSED=transposed, num_warps=4,
                                                     maxnreg=168)
    return (out8, out8_scale, *copies) if transposed else (out, out8, out8_scale)


def _fp8_outputs(M: int, N: int, dtype: torch.dtype, device: torch.device, transposed: bool):
    """An fp8_out pass's e4m3 output (M, N) and its (N / 128, M) row-block scales; its 16-bit output, or (transposed,
    the backward) the (N, M) e4m3 postᵀ and d_preᵀ in its place."""
    assert not transposed or M % 16 == 0, f"the transposed e4m3 copies need M % 16 == 0 (TMA's 16-byte rows); got {M}"
    out8 = torch.empty(M, N, dtype=E4M3, device=device)
    out8_scale = torch.empty(N // FP8_BLOCK, M, device=device)
    if transposed:
        return out8, out8_scale, None, [torch.empty(N, M, dtype=E4M3, device=device) for _ in range(2)]
    return out8, out8_scale, torch.empty(M, N, dtype=dtype, device=device), None


# -----------------------------------------------------------------------------
# Host wrapper, autograd Function, reference

def matmul_relu_square_triton(a: torch.Tensor, b: torch.Tensor, post: torch.Tensor | None = None,
                              config: MLPConfig | None = None, scale: torch.Tensor | None = None,
                              row_scale: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16,
                              fp8_out: bool = False, t_mul: torch.Tensor | None = None):
    """a (M, K) @ b (N, K)ᵀ -> (M, N) in a.dtype: relu(a bᵀ)² if post is None, else (a bᵀ)·2·sqrt(post).
    scale: a 0-d fp32 tensor for e4m3 a and b, multiplying a bᵀ (the output then in out_dtype); row_scale: with it,
    an (M,) fp32 tensor of a's row scales, multiplying a bᵀ's rows.
    fp8_out: also return the output in e4m3 over 1x128 row-block scales, and those scales as an (N / 128, M) fp32
    tensor: out ≈ out8 · scales.T repeated 128 times along N. M a multiple of 4: cuBLASLt reads the scales' rows at
    16-byte multiples.
    t_mul (backward with fp8_out; M a multiple of 16): 2 fp32 multipliers; instead of the 16-bit output, the (N, M)
    e4m3 copies (post · t_mul[0])ᵀ and (out · t_mul[1])ᵀ, clamped to ±448, for the weight gradients' FP8 matmuls:
    returns (out8, scales, postᵀ, outᵀ)."""
    assert a.ndim == 2 and b.ndim == 2 and a.shape[1] == b.shape[1], \
        f"need a (M, K), b (N, K); got {tuple(a.shape)}, {tuple(b.shape)}"
    assert a.dtype == b.dtype and a.is_contiguous() and b.is_contiguous(), "a and b must be contiguous, one dtype"
    (M, K), N = a.shape, b.shape[0]
    assert K * a.element_size() % 16 == 0 and N * a.element_size() % 16 == 0, "TMA needs rows of 16·n bytes"
    backward, fp8 = post is not None, scale is not None
    assert fp8 == (a.dtype == torch.float8_e4m3fn), "scale goes with e4m3 a and b"
    assert row_scale is None or (fp8 and row_scale.shape == (M,) and row_scale.dtype == torch.float32), \
        "row_scale: (M,) fp32, with e4m3 a"
    dtype, transposed = out_dtype if fp8 else a.dtype, t_mul is not None
    assert not transposed or (backward and fp8_out and t_mul.shape == (2,) and t_mul.dtype == torch.float32), \
        "t_mul: 2 fp32 multipliers, in the backward with fp8_out"
    if backward:
        assert post.shape == (M, N) and post.dtype == dtype and post.is_contiguous(), \
            "post must be the forward's (M, N) output"
    direction = f"{'backward' if backward else 'forward'}_{'fp8' if fp8 else 'bf16'}{'_out8' if fp8_out else ''}"
    block_m, block_n, block_k, num_stages, num_warps = config or mlp_config(a.device, direction, N, K)
    assert not fp8_out or (block_n in (FP8_BLOCK, 2 * FP8_BLOCK) and N % block_n == 0 and M % 4 == 0), \
        f"fp8_out needs {FP8_BLOCK}- or {2 * FP8_BLOCK}-wide column tiles dividing N, and M a multiple of 4"
    if fp8_out:
        out8, out8_scale, out, copies = _fp8_outputs(M, N, dtype, a.device, transposed)
    else:
        out, copies = torch.empty(M, N, dtype=dtype, device=a.device), None
    post_desc = TensorDescriptor.from_tensor(post if backward else out, [block_m, block_n // 2])
    out_desc = post_desc if out is None else TensorDescriptor.from_tensor(out, [block_m, block_n // 2])
    out8_desc = TensorDescriptor.from_tensor(out8, [block_m, block_n // 2]) if fp8_out else out_desc
    t_descs = [TensorDescriptor.from_tensor(t, [block_n // 2, block_m]) for t in copies] if transposed else [out_desc] * 2
    num_programs = min(sm_count(a.device), triton.cdiv(M, block_m) * triton.cdiv(N, block_n))
    _matmul_relu_square_kernel[(num_programs,)](
        TensorDescriptor.from_tensor(a, [block_m, block_k]), TensorDescriptor.from_tensor(b, [block_n, block_k]),
        out_desc, post_desc, scale if fp8 else post_desc.base, post_desc.base if row_scale is None else row_scale,
        out8_desc, out8_scale if fp8_out else post_desc.base, *t_descs, post_desc.base if t_mul is None else t_mul,
        M, N, K, num_programs,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, BACKWARD=backward, SCALED=fp8,
        ROW_SCALED=row_scale is not None, FP8_OUT=fp8_out, TRANSPOSED=transposed,
        num_stages=num_stages, num_warps=num_warps,
    )
    if transposed:
        return out8, out8_scale, *copies
    return (out, out8, out8_scale) if fp8_out else out


# Custom ops: torch.compile treats each as one opaque call (it would otherwise trace into the Triton launcher
# and its TMA descriptors), and CUDA graphs capture them like any kernel.
@torch.library.custom_op("nanogpt::relu_square_mlp", mutates_args=())
def relu_square_mlp_op(x: torch.Tensor, w_in: torch.Tensor, w_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x: (T, D), w_in/w_out: (H, D) -> output (T, D) and post = relu(x w_inᵀ)² (T, H), kept for the backward."""
    post = matmul_relu_square_triton(x, w_in)
    return post @ w_out, post


@relu_square_mlp_op.register_fake
def _(x, w_in, w_out):
    return x.new_empty(x.shape), x.new_empty(x.size(0), w_in.size(0))


@torch.library.custom_op("nanogpt::relu_square_d_pre", mutates_args=())
def relu_square_d_pre_op(grad: torch.Tensor, w_out: torch.Tensor, post: torch.Tensor, fp8_out: bool = False,
                         grad8: torch.Tensor | None = None, grad_scale: torch.Tensor | None = None,
                         w_out8: torch.Tensor | None = None, w_out_scale: torch.Tensor | None = None,
                         t_mul: torch.Tensor | None = None) -> list[torch.Tensor]:
    """[d_pre] = [(grad w_outᵀ) · 2 relu(pre)] (T, H) from the forward's post, and with fp8_out also d_pre in e4m3
    over 1x128 row-block scales and those scales (matmul_relu_square_triton's fp8_out); with grad8, grad_scale
    (fp8_rows(grad)) and w_out8, w_out_scale (fp8_tensor(w_out)) its matmul reads those e4m3 copies. With t_mul
    (and fp8_out): [e4m3 d_pre, its scales, (H, T) e4m3 postᵀ, d_preᵀ] (matmul_relu_square_triton's t_mul)."""
    assert (grad8 is None) == (grad_scale is None) == (w_out8 is None) == (w_out_scale is None), \
        "grad8, grad_scale, w_out8 and w_out_scale go together"
    if grad8 is None:
        d_pre = matmul_relu_square_triton(grad, w_out, post=post, fp8_out=fp8_out, t_mul=t_mul)
    elif hopper_backward_applies(grad8, w_out8.size(0), fp8_out, grad.dtype):
        d_pre = relu_square_backward_hopper(grad8, w_out8, post, w_out_scale, grad_scale, grad.dtype, t_mul)
    else:
        d_pre = matmul_relu_square_triton(grad8, w_out8, post=post, scale=w_out_scale, row_scale=grad_scale,
                                          out_dtype=grad.dtype, fp8_out=fp8_out, t_mul=t_mul)
    return list(d_pre) if fp8_out else [d_pre]


@relu_square_d_pre_op.register_fake
def _(grad, w_out, post, fp8_out=False, grad8=None, grad_scale=None, w_out8=None, w_out_scale=None, t_mul=None):
    T, H = post.shape
    copies = [post.new_empty(T, H, dtype=E4M3), post.new_empty(H // FP8_BLOCK, T, dtype=torch.float32)]
    if t_mul is not None:
        return copies + [post.new_empty(H, T, dtype=E4M3) for _ in range(2)]
    return [post.new_empty(T, H)] + (copies if fp8_out else [])


def mlp_grads(grad: torch.Tensor, x: torch.Tensor, w_in: torch.Tensor, w_out: torch.Tensor, post: torch.Tensor,
              w_in_blocks: torch.Tensor | None = None, w_in_block_scale: torch.Tensor | None = None,
              *fp8_grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of x, w_in and w_out. With w_in_blocks and its scales (fp8_weight_blocks(w_in.T)), dx = d_pre @ w_in
    in FP8 from the e4m3 d_pre; fp8_grad: grad8, grad_scale, w_out8, w_out_scale for d_pre's matmul
    (relu_square_d_pre_op). The weights' gradients are matmuls outside the custom op, so that under torch.compile
    Inductor writes them straight into their bank's gradient, where it copied the op's outputs
    (records/enwiki-124/2026-11-30_mlp-weight-grads-into-bank)."""
    # A cuBLAS call first: it binds autograd's thread to the CUDA context. Triton 3.6 encodes TMA descriptors
    # before it does that itself, and fails ("invalid device context") when its launch is the thread's first
    # CUDA call (pytorch/pytorch#124565).
    grad_w_out = post.T @ grad
    fp8_out = w_in_blocks is not None
    d_pre, *d_pre8 = relu_square_d_pre_op(grad, w_out, post, fp8_out, *fp8_grad)
    grad_w_in = d_pre.T @ x
    if not fp8_out:
        return d_pre @ w_in, grad_w_in, grad_w_out
    del d_pre  # dx reads the e4m3 copy: the bf16 one is freed first, which lowers the backward's peak memory
    return fp8_block_mm(*d_pre8, w_in_blocks, w_in_block_scale, x.dtype), grad_w_in, grad_w_out


def mlp_grads_fp8(grad: torch.Tensor, x: torch.Tensor, w_out: torch.Tensor, post: torch.Tensor,
                  post_rows: torch.Tensor, w_in_blocks: torch.Tensor, w_in_block_scale: torch.Tensor,
                  grad8: torch.Tensor, grad_scale: torch.Tensor, w_out8: torch.Tensor, w_out_scale: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """mlp_grads with every matmul in FP8: the weight gradients dW_out = postᵀ grad and dW_in = d_preᵀ x as per-tensor
    scaled e4m3 matmuls (fast accumulation) over K-major copies: postᵀ and d_preᵀ written by the backward kernel (t_mul),
    gradᵀ and xᵀ here. post_rows: the forward's (T,) amax of each row of post / 448. No pass over post or d_pre
    before the kernel: post's scale is its amax, from post_rows; d_pre's is a bound, as each entry of d_pre =
    (grad w_outᵀ)·2·sqrt(post) is at most |grad_t|·|w_out_h|·2·sqrt(max post_t) (Cauchy-Schwarz), by 1.25 for the
    rounding of the kernel's e4m3 operands."""
    post_t_scale = post_rows.amax()
    bound = (grad.float().norm(dim=1) * (post_rows * E4M3_MAX).sqrt()).amax() * w_out.float().norm(dim=1).amax()
    d_pre_t_scale = scale_of(2 * 1.25 * bound)
    grad_t_scale = grad_scale.amax()  # grad's amax / 448, from its rows'
    # x by the largest power of two that keeps an RMS-normed row (no entry above sqrt(D)) within 448: exact
    x_mul = 2.0 ** math.floor(math.log2(E4M3_MAX / math.sqrt(x.size(1))))
    # The copies first: their casts are CUDA launches that bind the thread to the CUDA context (mlp_grads says why)
    grad_t8 = transposed_op((grad / grad_t_scale).to(E4M3))
    x_t8 = transposed_op((x * x_mul).to(E4M3))
    t_mul = torch.stack([post_t_scale, d_pre_t_scale]).reciprocal()
    d_pre8, d_pre8_scale, post_t8, d_pre_t8 = relu_square_d_pre_op(grad, w_out, post, True, grad8, grad_scale, w_out8,
                                                                   w_out_scale, t_mul)
    grad_w_out = torch._scaled_mm(post_t8, grad_t8.T, scale_a=post_t_scale, scale_b=grad_t_scale, out_dtype=grad.dtype,
                                  use_fast_accum=True)
    grad_w_in = torch._scaled_mm(d_pre_t8, x_t8.T, scale_a=d_pre_t_scale, scale_b=grad_t_scale.new_full((), 1 / x_mul),
                                 out_dtype=grad.dtype, use_fast_accum=True)
    return fp8_block_mm(d_pre8, d_pre8_scale, w_in_blocks, w_in_block_scale, x.dtype), grad_w_in, grad_w_out


def _mlp_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:3], output[1])  # x, w_in, w_out (bf16) and post


def _mlp_backward(ctx, grad, _):
    x, w_in, w_out, post = ctx.saved_tensors
    return mlp_grads(grad.contiguous(), x, w_in, w_out, post)


relu_square_mlp_op.register_autograd(_mlp_backward, setup_context=_mlp_setup)


@torch.library.custom_op("nanogpt::relu_square_mlp_fp8", mutates_args=())
def relu_square_mlp_fp8_op(x: torch.Tensor, w_in: torch.Tensor, w_out: torch.Tensor, x8: torch.Tensor,
                           w_in8: torch.Tensor, w_scale: torch.Tensor, fp8_backward: bool = False,
                           w_out_blocks: torch.Tensor | None = None, w_out_block_scale: torch.Tensor | None = None,
                           w_in_t_blocks: torch.Tensor | None = None, w_in_t_block_scale: torch.Tensor | None = None,
                           w_out8: torch.Tensor | None = None, w_out_scale: torch.Tensor | None = None,
                           fp8_dw: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """relu_square_mlp_op whose first matmul reads x8 = e4m3(x) and w_in8 = e4m3(w_in / w_scale) (0-d fp32), and
    whose second reads post in e4m3 over 1x128 row-block scales when w_out's blocks and their scales
    (fp8_weight_blocks(w_out.T)) are given. The backward reads x, w_in, w_out and post; with fp8_backward its d_pre
    and dx matmuls run in FP8 (row scales for the gradient, block scales for d_pre), dW_in and dW_out stay bf16,
    over the weights' copies given here (w_in_t_blocks and w_out8 with their scales: mlp_fp8_weights) or, without
    them, made by the backward; with fp8_dw too (blocks on), dW_in and dW_out in FP8 (mlp_grads_fp8). Returns the
    output, post and (with fp8_dw) the amax of each row of post / 448, which that backward reads."""
    assert (w_out_blocks is None) == (w_out_block_scale is None), "w_out_blocks and w_out_block_scale go together"
    assert not fp8_dw or (fp8_backward and w_out_blocks is not None), "fp8_dw needs fp8_backward and w_out's blocks"
    if w_out_blocks is None:
        post = matmul_relu_square_triton(x8, w_in8, scale=w_scale, out_dtype=x.dtype)
        return post @ w_out, post, post.new_empty(0, dtype=torch.float32)  # (fp8_dw needs blocks)
    post, post8, post_scale = matmul_relu_square_triton(x8, w_in8, scale=w_scale, out_dtype=x.dtype, fp8_out=True)
    post_rows = post_scale.amax(0) if fp8_dw else post_scale.new_empty(0)
    return fp8_block_mm(post8, post_scale, w_out_blocks, w_out_block_scale, x.dtype), post, post_rows


@relu_square_mlp_fp8_op.register_fake
def _(x, w_in, w_out, x8, w_in8, w_scale, fp8_backward=False, w_out_blocks=None, w_out_block_scale=None,
      w_in_t_blocks=None, w_in_t_block_scale=None, w_out8=None, w_out_scale=None, fp8_dw=False):
    rows = x.size(0) if fp8_dw else 0
    return x.new_empty(x.shape), x.new_empty(x.size(0), w_in.size(0)), x.new_empty(rows, dtype=torch.float32)


def _mlp_fp8_setup(ctx, inputs, output):
    backward_weights = [t for t in inputs[9:13] if t is not None]  # w_in_t_blocks, w_out8 and their scales
    assert len(backward_weights) in (0, 4), "w_in_t_blocks, w_out8 and their scales go together"
    # x, w_in, w_out, post, post's row amaxes and those copies
    ctx.save_for_backward(*inputs[:3], *output[1:], *backward_weights)
    ctx.fp8_backward, ctx.fp8_dw = inputs[6], inputs[13]


def _mlp_fp8_backward(ctx, grad, *_):
    x, w_in, w_out, post, post_rows, *weights8 = ctx.saved_tensors
    grad = grad.contiguous()
    # Copies the forward was not given are made here, not in the forward: only the backward reads them, and saved
    # they would add to the peak memory. Under torch.compile this code is traced into the backward graph, where the
    # casts fuse into the kernels making grad and the weights. dx = d_pre @ w_in: the right operand is w_inᵀ.
    nones = [None] * 11  # the FP8 copies, scales and flags get none
    if not ctx.fp8_backward:
        return *mlp_grads(grad, x, w_in, w_out, post), *nones
    w_in_t_blocks, w_in_t_scale, w_out8, w_out_scale = weights8 or (*fp8_weight_blocks(w_in.T), *fp8_tensor(w_out))
    fp8 = (w_in_t_blocks, w_in_t_scale, *fp8_rows(grad), w_out8, w_out_scale)
    if ctx.fp8_dw:
        return *mlp_grads_fp8(grad, x, w_out, post, post_rows, *fp8), *nones
    return *mlp_grads(grad, x, w_in, w_out, post, *fp8), *nones


relu_square_mlp_fp8_op.register_autograd(_mlp_fp8_backward, setup_context=_mlp_fp8_setup)


def mlp_fp8_weights(w_in: torch.Tensor, w_out: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Every FP8 copy of one layer's weights that relu_square_mlp_fp8 with blocks reads: e4m3 w_in and its scale
    (the forward's first matmul), w_outᵀ's 128x128 blocks and their scales (its second), w_inᵀ's (the backward's
    dx) and e4m3 w_out and its scale (the backward's d_pre). Stacks of layers (L, 4D, D) give stacks of each."""
    return (*fp8_tensor(w_in), *fp8_weight_blocks(w_out.mT), *fp8_weight_blocks(w_in.mT), *fp8_tensor(w_out))


def relu_square_mlp_fp8(x: torch.Tensor, w_in: torch.Tensor, w_out: torch.Tensor,
                        w8: tuple[torch.Tensor, ...] | None = None, *, blocks: bool, dw: bool = False) -> torch.Tensor:
    """The MLP of x (T, D) with its first matmul in FP8, and with blocks (D a multiple of 128, H of 512, T of 4) its
    second and the backward's d_pre and dx too, over block and row scales; under torch.compile the casts fuse into the
    kernels making x, the gradient and the weights. w8 (with blocks): mlp_fp8_weights(w_in, w_out) made beforehand
    (once per optimizer step: the weights do not change between its micro-batches), else the casts are made here.
    dw (with blocks, T a multiple of 16): the weight gradients in FP8 too (mlp_grads_fp8)."""
    if w8 is None:  # out = post @ w_out: the right operand is w_outᵀ
        w8 = (*fp8_tensor(w_in), *(fp8_weight_blocks(w_out.T) if blocks else ()))
    assert blocks or len(w8) == 2, "the weights' block copies go with blocks"
    assert blocks or not dw, "dw (the weight gradients in FP8) goes with blocks"
    w8 = (*w8, *[None] * (8 - len(w8)))  # the copies not given: made by the backward
    return relu_square_mlp_fp8_op(x, w_in, w_out, x.to(E4M3), *w8[:2], blocks, *w8[2:], dw)[0]


def relu_square_mlp_reference(x, w_in, w_out):
    return torch.relu(x @ w_in.T).square() @ w_out


def relu_square_mlp(x, w_in, w_out):
    """The MLP: x (..., D) -> (..., D); CUDA runs the fused kernel's op, CPU the reference."""
    if not x.is_cuda:
        return relu_square_mlp_reference(x, w_in, w_out)
    return relu_square_mlp_op(x.reshape(-1, x.size(-1)), w_in, w_out)[0].view(x.shape)
