"""kernels/transpose.py: Triton transpose-copy / transpose-add against PyTorch.

Run: python -m pytest -q tests/test_transpose.py   (CPU: Triton interpreter; GPU: compiled kernels)
"""
import pytest
import torch

from kernels.configs import SM90
from kernels.transpose import (TRANSPOSE_CONFIGS, TransposeConfig, transpose_add, transpose_add_reference,
                               transpose_add_triton, transpose_copy, transpose_copy_reference, transpose_copy_triton,
                               transposed_op)
from tests.utils import DEVICE, GPU_ONLY, assert_close


# (dtype, atol, rtol) for transpose_add, whose fp32 sum is rounded once to dtype (half an ulp:
# 2^-24, 2^-11, 2^-8 relative). transpose_copy must be bit-exact for every dtype.
DTYPES = [
    pytest.param((torch.float32, 1e-6, 1e-6), id="fp32"),
    pytest.param((torch.float16, 1e-3, 1e-3), id="fp16"),
    pytest.param((torch.bfloat16, 1e-2, 1e-2), id="bf16", marks=GPU_ONLY),
]
SHAPES = [
    (37, 1001), (1, 1), (129, 65), (1, 300), (300, 1),
    pytest.param((768, 50304), marks=GPU_ONLY, id="lm_head"),  # LM head (D, V) -> embedding (V, D)
    pytest.param((50304, 768), marks=GPU_ONLY, id="embed"),    # embedding grad -> LM head grad
]


def _poisoned(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device=DEVICE)


@pytest.mark.parametrize("case", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_transpose_copy(shape, case):
    dtype, _, _ = case
    src = torch.randn(shape, device=DEVICE).to(dtype)
    dst = _poisoned(shape[::-1], dtype)
    transpose_copy_triton(src, dst)
    assert_close(dst, src.T, atol=0, rtol=0, name="transpose_copy")


@pytest.mark.parametrize("case", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_transpose_add(shape, case):
    dtype, atol, rtol = case
    src = torch.randn(shape, device=DEVICE).to(dtype)
    dst = torch.randn(shape[::-1], device=DEVICE).to(dtype)
    expected = dst.double() + src.T.double()
    transpose_add_triton(src, dst)
    assert_close(dst, expected, atol=atol, rtol=rtol, name="transpose_add")


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.uint8], ids=str)
@pytest.mark.parametrize("shape", [(37, 1001), (1, 300), (257, 129),
                                   pytest.param((4096, 50304), marks=GPU_ONLY, id="fp8_logit_grads")])
def test_transpose_copy_bytes(shape, dtype):
    """1-byte types (the FP8 LM head's operands) are copied bit for bit; NaN bytes poison dst."""
    bits = torch.randint(0, 256, shape, dtype=torch.uint8, device=DEVICE)
    src = bits.view(dtype)
    dst = torch.full(shape[::-1], 0x7F, dtype=torch.uint8, device=DEVICE).view(dtype)  # 0x7F: NaN in both FP8 types
    out = transpose_copy_triton(src, dst)
    assert out is dst and out.dtype == dtype
    assert torch.equal(dst.view(torch.uint8), bits.T), "transpose_copy of bytes is not exact"


@pytest.mark.parametrize("shape", [(48, 768), (1, 300), pytest.param((49152, 768), marks=GPU_ONLY, id="fp8_dw")])
def test_transposed_op(shape):
    """The op (the FP8 weight gradients' K-major operands under torch.compile): a new (N, M) tensor, bit for bit the
    transpose of e4m3 src, under its registration (fake outputs, torch.compile's dispatch)."""
    bits = torch.randint(0, 256, shape, dtype=torch.uint8, device=DEVICE)
    out = transposed_op(bits.view(torch.float8_e4m3fn))
    assert out.dtype == torch.float8_e4m3fn and out.is_contiguous() and torch.equal(out.view(torch.uint8), bits.T)
    # (the compiled output is compared by value: no NaN bytes)
    src = torch.randn(shape, device=DEVICE).to(torch.float8_e4m3fn)
    torch.library.opcheck(transposed_op, (src,), test_utils=("test_faketensor", "test_aot_dispatch_dynamic"))


@pytest.mark.parametrize("dtype", [torch.float16, pytest.param(torch.bfloat16, marks=GPU_ONLY)], ids=str)
def test_transpose_add_fp32_src(dtype):
    """An fp32 src (a gradient accumulator) folds into a lower-precision dst, rounded once."""
    src = torch.randn(129, 65, device=DEVICE)
    dst = torch.randn(65, 129, device=DEVICE).to(dtype)
    expected = (dst.double() + src.T.double()).to(dtype)
    transpose_add_triton(src, dst)
    assert_close(dst, expected, atol=0, rtol=2 ** -7 if dtype == torch.bfloat16 else 2 ** -10, name="transpose_add")
    with pytest.raises(AssertionError, match="dtype mismatch"):
        transpose_add_triton(src.to(dtype), torch.zeros(65, 129, device=DEVICE))  # low-precision src, fp32 dst


def test_transpose_add_rejects_bytes():
    src = torch.zeros(4, 6, dtype=torch.float8_e5m2, device=DEVICE)
    with pytest.raises(AssertionError, match="unsupported dtype"):
        transpose_add_triton(src, torch.zeros(6, 4, dtype=src.dtype, device=DEVICE))


@pytest.mark.parametrize("config", [
    TransposeConfig(block_m=32, block_n=64, num_warps=4, ctas_per_sm=0),  # one program per tile
    TransposeConfig(block_m=16, block_n=32, num_warps=2, ctas_per_sm=1),  # few programs, many tiles each
    TRANSPOSE_CONFIGS[SM90][1],  # the H100's 1-byte tiles: taller than src, every tile ragged
], ids=["grid_per_tile", "persistent", "sm90_bytes"])
def test_grid_variants(config):
    """Both grid modes cover every tile, including ragged edge tiles."""
    src = torch.randn(70, 130, device=DEVICE)
    dst = _poisoned((130, 70), src.dtype)
    transpose_copy_triton(src, dst, config=config)
    assert_close(dst, src.T, atol=0, rtol=0, name="transpose_copy")
    expected = dst.double() + src.T.double()
    transpose_add_triton(src, dst, config=config)
    assert_close(dst, expected, atol=1e-6, rtol=1e-6, name="transpose_add")


def test_cpu_dispatch_uses_reference():
    src, dst = torch.randn(5, 7), torch.randn(7, 5)
    expected = transpose_add_reference(src, dst.clone())
    assert torch.equal(transpose_add(src, dst), expected)
    assert torch.equal(transpose_copy(src, dst), transpose_copy_reference(src, torch.empty(7, 5)))


@pytest.mark.parametrize("src_shape, dst_shape, dtypes, match", [
    ((4, 6), (4, 6), (torch.float32, torch.float32), "dst must be"),
    ((2, 4, 6), (6, 4), (torch.float32, torch.float32), "2-D"),
    ((4, 6), (6, 4), (torch.float32, torch.float16), "dtype mismatch"),
])
def test_wrapper_rejects_bad_inputs(src_shape, dst_shape, dtypes, match):
    src = torch.randn(src_shape, dtype=dtypes[0], device=DEVICE)
    dst = torch.randn(dst_shape, dtype=dtypes[1], device=DEVICE)
    with pytest.raises(AssertionError, match=match):
        transpose_copy_triton(src, dst)
