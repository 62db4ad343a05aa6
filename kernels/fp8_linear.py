"""A linear layer on RMS-normed rows with its forward matmul in FP8: y = x @ wᵀ from e4m3 copies of x and w, the
backward in the inputs' dtype.

FP8 projections by @YouJiacheng (LM head, MLP) and @Glitchfix (packed QKV) in modded-nanogpt
(https://github.com/KellerJordan/modded-nanogpt); this is an independent implementation.

    forward   y = w_scale · (x8 @ w8ᵀ)      x8 = e4m3(x), unscaled; w8 = e4m3(w / w_scale), w_scale = amax|w| / 448
    backward  dx = g @ w,  dw = gᵀ x        in x's dtype, from x and w (the FP8 copies are dropped after the forward)

x must have RMS-normed rows (the model's norm(x)): no entry exceeds sqrt(D), far inside e4m3's 448, so x needs no
scale and no reduction over the activations. cuBLASLt's FP8 matmul wants both operands with the reduced dimension
contiguous, which x (T, K) and w (N, K) already are: no transposed copy. Under torch.compile the casts fuse into
the kernels that make x and w.
"""
import torch
import torch.nn.functional as F
from torch import Tensor

E4M3 = torch.float8_e4m3fn
E4M3_MAX = torch.finfo(E4M3).max  # 448
FP8_BLOCK = 128  # cuBLASLt's blockwise FP8 scaling: one scale per 1x128 block of A's rows, per 128x128 block of B


def scale_of(amax: Tensor) -> Tensor:
    """amax / 448 in fp32, never zero or subnormal: values over it fill e4m3's range."""
    return (amax.float() / E4M3_MAX).clamp_min(torch.finfo(torch.float32).tiny)


def amax_scale(t: Tensor) -> Tensor:
    """amax(|t|) / 448 over t's last two dimensions (..., N, K), fp32 of shape (...): t / scale fills e4m3's range."""
    return scale_of(t.abs().amax((-2, -1)))


def fp8_rows(t: Tensor) -> tuple[Tensor, Tensor]:
    """t (M, K) in e4m3 over one scale per row, amax(|row|) / 448, and those scales as an (M,) fp32 tensor."""
    scale = scale_of(t.abs().amax(-1))
    return (t / scale[:, None]).to(E4M3), scale


def fp8_tensor(t: Tensor) -> tuple[Tensor, Tensor]:
    """e4m3 t / scale and that scale (amax_scale(t)): one scale for each matrix of t (..., N, K), 0-d for one. A
    stack's scales lie 16 bytes apart: cuBLASLt refuses a scale pointer off a 16-byte boundary (NOT_SUPPORTED)."""
    scale = amax_scale(t)
    t8 = (t / scale[..., None, None]).to(E4M3)
    return t8, (scale if scale.dim() == 0 else F.pad(scale[..., None], (0, 3))[..., 0])


def fp8_operands(x: Tensor, w: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """e4m3 x (unscaled: x must have RMS-normed rows), e4m3 w / scale, and that scale (amax_scale(w))."""
    return x.to(E4M3), *fp8_tensor(w)


@torch.library.custom_op("nanogpt::fp8_linear", mutates_args=())
def fp8_linear_op(x: Tensor, w: Tensor, x8: Tensor, w8: Tensor, w_scale: Tensor) -> Tensor:
    """x (T, K), w (N, K) -> x @ wᵀ (T, N) in x's dtype, computed from x8 = e4m3(x) and w8 = e4m3(w / w_scale) (0-d
    fp32); x and w are what the backward reads."""
    # x8 carries no scale (hence the ones). Fast accumulation: faster (records/enwiki-124/2026-11-26_fp8-mlp-down-
    # projection), its error far below the operands' e4m3 rounding (tests/test_fp8_linear.py)
    return torch._scaled_mm(x8, w8.T, scale_a=w_scale.new_ones(()), scale_b=w_scale, out_dtype=x.dtype,
                            use_fast_accum=True)


@fp8_linear_op.register_fake
def _(x, w, x8, w8, w_scale):
    return x.new_empty(x.size(0), w.size(0))


def _setup(ctx, inputs, output):
    x, w = inputs[:2]
    ctx.save_for_backward(x, w)


def _backward(ctx, grad):
    x, w = ctx.saved_tensors
    return grad @ w, grad.T @ x, None, None, None


fp8_linear_op.register_autograd(_backward, setup_context=_setup)


def fp8_linear(x: Tensor, w: Tensor, w8: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """F.linear(x, w) with the forward in FP8, for x (..., K) with RMS-normed rows and w (N, K); K and N multiples
    of 16 (cuBLASLt's FP8 rows). w8: fp8_tensor(w) made beforehand (once per optimizer step), else cast here."""
    rows = x.reshape(-1, x.size(-1))
    x8, w8, w_scale = fp8_operands(rows, w) if w8 is None else (rows.to(E4M3), *w8)
    return fp8_linear_op(rows, w, x8, w8, w_scale).view(*x.shape[:-1], w.size(0))


def fp8_linear_reference(x8: Tensor, w8: Tensor, w_scale: Tensor) -> Tensor:
    """What fp8_linear_op computes from its FP8 operands, in fp64: exact products and sums."""
    return x8.double() @ w8.double().T * w_scale.double()


# Blockwise scaling (the MLP's out = post @ w_out and dx = d_pre @ w_in with --fp8_body): post and the gradient have
# no bound to scale by, so each 1x128 block of a row gets its own scale (written by the kernel that makes it, no pass
# over it), and each 128x128 block of the weight its own.

def fp8_weight_blocks(w: Tensor) -> tuple[Tensor, Tensor]:
    """w (..., N, K), N and K multiples of 128 (a transposed view too), as fp8_block_mm's right operand: e4m3 (..., N,
    K) of w over the amax(|block|) / 448 of each 128x128 block, and those scales as a (..., N / 128, K / 128) fp32
    tensor (leading dimensions: a stack of matrices, each on its own)."""
    *lead, N, K = w.shape
    assert N % FP8_BLOCK == 0 and K % FP8_BLOCK == 0, f"128x128 blocks need both sizes multiples of 128; got {N}, {K}"
    blocks = w.float().reshape(*lead, N // FP8_BLOCK, FP8_BLOCK, K // FP8_BLOCK, FP8_BLOCK)
    scale = scale_of(blocks.abs().amax((-3, -1)))
    return (blocks / scale[..., None, :, None]).to(E4M3).reshape(*lead, N, K).contiguous(), scale


def fp8_block_mm(a8: Tensor, a_scale: Tensor, b8: Tensor, b_scale: Tensor, out_dtype: torch.dtype) -> Tensor:
    """a @ bᵀ (M, N) for a = a8 (M, K) times its 1x128 row-block scales a_scale (K / 128, M) contiguous, and b = b8
    (N, K) times its 128x128 block scales b_scale (N / 128, K / 128). cuBLASLt reads the scales' rows at 16-byte
    multiples: M must be a multiple of 4, K of 512 (with other strides it returns wrong sums, no error).
    CUDA: cuBLASLt (no fast accumulation for blockwise scales); the CPU, which has no blockwise _scaled_mm, gets the
    reference's result."""
    (M, K), N = a8.shape, b8.size(0)
    shapes = [tuple(t.shape) for t in (a8, a_scale, b8, b_scale)]
    assert shapes[1:] == [(K // FP8_BLOCK, M), (N, K), (N // FP8_BLOCK, K // FP8_BLOCK)], \
        f"need a8 (M, K), a_scale (K/128, M), b8 (N, K), b_scale (N/128, K/128); got {shapes}"
    assert a_scale.is_contiguous() and b_scale.is_contiguous() and M % 4 == 0 and K % 512 == 0, \
        f"blockwise FP8 needs contiguous scales, M % 4 == 0 and K % 512 == 0; got (M, K) = {(M, K)}"
    if not a8.is_cuda:
        return fp8_block_mm_reference(a8, a_scale, b8, b_scale).to(out_dtype)
    return torch._scaled_mm(a8, b8.T, scale_a=a_scale.T, scale_b=b_scale.T, out_dtype=out_dtype)


def fp8_block_mm_reference(a8: Tensor, a_scale: Tensor, b8: Tensor, b_scale: Tensor) -> Tensor:
    """fp8_block_mm in fp64: each operand times its blocks' scales, then one exact matmul."""
    a = a8.double() * a_scale.double().T.repeat_interleave(FP8_BLOCK, 1)
    b = b8.double() * b_scale.double().repeat_interleave(FP8_BLOCK, 0).repeat_interleave(FP8_BLOCK, 1)
    return a @ b.T
