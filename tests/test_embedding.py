"""kernels/embedding.py: the scatter of embedding gradients into an fp32 accumulator (against index_add_) with the
flags of the rows it wrote, and the rounding and zeroing of the flagged rows (against boolean indexing).

Run: python -m pytest -q tests/test_embedding.py   (CPU: Triton interpreter; GPU: compiled kernels)
"""
import pytest
import torch

from kernels.embedding import (embedding_grad_add, embedding_grad_add_reference, embedding_grad_add_triton, lookup_op,
                               round_flagged_rows, round_flagged_rows_reference, round_flagged_rows_triton,
                               zero_flagged_rows, zero_flagged_rows_reference, zero_flagged_rows_triton)
from tests.utils import DEVICE, GPU_ONLY, assert_close


DTYPES = [
    pytest.param(torch.float32, id="fp32"),
    pytest.param(torch.float16, id="fp16"),
    pytest.param(torch.bfloat16, id="bf16", marks=GPU_ONLY),
]
# (table rows, D, idx shape)
SHAPES = [
    (11, 37, (50,)),          # many repeats per row, D smaller than a block
    (1000, 300, (3, 129)),    # batched lookups (the value-embedding layout), D not a multiple of the block
    (7, 768, (1,)),
    (5, 1, (0,)),             # nothing looked up: acc unchanged
    pytest.param(5 * 50304, 768, (5, 49152), marks=GPU_ONLY, id="value_embeds"),
]


def _case(rows, D, idx_shape, dtype):
    # a skewed distribution, like tokens: low rows repeat often, so atomics on one address collide
    idx = (torch.rand(idx_shape, device=DEVICE) ** 3 * rows).long().clamp_max(rows - 1)
    grad = torch.randn(*idx_shape, D, device=DEVICE).to(dtype)
    acc = torch.randn(rows, D, device=DEVICE)
    flags = (torch.rand(rows, device=DEVICE) < 0.3).to(torch.uint8)  # some rows flagged before
    return grad, idx, acc, flags


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,D,idx_shape", SHAPES)
def test_embedding_grad_add(rows, D, idx_shape, dtype):
    grad, idx, acc, flags = _case(rows, D, idx_shape, dtype)
    expected = acc.double().index_add_(0, idx.reshape(-1), grad.reshape(-1, D).double())
    untouched = torch.ones(rows, dtype=torch.bool, device=DEVICE)
    untouched[idx.reshape(-1)] = False
    before, flags_before = acc.clone(), flags.clone()
    embedding_grad_add_triton(grad, idx, acc, flags)
    assert torch.equal(acc[untouched], before[untouched]), "rows that were not looked up changed"
    assert torch.equal(flags, torch.where(untouched, flags_before, 1)), "flags: the rows looked up, and the earlier"
    # fp32 sums in an arbitrary order: error grows with the number of rows summed into one row
    repeats = int(torch.bincount(idx.reshape(-1), minlength=rows).max()) if idx.numel() else 0
    assert_close(acc, expected, atol=1e-5 * max(1, repeats) ** 0.5, rtol=1e-5, name="embedding_grad_add")


def test_embedding_grad_add_int32_idx_and_dispatch():
    grad, idx, acc, flags = _case(100, 64, (2, 33), torch.float32)
    expected_flags = flags.clone()
    expected = embedding_grad_add_reference(grad, idx, acc.clone(), expected_flags)
    embedding_grad_add(grad, idx.int(), acc, flags)  # CUDA: Triton; CPU: the reference
    assert_close(acc, expected, atol=1e-5, rtol=1e-5, name="embedding_grad_add")
    assert torch.equal(flags, expected_flags)


def test_embedding_grad_add_propagates_nan():
    grad, idx, acc, flags = _case(20, 40, (30,), torch.float32)
    grad[3, 5] = float("nan")
    embedding_grad_add_triton(grad, idx, acc, flags)
    assert acc[idx[3], 5].isnan() and acc.isnan().sum() == 1


@pytest.mark.parametrize("bad", ["bf16_acc", "wrong_grad_shape", "float_idx", "bool_flags", "short_flags"])
def test_embedding_grad_add_rejects_bad_input(bad):
    grad, idx, acc, flags = _case(20, 40, (30,), torch.float32)
    if bad == "bf16_acc":
        acc = acc.bfloat16()
    elif bad == "wrong_grad_shape":
        grad = grad[:, :39]
    elif bad == "float_idx":
        idx = idx.float()
    elif bad == "bool_flags":
        flags = flags.bool()
    else:
        flags = flags[:-1]
    with pytest.raises(AssertionError):
        embedding_grad_add_triton(grad, idx, acc, flags)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,D,n,T", [(11, 37, 1, 50), (1000, 300, 3, 129), (64, 8, 2, 1)])
def test_lookup_op_forward_and_accumulated_backward(rows, D, n, T, dtype):
    """lookup_op (what training runs): outputs are the table's rows; two backward passes add the fp64 reference's
    dense gradients into grad_acc (starting from a nonzero accumulator); the table itself gets no gradient."""
    table = torch.randn(rows, D, device=DEVICE).to(dtype).requires_grad_()
    acc = torch.randn(rows, D, device=DEVICE)
    flags, looked_up = torch.zeros(rows, dtype=torch.uint8, device=DEVICE), torch.zeros(rows, dtype=torch.uint8)
    expected = acc.double()
    for _ in range(2):
        idx = (torch.rand(n, T, device=DEVICE) ** 3 * rows).long().clamp_max(rows - 1)
        looked_up[idx.reshape(-1).cpu()] = 1
        outs = lookup_op(table, idx, acc, flags)
        grads = [torch.randn_like(o) for o in outs]
        for out, rows_i in zip(outs, idx):
            assert torch.equal(out, table.detach()[rows_i])
        torch.autograd.backward(outs, grads)
        dense = table.detach().double().requires_grad_()
        torch.autograd.backward([torch.nn.functional.embedding(r, dense) for r in idx], [g.double() for g in grads])
        expected = expected + dense.grad
    assert table.grad is None
    assert_close(acc, expected, atol=1e-5 * T ** 0.5, rtol=1e-5, name="grad_acc")
    assert torch.equal(flags.cpu(), looked_up), "flags: exactly the rows looked up"


WIRE_DTYPES = [
    pytest.param(torch.float32, id="fp32"),
    pytest.param(torch.float16, id="fp16"),
    pytest.param(torch.bfloat16, id="bf16", marks=GPU_ONLY),  # the interpreter mishandles bf16 stores
]
# (table rows, D, share of rows flagged)
FLAGGED_SHAPES = [(1, 1, 1.0), (17, 37, 0.3), (300, 300, 0.0), (1000, 768, 0.2), (333, 5, 1.0),
                  pytest.param(5 * 50304, 768, 0.15, marks=GPU_ONLY, id="value_embeds")]


def _same(a, b) -> bool:  # equal, NaN where NaN
    return torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)


def _flagged_case(rows, D, share, wire_dtype):
    acc = torch.randn(rows, D, device=DEVICE)
    flags = (torch.rand(rows, device=DEVICE) < share).to(torch.uint8)
    acc[flags.bool().nonzero()[:1, 0], :1] = float("nan")  # a non-finite value in a flagged row travels as it is
    # poisoned (rows not flagged keep it), and with a row stride of its own
    wire = torch.full((rows, D + 5), 7.0, device=DEVICE, dtype=wire_dtype)[:, :D]
    return acc, flags, wire


@pytest.mark.parametrize("wire_dtype", WIRE_DTYPES)
@pytest.mark.parametrize("rows,D,share", FLAGGED_SHAPES)
def test_round_flagged_rows(rows, D, share, wire_dtype):
    acc, flags, wire = _flagged_case(rows, D, share, wire_dtype)
    acc_before, flags_before = acc.clone(), flags.clone()
    expected = round_flagged_rows_reference(acc, flags, wire.clone())
    assert round_flagged_rows_triton(acc, flags, wire) is wire
    assert _same(wire, expected), "flagged rows: acc rounded once to the wire's dtype; the others untouched"
    assert _same(acc, acc_before)
    assert torch.equal(flags, flags_before), "rounding leaves the flags"


@pytest.mark.parametrize("with_wire", [True, False])
@pytest.mark.parametrize("wire_dtype", WIRE_DTYPES)
@pytest.mark.parametrize("rows,D,share", FLAGGED_SHAPES)
def test_zero_flagged_rows(rows, D, share, wire_dtype, with_wire):
    acc, flags, wire = _flagged_case(rows, D, share, wire_dtype)
    wire = wire if with_wire else None
    expected_acc, expected_flags = acc.clone(), flags.clone()
    expected_wire = None if wire is None else wire.clone()
    zero_flagged_rows_reference(expected_acc, expected_flags, expected_wire)
    hit = flags.bool()
    zero_flagged_rows_triton(acc, flags, wire)
    assert not acc[hit].any() and not flags.any(), "flagged rows and the flags cleared"
    assert _same(acc, expected_acc), "rows not flagged kept as they were"
    if wire is not None:
        assert torch.equal(wire, expected_wire) and not wire[hit].any()


def test_flagged_rows_dispatch_and_bad_input():
    acc, flags, wire = _flagged_case(40, 24, 0.5, torch.float32)
    expected = round_flagged_rows_reference(acc, flags, wire.clone())
    assert _same(round_flagged_rows(acc, flags, wire), expected)  # CUDA: Triton; CPU: the reference
    zero_flagged_rows(acc, flags, wire)
    assert not flags.any() and not wire[expected != 7.0].any()
    strided_flags = torch.zeros(2 * flags.numel(), dtype=torch.uint8, device=DEVICE)[::2]
    for bad in (dict(flags=flags[1:]), dict(flags=flags.bool()), dict(flags=strided_flags), dict(wire=wire[:, 1:]),
                dict(wire=wire.int()), dict(acc=acc.half())):
        args = dict(acc=acc, flags=flags, wire=wire) | bad
        with pytest.raises(AssertionError):
            round_flagged_rows_triton(**args)
        with pytest.raises(AssertionError):
            zero_flagged_rows_triton(**args)
