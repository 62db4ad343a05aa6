"""Fused ReLU² MLP: the custom op training runs (forward and all three input gradients, through its registered
autograd) vs its fp64 PyTorch reference.

    python -m pytest -q tests/test_relu_square.py

On the CPU the op's Triton kernel runs through the interpreter (fp32/fp16, small shapes); with CUDA the same
tests add bf16 and the model's shapes (shown as skipped without it).
"""
import pytest
import torch
import triton

from kernels.configs import SM90, device_key
from kernels.fp8_linear import (E4M3, FP8_BLOCK, fp8_block_mm, fp8_operands, fp8_rows, fp8_tensor,
                                fp8_weight_blocks)
from kernels.relu_square import (HOPPER_TRITON, MLPConfig, hopper_backward_applies, matmul_relu_square_triton,
                                 mlp_fp8_weights, relu_square_backward_hopper, relu_square_mlp, relu_square_mlp_fp8,
                                 relu_square_d_pre_op, relu_square_mlp_fp8_op, relu_square_mlp_op,
                                 relu_square_mlp_reference)
from tests.utils import DEVICE, GPU_ONLY, HAS_CUDA, assert_close, rel_error

CPU_ONLY = pytest.mark.skipif(HAS_CUDA, reason="fp32 dots run as tf32 on the GPU: the CPU case checks exact math")
# (T, D, hidden H)
SHAPES = [(1, 64, 96), (7, 40, 264), (10, 64, 128), (129, 768, 384),
          pytest.param(1000, 768, 3072, marks=GPU_ONLY), pytest.param(16384, 768, 3072, marks=GPU_ONLY)]
# (dtype, atol as a fraction of the reference's largest magnitude, rtol)
DTYPES = [pytest.param(torch.float32, 1e-5, 1e-5, marks=CPU_ONLY), (torch.float16, 4e-3, 4e-3),
          pytest.param(torch.bfloat16, 2e-2, 2e-2, marks=GPU_ONLY)]


def check(actual, expected, atol, rtol, name):
    assert actual.dtype == expected.dtype or expected.dtype == torch.float64, name
    assert_close(actual, expected, atol * expected.abs().max().item(), rtol, name)


@pytest.mark.parametrize("tokens,dim,hidden", SHAPES)
@pytest.mark.parametrize("dtype,atol,rtol", DTYPES)
def test_mlp_op_forward_backward(tokens, dim, hidden, dtype, atol, rtol, poison_empty):
    x = torch.randn(tokens, dim, device=DEVICE).to(dtype).requires_grad_()
    # the weights are slices of one bank, as in the model; gradients must land in it
    w_in = (torch.rand(hidden, dim, device=DEVICE) * 2 - 1) / dim**0.5
    w_out = torch.randn(hidden, dim, device=DEVICE) / hidden**0.5
    bank = torch.stack([w_in, w_out]).to(dtype).requires_grad_()
    w_in, w_out = bank.unbind(0)
    out, post = relu_square_mlp_op(x, w_in, w_out)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)

    ref_x, ref_bank = x.detach().double().requires_grad_(), bank.detach().double().requires_grad_()
    ref_out = relu_square_mlp_reference(ref_x, *ref_bank.unbind(0))
    ref_out.backward(grad_out.double())
    check(out, ref_out, atol, rtol, "out")
    check(post, torch.relu(ref_x @ ref_bank[0].T).square().detach(), atol, rtol, "post (saved for backward)")
    check(x.grad, ref_x.grad, atol, rtol, "grad x")
    check(bank.grad[0], ref_bank.grad[0], atol, rtol, "grad w_in")
    check(bank.grad[1], ref_bank.grad[1], atol, rtol, "grad w_out")


@pytest.mark.parametrize("fp8", [False, pytest.param(True, marks=GPU_ONLY)])
def test_nan_in_the_input_reaches_its_row(fp8, poison_empty):
    """A NaN in x makes its row of post and of the output NaN, as torch.relu keeps it, and no other row. (The
    interpreter reads e4m3's NaN as a number: FP8 on the GPU only.)"""
    dtype = torch.bfloat16 if HAS_CUDA else torch.float16
    x = torch.randn(9, 128, device=DEVICE).to(dtype)
    x[4, 3] = float("nan")
    w_in, w_out = (torch.randn(2, 256, 128, device=DEVICE) / 11).to(dtype).unbind(0)
    out, post = (relu_square_mlp_fp8_op(x, w_in, w_out, *fp8_operands(x, w_in)) if fp8
                 else relu_square_mlp_op(x, w_in, w_out))[:2]
    for name, t in [("post", post), ("output", out)]:
        assert t[4].isnan().all() and not t[[0, 1, 2, 3, 5, 6, 7, 8]].isnan().any(), f"NaN lost or spread in {name}"


def test_public_dispatch_keeps_batched_shapes():
    """relu_square_mlp runs the op on CUDA (any leading dims) and the reference on the CPU; both agree."""
    x, w_in, w_out = (torch.randn(s, device=DEVICE) / 8 for s in [(3, 11, 64), (128, 64), (128, 64)])
    dtype = torch.bfloat16 if HAS_CUDA else torch.float32
    x, w_in, w_out = x.to(dtype), w_in.to(dtype), w_out.to(dtype)
    ref = relu_square_mlp_reference(x.double(), w_in.double(), w_out.double())
    check(relu_square_mlp(x, w_in, w_out), ref, 2e-2, 2e-2, "out")


# (T, D, H, blocks): FP8 rows are D and H bytes, which TMA needs in multiples of 16; the block-scaled down-projection
# and dx need D a multiple of 128, H of 512, T of 4
FP8_CASES = [(1, 64, 96, False), (7, 48, 272, False), (129, 768, 384, False), (4, 128, 512, True),
             (8, 256, 1024, True), (132, 768, 512, True), pytest.param(1000, 768, 3072, True, marks=GPU_ONLY),
             pytest.param(16384, 768, 3072, True, marks=GPU_ONLY)]


@pytest.mark.parametrize("tokens,dim,hidden,blocks", FP8_CASES)
@pytest.mark.parametrize("dtype", [torch.float16, pytest.param(torch.bfloat16, marks=GPU_ONLY)])
def test_fp8_mlp_op_forward_backward(tokens, dim, hidden, blocks, dtype, poison_empty):
    """relu_square_mlp_fp8 (--fp8_body): the forward's first matmul on e4m3 copies of x and w_in / amax-scale, the
    backward the unquantized formulas from x, w_in, w_out and that forward's post; with blocks the second matmul is
    the blockwise FP8 one of the kernel's e4m3 post and w_out's blocks, d_pre's matmul reads e4m3 copies of the
    gradient (row scales) and w_out (one scale), and dx is that of the kernel's e4m3 d_pre and w_in's blocks.
    Reference: the same roundings in fp64.
    (fp16 on the CPU: the Triton interpreter mishandles the bf16 backward.)"""
    x = (torch.randn(tokens, dim, device=DEVICE) * 2).to(dtype).requires_grad_()
    bank = torch.stack([(torch.rand(hidden, dim, device=DEVICE) * 2 - 1) / dim**0.5,
                        torch.randn(hidden, dim, device=DEVICE) / hidden**0.5]).to(dtype).requires_grad_()
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = relu_square_mlp_fp8(x, *bank.unbind(0), blocks=blocks)
    # the backward's FP8 copies (w_in's blocks) are made there: saved, they would add to the peak memory
    assert all(t.element_size() > 1 for t in saved), f"the forward saved {[t.dtype for t in saved]}"
    grad_out = torch.randn_like(out)
    out.backward(grad_out)

    x64, w_in, w_out, g = x.detach().double(), bank[0].detach().double(), bank[1].detach().double(), grad_out.double()
    x8, w8, scale = fp8_operands(x.detach(), bank[0].detach())
    assert x8.dtype == w8.dtype == torch.float8_e4m3fn and scale == bank[0].detach().abs().max().float() / 448
    pre = x8.double() @ (w8.double() * scale.double()).T
    post = torch.relu(pre).square()
    d_pre = (g @ w_out.T) * 2 * torch.relu(pre)
    post_op = relu_square_mlp_fp8_op(x.detach(), *bank.detach().unbind(0), x8, w8, scale)[1]
    check(post_op, post, 2e-2, 2e-2, "post (saved for backward)")
    if blocks:  # the kernel's e4m3 post (tested below) times w_out's blocks
        _, post8, post_scale = matmul_relu_square_triton(x8, w8, scale=scale, out_dtype=dtype, fp8_out=True)
        expected = fp8_block_mm(post8, post_scale, *fp8_weight_blocks(bank[1].detach().T), dtype)
        assert torch.equal(out, expected), "out: not the FP8 down-projection"
    else:
        check(out, post @ w_out, 2e-2, 2e-2, "out")
    if blocks:  # d_pre's matmul from e4m3 copies of grad (row scales) and w_out (one scale)
        (g8, g_scale), (w_out8, w_out_scale) = fp8_rows(grad_out), fp8_tensor(bank[1].detach())
        d_pre_fp8 = (g8.double() * g_scale.double()[:, None]) @ (w_out8.double() * w_out_scale.double()).T
        d_pre_fp8 = d_pre_fp8 * 2 * torch.relu(pre)
        assert (d_pre_fp8 - d_pre).norm() <= 0.1 * d_pre.norm(), "FP8 d_pre far from the exact one"
        # the op's dx is that of the kernel's e4m3 d_pre (tested below) and w_in's blocks, within FP8's error
        _, d_pre8, d_pre_scale = matmul_relu_square_triton(g8, w_out8, post=post_op, scale=w_out_scale,
                                                           row_scale=g_scale, out_dtype=dtype, fp8_out=True)
        w_blocks = fp8_weight_blocks(bank[0].detach().T)
        assert torch.equal(x.grad, fp8_block_mm(d_pre8, d_pre_scale, *w_blocks, dtype)), "grad x: not the FP8 dx"
        exact = d_pre @ w_in
        assert (x.grad.double() - exact).norm() <= 0.1 * exact.norm(), "FP8 grad x far from the exact one"
        d_pre = d_pre_fp8
    else:
        check(x.grad, d_pre @ w_in, 2e-2, 2e-2, "grad x")
    check(bank.grad[0], d_pre.T @ x64, 2e-2, 2e-2, "grad w_in")
    check(bank.grad[1], post.T @ g, 2e-2, 2e-2, "grad w_out")
    # the FP8 forward stays within e4m3's error of the bf16 MLP (3 mantissa bits on each operand)
    exact = relu_square_mlp_reference(x64, w_in, w_out)
    assert (out.double() - exact).norm() <= 0.1 * exact.norm(), "FP8 output far from the exact MLP"


@pytest.mark.parametrize("tokens,dim,hidden", [(16, 128, 512), (144, 256, 1024),
                                               pytest.param(1008, 768, 3072, marks=GPU_ONLY),
                                               pytest.param(16384, 768, 3072, marks=GPU_ONLY)])
@pytest.mark.parametrize("dtype", [torch.float16, pytest.param(torch.bfloat16, marks=GPU_ONLY)])
def test_fp8_weight_gradients(tokens, dim, hidden, dtype, poison_empty):
    """dw (the trainer's --fp8_body on CUDA): the output and grad x bit for bit those without; grad w_in and w_out
    from the FP8 products within FP8's error of the exact gradients of the same forward and e4m3 d_pre (fp64),
    and nothing in e4m3 saved by the forward. x has RMS-normed rows, as the model's MLP input."""
    x = torch.randn(tokens, dim, device=DEVICE)
    x = (x / x.square().mean(1, keepdim=True).sqrt()).to(dtype)
    bank = torch.stack([(torch.rand(hidden, dim, device=DEVICE) * 2 - 1) / dim**0.5,
                        torch.randn(hidden, dim, device=DEVICE) / hidden**0.5]).to(dtype)
    sizes = torch.exp2(torch.randint(-4, 4, (tokens, 1), device=DEVICE).float())  # gradients' rows differ in size
    grad_out = (torch.randn(tokens, dim, device=DEVICE) * sizes).to(dtype)

    def run(dw):
        leaf, weights = x.clone().requires_grad_(), bank.clone().requires_grad_()
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
            out = relu_square_mlp_fp8(leaf, *weights.unbind(0), blocks=True, dw=dw)
        assert all(t.element_size() > 1 for t in saved), f"the forward saved {[t.dtype for t in saved]}"
        out.backward(grad_out)
        return out.detach(), leaf.grad, weights.grad

    (out, grad_x, grads_bf16), (out_dw, grad_x_dw, grads) = run(False), run(True)
    assert torch.equal(out, out_dw) and torch.equal(grad_x, grad_x_dw), "dw changed the output or grad x"
    x8, w8, scale = fp8_operands(x, bank[0])
    pre = x8.double() @ (w8.double() * scale.double()).T
    (g8, g_scale), (w_out8, w_out_scale) = fp8_rows(grad_out), fp8_tensor(bank[1])
    d_pre = (g8.double() * g_scale.double()[:, None]) @ (w_out8.double() * w_out_scale.double()).T * 2 * pre.relu()
    # e4m3's 3 mantissa bits: ~5% on a GPU. The interpreter's e4m3 cast also halves the entries it rounds up to a power
    # of two (assert_e4m3_near): on the CPU up to 0.15 in 300 draws of 16 tokens; a wrong scale or operand is ~1
    tol = 0.1 if HAS_CUDA else 0.25
    for name, got, bf16, exact in [("grad w_in", grads[0], grads_bf16[0], d_pre.T @ x.double()),
                                   ("grad w_out", grads[1], grads_bf16[1], pre.relu().square().T @ grad_out.double())]:
        assert got.dtype == dtype and torch.isfinite(got).all(), name
        assert rel_error(got, exact) < tol, f"{name}: FP8 far from the exact gradient"
        assert rel_error(got, exact) > rel_error(bf16, exact), f"{name}: not the FP8 product (as exact as 16 bits)"


@pytest.mark.parametrize("dtype", [torch.float16, pytest.param(torch.bfloat16, marks=GPU_ONLY)])
def test_fp8_mlp_reads_the_weight_copies_it_is_given(dtype, poison_empty):
    """With w8 = mlp_fp8_weights(w_in, w_out), made once per optimizer step by the trainer, the MLP gives its own
    casts' output and gradients bit for bit, and it reads those copies: a scale doubled quadruples the output through
    w_in's (post = relu(pre)²), and doubles grad x through w_inᵀ's blocks or w_out's (d_pre's matmul), within
    rounding (fp16's subnormals)."""
    x = torch.randn(132, 128, device=DEVICE).to(dtype)
    bank = torch.stack([(torch.rand(512, 128, device=DEVICE) * 2 - 1) / 128**0.5,
                        torch.randn(512, 128, device=DEVICE) / 512**0.5]).to(dtype)
    grad_out = torch.randn_like(x)

    def run(w8):
        leaf = x.clone().requires_grad_()
        out = relu_square_mlp_fp8(leaf, *bank.unbind(0), w8, blocks=True)
        out.backward(grad_out)
        return out.detach(), leaf.grad

    own, w8 = run(None), mlp_fp8_weights(*bank.unbind(0))
    assert all(torch.equal(a, b) for a, b in zip(own, run(w8))), "the given copies are not the MLP's own casts"

    def doubled(i):
        return (*w8[:i], w8[i] * 2, *w8[i + 1:])
    check(run(doubled(1))[0], own[0] * 4, 1e-2, 1e-2, "out with w_in's scale doubled")
    check(run(doubled(5))[1], own[1] * 2, 1e-2, 1e-2, "grad x with w_inᵀ's block scales doubled")
    check(run(doubled(7))[1], own[1] * 2, 1e-2, 1e-2, "grad x with w_out's scale doubled")


@GPU_ONLY
def test_fp8_dx_carries_nan(poison_empty):
    """A NaN in the gradient reaches its row of grad x through the e4m3 d_pre and that row's scales, as in the bf16
    path, and no other row. (The interpreter's e4m3 cast turns NaN into a number: GPU only.)"""
    x = torch.randn(8, 128, device=DEVICE, dtype=torch.bfloat16).requires_grad_()
    w_in, w_out = (torch.randn(2, 512, 128, device=DEVICE) / 11).bfloat16().unbind(0)
    out = relu_square_mlp_fp8(x, w_in, w_out, blocks=True)
    grad_out = torch.randn_like(out)
    grad_out[3, 5] = float("nan")
    out.backward(grad_out)
    assert x.grad[3].isnan().all() and not x.grad[[0, 1, 2, 4, 5, 6, 7]].isnan().any()


# (T, H): the kernel's backward writing d_pre in e4m3 too; H a multiple of 128, T of 4
FP8_OUT_SHAPES = [(4, 128), (132, 384), (260, 256), pytest.param(16384, 3072, marks=GPU_ONLY)]


def out8_config(hidden: int, block_n: int) -> MLPConfig:
    """Tiles block_n wide: 128 (one scale block) or 256 (each half a block)."""
    if hidden % block_n:
        pytest.skip(f"{block_n}-wide tiles need H a multiple of {block_n}")
    return MLPConfig(64, block_n, 64, 2, 4)


@pytest.mark.parametrize("tokens,hidden", FP8_OUT_SHAPES)
@pytest.mark.parametrize("dtype", [torch.float16, pytest.param(torch.bfloat16, marks=GPU_ONLY)])
@pytest.mark.parametrize("block_n", [128, 256])
def test_backward_fp8_out(tokens, hidden, dtype, block_n, poison_empty):
    """d_pre unchanged, its scales the amax of each row's 128 entries / 448, its e4m3 copy d_pre / scale rounded to
    nearest; a row of zeros and rows of sizes spanning 2^±6 (fp16's range), as gradients have."""
    sizes = torch.exp2(torch.randint(-6, 6, (tokens, 1), device=DEVICE))
    grad = (torch.randn(tokens, 128, device=DEVICE) * sizes).to(dtype)
    grad[tokens // 2] = 0
    w_out = (torch.randn(hidden, 128, device=DEVICE) / 11).to(dtype)
    post = torch.rand(tokens, hidden, device=DEVICE).square().to(dtype)
    post[:, :FP8_BLOCK // 2] = 0  # ReLU's zeros: half of a block
    config = out8_config(hidden, block_n)
    d_pre, d_pre8, d_scale = matmul_relu_square_triton(grad, w_out, post=post, config=config, fp8_out=True)
    assert torch.equal(d_pre, matmul_relu_square_triton(grad, w_out, post=post, config=config)), "d_pre changed by fp8_out"
    assert d_pre8.dtype == E4M3 and d_scale.shape == (hidden // FP8_BLOCK, tokens) and torch.isfinite(d_scale).all()
    check_fp8_out(d_pre, d_pre8, d_scale, dtype)


def fp8_backward_inputs(tokens: int, dim: int, hidden: int, dtype: torch.dtype):
    """The FP8 backward's operands as training makes them: e4m3 grad rows of sizes spanning 2^±6 (one zero row), each
    over its own scale, e4m3 w_out over one scale, and post with a zero block of columns."""
    sizes = torch.exp2(torch.randint(-6, 6, (tokens, 1), device=DEVICE).float())
    grad = (torch.randn(tokens, dim, device=DEVICE) * sizes).to(dtype)
    grad[tokens // 2] = 0
    (g8, g_scale), (w8, w_scale) = fp8_rows(grad), fp8_tensor((torch.randn(hidden, dim, device=DEVICE) / 11).to(dtype))
    post = torch.rand(tokens, hidden, device=DEVICE).square().to(dtype)
    post[:, :FP8_BLOCK // 2] = 0
    return g8, g_scale, w8, w_scale, post


def fp8_backward_expected(g8, g_scale, w8, w_scale, post):
    """d_pre in fp64: the scaled e4m3 copies' product times 2·sqrt(post)."""
    return (g8.double() * g_scale.double()[:, None]) @ (w8.double() * w_scale.double()).T * 2 * post.double().sqrt()


@pytest.mark.parametrize("tokens,hidden", FP8_OUT_SHAPES)
@pytest.mark.parametrize("dtype", [torch.float16, pytest.param(torch.bfloat16, marks=GPU_ONLY)])
@pytest.mark.parametrize("block_n", [128, 256])
def test_backward_fp8_operands(tokens, hidden, dtype, block_n, poison_empty):
    """d_pre from e4m3 grad rows (each over its own scale) and e4m3 w_out (one scale): the fp64 product of those
    copies times the scales, times 2·sqrt(post); its e4m3 copy as in the bf16 backward. Rows of sizes spanning 2^±6
    and a zero row, as gradients have."""
    g8, g_scale, w8, w_scale, post = fp8_backward_inputs(tokens, 256, hidden, dtype)
    d_pre, d_pre8, d_scale = matmul_relu_square_triton(g8, w8, post=post, config=out8_config(hidden, block_n),
                                                       scale=w_scale, row_scale=g_scale, out_dtype=dtype, fp8_out=True)
    expected = fp8_backward_expected(g8, g_scale, w8, w_scale, post)
    # fp32 accumulation of exact e4m3 products, one rounding to dtype; per row, as the rows' sizes differ
    assert_close(d_pre, expected, 1e-2 * expected.abs().amax(1, keepdim=True).cpu(), 1e-2, "d_pre")
    check_fp8_out(d_pre, d_pre8, d_scale, dtype)


def check_fp8_out(out, out8, out_scale, dtype):
    """out8 and out_scale (fp8_out) against the kernel's own out: each row's 128-entry blocks over their amax / 448,
    rounded to nearest e4m3."""
    tokens, hidden = out.shape
    assert out8.dtype == E4M3 and out_scale.shape == (hidden // FP8_BLOCK, tokens) and torch.isfinite(out_scale).all()
    d = out.double()
    amax = d.abs().view(tokens, -1, FP8_BLOCK).amax(-1).T  # (H / 128, T), from out rounded to dtype
    # out's rounding to dtype: relative, and absolute in fp16's subnormal range (ReLU²'s tiny posts, tiny gradients);
    # a tie rounded down to a power of two is off by exactly eps, and the fp32 division by 448 adds 2^-24
    eps, step = {torch.float16: (2**-11, 2**-24), torch.bfloat16: (2**-8, 0.0)}[dtype]
    assert (out_scale > 0).all(), "a block of zeros needs a non-zero scale (0/0 in the copy)"
    off = (out_scale.double() * 448 - amax).abs() > (eps + 2**-22) * amax + step
    assert not off[amax > 0].any(), "scales: not amax / 448"
    scale = out_scale.double().T.repeat_interleave(FP8_BLOCK, 1)
    # which can move a value across an e4m3 rounding boundary: one e4m3 step either way, or fp16's step
    assert_e4m3_near(out8, (d / scale).to(E4M3), step / scale, "e4m3 copy")


def assert_e4m3_near(got, want, tiny, name):
    """got (e4m3) within one e4m3 step (2^-3) of want (e4m3), or tiny (a 16-bit source's rounding step); no NaN."""
    got, want = got.double(), want.double()

    def off(got):
        return (got - want).abs() > 2**-3 * want.abs() + 2**-9 + tiny
    bad = off(got)
    if not HAS_CUDA:  # the Triton interpreter drops the carry when rounding up to a power of two: 2^k becomes 2^(k-1)
        bad &= ~((got.abs().log2() == got.abs().log2().round()) & ~off(2 * got))
    bad |= got.isnan()
    assert not bad.any(), f"{name} off at {bad.nonzero()[:3].tolist()}: {got[bad][:3]} against {want[bad][:3]}"


@pytest.mark.parametrize("tokens,hidden", FP8_OUT_SHAPES)
@pytest.mark.parametrize("dtype", [torch.float16, pytest.param(torch.bfloat16, marks=GPU_ONLY)])
@pytest.mark.parametrize("block_n", [128, 256])
def test_forward_fp8_out(tokens, hidden, dtype, block_n, poison_empty):
    """The FP8 forward writing post in e4m3 too (the down-projection's operand): post unchanged, its copy as the
    backward's; rows of sizes spanning 2^±3 and a zero row."""
    sizes = torch.exp2(torch.randint(-3, 3, (tokens, 1), device=DEVICE).float())
    x8 = (torch.randn(tokens, 128, device=DEVICE) * sizes).to(E4M3)
    x8[tokens // 2] = 0
    w8 = torch.randn(hidden, 128, device=DEVICE).to(E4M3)
    scale = torch.tensor(0.01, device=DEVICE)
    config = out8_config(hidden, block_n)
    post, post8, post_scale = matmul_relu_square_triton(x8, w8, config=config, scale=scale, out_dtype=dtype,
                                                        fp8_out=True)
    assert torch.equal(post, matmul_relu_square_triton(x8, w8, config=config, scale=scale, out_dtype=dtype)), \
        "post changed by fp8_out"
    check_fp8_out(post, post8, post_scale, dtype)


# (T, H): the backward writing the weight gradients' K-major e4m3 copies; T a multiple of 16 (TMA's rows of the copies)
TRANSPOSED_SHAPES = [(16, 128), (144, 384), (272, 256), pytest.param(16384, 3072, marks=GPU_ONLY)]


def transposed_multipliers(post, d_pre):
    """t_mul: post's exact scale; d_pre's halved, so that its largest entries saturate."""
    return torch.tensor([448 / post.double().abs().max().item(), 2 * 448 / d_pre.double().abs().max().item()],
                        device=DEVICE)


@pytest.mark.parametrize("tokens,hidden", TRANSPOSED_SHAPES)
@pytest.mark.parametrize("dtype", [torch.float16, pytest.param(torch.bfloat16, marks=GPU_ONLY)])
@pytest.mark.parametrize("block_n", [128, 256])
def test_backward_transposed_copies(tokens, hidden, dtype, block_n, poison_empty):
    """With t_mul the FP8 backward writes the (H, T) e4m3 copies (post · t_mul[0])ᵀ and (d_pre · t_mul[1])ᵀ, clamped
    to ±448, in place of its 16-bit d_pre: its e4m3 d_pre and scales bit for bit those without, each copy within an
    e4m3 step of the cast of its source (d_pre: the 16-bit one, rounded), values past 448 saturated."""
    g8, g_scale, w8, w_scale, post = fp8_backward_inputs(tokens, 256, hidden, dtype)
    args = dict(post=post, config=out8_config(hidden, block_n), scale=w_scale, row_scale=g_scale, out_dtype=dtype,
                fp8_out=True)
    d_pre, d_pre8, d_scale = matmul_relu_square_triton(g8, w8, **args)
    t_mul = transposed_multipliers(post, d_pre)
    got8, got_scale, post_t, d_pre_t = matmul_relu_square_triton(g8, w8, **args, t_mul=t_mul)
    assert torch.equal(got8.view(torch.uint8), d_pre8.view(torch.uint8)) and torch.equal(got_scale, d_scale)
    assert post_t.shape == d_pre_t.shape == (hidden, tokens) and post_t.dtype == d_pre_t.dtype == E4M3
    step = {torch.float16: 2**-24, torch.bfloat16: 0.0}[dtype]
    for name, copy, source, mul in [("postᵀ", post_t, post, t_mul[0]), ("d_preᵀ", d_pre_t, d_pre, t_mul[1])]:
        mul = mul.item()
        want = (source.double() * mul).clamp(-448, 448).T.to(E4M3)
        assert_e4m3_near(copy, want, step * mul, name)
    assert (d_pre_t.double().abs() == 448).any(), "d_pre's largest entries: not saturated"


HOPPER_ONLY = pytest.mark.skipif(
    not (HAS_CUDA and device_key(torch.device("cuda")) == SM90 and triton.__version__.startswith(HOPPER_TRITON)),
    reason=f"needs an sm_90 GPU and Triton {HOPPER_TRITON}x (the warp-specialized FP8 backward)")


@HOPPER_ONLY
@pytest.mark.parametrize("tokens,dim,hidden", [(4, 128, 128), (260, 208, 384), (1000, 768, 3072),
                                               (16384, 768, 3072)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_hopper_backward_is_the_triton_kernels(tokens, dim, hidden, dtype, poison_empty):
    """The warp-specialized FP8 backward: bit for bit the Triton kernel's d_pre, e4m3 copy and scales (K-slices of
    128 on both), and close to the fp64 product; odd token counts (a partial last tile), a K (208) that is not a
    whole slice, rows of sizes spanning 2^±6 and a zero row. Its outputs start as NaN (poison_empty)."""
    g8, g_scale, w8, w_scale, post = fp8_backward_inputs(tokens, dim, hidden, dtype)
    assert hopper_backward_applies(g8, hidden, True, dtype)
    got = relu_square_backward_hopper(g8, w8, post, w_scale, g_scale, out_dtype=dtype)
    want = matmul_relu_square_triton(g8, w8, post=post, config=MLPConfig(128, 128, 128, 2, 8), scale=w_scale,
                                     row_scale=g_scale, out_dtype=dtype, fp8_out=True)
    for name, a, b in zip(("d_pre", "e4m3 copy", "scales"), got, want):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), f"{name} differs from the Triton kernel's"
    expected = fp8_backward_expected(g8, g_scale, w8, w_scale, post)
    assert_close(got[0], expected, 1e-2 * expected.abs().amax(1, keepdim=True).cpu(), 1e-2, "d_pre")
    check_fp8_out(*got, dtype)


@HOPPER_ONLY
@pytest.mark.parametrize("tokens,dim,hidden", [(16, 128, 128), (272, 208, 384), (1008, 768, 3072),
                                               (16384, 768, 3072)])
def test_hopper_backward_transposed_is_the_triton_kernels(tokens, dim, hidden, poison_empty):
    """With t_mul, the warp-specialized backward's e4m3 d_pre, scales and transposed copies are bit for bit the Triton
    kernel's; a partial last tile, K not a whole slice, saturated values."""
    g8, g_scale, w8, w_scale, post = fp8_backward_inputs(tokens, dim, hidden, torch.bfloat16)
    d_pre = relu_square_backward_hopper(g8, w8, post, w_scale, g_scale)[0]
    t_mul = transposed_multipliers(post, d_pre)
    got = relu_square_backward_hopper(g8, w8, post, w_scale, g_scale, torch.bfloat16, t_mul)
    want = matmul_relu_square_triton(g8, w8, post=post, config=MLPConfig(128, 128, 128, 2, 8), scale=w_scale,
                                     row_scale=g_scale, fp8_out=True, t_mul=t_mul)
    for name, a, b in zip(("e4m3 d_pre", "scales", "postᵀ", "d_preᵀ"), got, want):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), f"{name} differs from the Triton kernel's"


@HOPPER_ONLY
def test_hopper_backward_nan_stays_in_its_row(poison_empty):
    """A NaN in one gradient row makes that row of d_pre NaN and no other."""
    grad = torch.randn(260, 256, device=DEVICE).to(torch.bfloat16)
    grad[7, 5] = float("nan")
    (g8, g_scale), (w8, w_scale) = fp8_rows(grad), fp8_tensor((torch.randn(384, 256, device=DEVICE) / 11).bfloat16())
    post = torch.rand(260, 384, device=DEVICE).bfloat16()
    d_pre, _, _ = relu_square_backward_hopper(g8, w8, post, w_scale, g_scale)
    assert d_pre[7].isnan().all() and not d_pre[torch.arange(260, device=DEVICE) != 7].isnan().any()


@GPU_ONLY
@pytest.mark.parametrize("hopper", [False, pytest.param(True, marks=HOPPER_ONLY)])
def test_transposed_copies_keep_nan(hopper, poison_empty):
    """A NaN in post or in a gradient row stays NaN in its transposed e4m3 copies, where a plain clamp to ±448 would
    make it a finite, wrong weight gradient, and no other entry is NaN. (The interpreter's e4m3 cast turns NaN into
    a number: GPU only.)"""
    g8, g_scale, w8, w_scale, post = fp8_backward_inputs(272, 256, 384, torch.bfloat16)
    args = dict(post=post, config=MLPConfig(128, 128, 128, 2, 8), scale=w_scale, row_scale=g_scale, fp8_out=True)
    t_mul = transposed_multipliers(post, matmul_relu_square_triton(g8, w8, **args)[0])
    post[3, 200] = float("nan")
    g8[7, 5] = float("nan")
    _, _, post_t, d_pre_t = (relu_square_backward_hopper(g8, w8, post, w_scale, g_scale, torch.bfloat16, t_mul)
                             if hopper else matmul_relu_square_triton(g8, w8, **args, t_mul=t_mul))
    want = torch.zeros(384, 272, dtype=torch.bool, device=DEVICE)
    want[200, 3] = True  # post's NaN, and d_pre's there: d_pre = d_post · 2·sqrt(post)
    assert torch.equal(post_t.float().isnan(), want), "postᵀ: NaN lost or spread"
    want[:, 7] = True  # the gradient row's NaN reaches every entry of its d_pre row
    assert torch.equal(d_pre_t.float().isnan(), want), "d_preᵀ: NaN lost or spread"


def test_hopper_backward_is_chosen_only_where_it_runs():
    """The warp-specialized backward only for e4m3 CUDA operands on sm_90 with Triton 3.6, the e4m3 copy asked for, N
    in whole tiles and a 16-bit output; everything else keeps the Triton kernel."""
    cpu8 = torch.zeros(4, 128, dtype=E4M3)
    assert not hopper_backward_applies(cpu8, 128, True, torch.bfloat16)
    if HAS_CUDA:
        g8 = cpu8.to(DEVICE)
        assert not hopper_backward_applies(g8, 128, False, torch.bfloat16)
        assert not hopper_backward_applies(g8, 192, True, torch.bfloat16)
        assert not hopper_backward_applies(g8, 128, True, torch.float32)
        assert not hopper_backward_applies(g8.to(torch.bfloat16), 128, True, torch.bfloat16)


@pytest.mark.parametrize("fp8,transposed", [(False, False), (True, False), (True, True)])
def test_d_pre_op_registration(fp8, transposed):
    """The backward's custom op against its registration (schema, fake outputs' shapes and dtypes against the real
    ones, torch.compile's dispatch), with and without the e4m3 copies and the transposed ones: torch.compile trusts
    the fake."""
    dtype = torch.bfloat16 if HAS_CUDA else torch.float16
    grad = torch.randn(144, 256, device=DEVICE).to(dtype)
    w_out = (torch.randn(384, 256, device=DEVICE) / 11).to(dtype)
    post = torch.rand(144, 384, device=DEVICE).square().to(dtype)
    fp8_grad = (*fp8_rows(grad), *fp8_tensor(w_out)) if fp8 else ()
    t_mul = (torch.tensor([448.0, 30.0], device=DEVICE),) if transposed else ()
    # the schema check compares outputs by arithmetic that e4m3 tensors lack
    tests = ("test_faketensor", "test_aot_dispatch_dynamic") + (("test_schema",) if not fp8 else ())
    torch.library.opcheck(relu_square_d_pre_op, (grad, w_out, post, fp8, *fp8_grad, *t_mul), test_utils=tests)
