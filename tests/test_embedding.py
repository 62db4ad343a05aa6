"""kernels/embedding.py: the scatter of embedding gradients into an fp32 accumulator, against index_add_.

Run: python -m pytest -q tests/test_embedding.py   (CPU: Triton interpreter; GPU: compiled kernels)
"""
import pytest
import torch

from kernels.embedding import embedding_grad_add, embedding_grad_add_reference, embedding_grad_add_triton, lookup_op
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
    return grad, idx, acc


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,D,idx_shape", SHAPES)
def test_embedding_grad_add(rows, D, idx_shape, dtype):
    grad, idx, acc = _case(rows, D, idx_shape, dtype)
    expected = acc.double().index_add_(0, idx.reshape(-1), grad.reshape(-1, D).double())
    untouched = torch.ones(rows, dtype=torch.bool, device=DEVICE)
    untouched[idx.reshape(-1)] = False
    before = acc.clone()
    embedding_grad_add_triton(grad, idx, acc)
    assert torch.equal(acc[untouched], before[untouched]), "rows that were not looked up changed"
    # fp32 sums in an arbitrary order: error grows with the number of rows summed into one row
    repeats = int(torch.bincount(idx.reshape(-1), minlength=rows).max()) if idx.numel() else 0
    assert_close(acc, expected, atol=1e-5 * max(1, repeats) ** 0.5, rtol=1e-5, name="embedding_grad_add")


def test_embedding_grad_add_int32_idx_and_dispatch():
    grad, idx, acc = _case(100, 64, (2, 33), torch.float32)
    expected = embedding_grad_add_reference(grad, idx, acc.clone())
    embedding_grad_add(grad, idx.int(), acc)  # CUDA: Triton; CPU: the reference
    assert_close(acc, expected, atol=1e-5, rtol=1e-5, name="embedding_grad_add")


def test_embedding_grad_add_propagates_nan():
    grad, idx, acc = _case(20, 40, (30,), torch.float32)
    grad[3, 5] = float("nan")
    embedding_grad_add_triton(grad, idx, acc)
    assert acc[idx[3], 5].isnan() and acc.isnan().sum() == 1


@pytest.mark.parametrize("bad", ["bf16_acc", "wrong_grad_shape", "float_idx"])
def test_embedding_grad_add_rejects_bad_input(bad):
    grad, idx, acc = _case(20, 40, (30,), torch.float32)
    if bad == "bf16_acc":
        acc = acc.bfloat16()
    elif bad == "wrong_grad_shape":
        grad = grad[:, :39]
    else:
        idx = idx.float()
    with pytest.raises(AssertionError):
        embedding_grad_add_triton(grad, idx, acc)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,D,n,T", [(11, 37, 1, 50), (1000, 300, 3, 129), (64, 8, 2, 1)])
def test_lookup_op_forward_and_accumulated_backward(rows, D, n, T, dtype):
    """lookup_op (what training runs): outputs are the table's rows; two backward passes add the fp64 reference's
    dense gradients into grad_acc (starting from a nonzero accumulator); the table itself gets no gradient."""
    table = torch.randn(rows, D, device=DEVICE).to(dtype).requires_grad_()
    acc = torch.randn(rows, D, device=DEVICE)
    expected = acc.double()
    for _ in range(2):
        idx = (torch.rand(n, T, device=DEVICE) ** 3 * rows).long().clamp_max(rows - 1)
        outs = lookup_op(table, idx, acc)
        grads = [torch.randn_like(o) for o in outs]
        for out, rows_i in zip(outs, idx):
            assert torch.equal(out, table.detach()[rows_i])
        torch.autograd.backward(outs, grads)
        dense = table.detach().double().requires_grad_()
        torch.autograd.backward([torch.nn.functional.embedding(r, dense) for r in idx], [g.double() for g in grads])
        expected = expected + dense.grad
    assert table.grad is None
    assert_close(acc, expected, atol=1e-5 * T ** 0.5, rtol=1e-5, name="grad_acc")
