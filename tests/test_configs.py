"""Which launch config each kernel family picks (kernels/configs.py), without a GPU: on a faked sm_90 device the
tuned config for each shape the records tuned, and each family's generic fallback on other devices (other GPUs,
the interpreter's CPU) and on other shapes; and which reads Inductor's short-row reductions count as out of order.

    python3 -m pytest -q tests/test_configs.py
"""
from functools import partial

import pytest
import sympy
import torch
from torch._inductor.dependencies import MemoryDep
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

from kernels.configs import SM90, PersistentRowReductions, device_key, pick
from kernels.relu_square import GENERIC_MLP_CONFIG, MLPConfig, mlp_config
from kernels.softcapped_ce import CEConfig, ce_config
from kernels.symmetric import SYRK_GENERIC, SyrkConfig, syrk_config
from kernels.transpose import TRANSPOSE_BYTES, TRANSPOSE_GENERIC, TransposeConfig, transpose_config

BF16 = torch.bfloat16
SYRK_SM90 = {  # (batch, M, K) of the bf16 Polar Express products
    (5, 768, 768): SyrkConfig(block=64, block_k=64, num_warps=4, num_stages=4),
    (3, 768, 768): SyrkConfig(block=64, block_k=64, num_warps=4, num_stages=4),
    (40, 768, 768): SyrkConfig(block=128, block_k=64, num_warps=8, num_stages=3),
    (24, 768, 768): SyrkConfig(block=128, block_k=64, num_warps=8, num_stages=3),
    (3, 768, 3072): SyrkConfig(block=64, block_k=128, num_warps=4, num_stages=3),
    (24, 768, 3072): SyrkConfig(block=128, block_k=64, num_warps=8, num_stages=3),
}
TRANSPOSE_SM90 = TransposeConfig(block_m=128, block_n=64, num_warps=8, ctas_per_sm=4)
TRANSPOSE_SM90_BYTES = TransposeConfig(block_m=256, block_n=128, num_warps=8, ctas_per_sm=0)
CE_SM90 = CEConfig(1, 4096, 16, reverse_pass2=True, fma_reciprocal=True, num_stages=1)
CE_SM90_TANH = {n_rows: CEConfig(1, 4096, 32, fma_reciprocal=False) if n_rows == 49152 else  # by N
                CEConfig(1, 8192, 16, fma_reciprocal=False) for n_rows in (16384, 32768, 49152)}
CE_GENERIC_VOCAB = CEConfig(1, 2048, 4)  # the fallback for V = 50304

# (device -> config with the shape key bound, the sm_90 config, the fallback elsewhere): the tuned shapes
TUNED = [
    (partial(mlp_config, direction="forward_bf16", N=3072, K=768), MLPConfig(128, 256, 64, 4, 8), GENERIC_MLP_CONFIG),
    (partial(mlp_config, direction="backward_bf16", N=3072, K=768), MLPConfig(256, 128, 64, 3, 8), GENERIC_MLP_CONFIG),
    *[(partial(syrk_config, dtype=BF16, batch=batch, M=M, K=K), config, SYRK_GENERIC)
      for (batch, M, K), config in SYRK_SM90.items()],
    (partial(transpose_config, dtype=BF16), TRANSPOSE_SM90, TRANSPOSE_GENERIC),  # the copy
    (partial(transpose_config, dtype=torch.float32), TRANSPOSE_SM90, TRANSPOSE_GENERIC),  # the add's fp32 source
    (partial(transpose_config, dtype=torch.float8_e5m2), TRANSPOSE_SM90_BYTES, TRANSPOSE_BYTES),  # FP8
    *[(partial(ce_config, n_rows=n_rows, n_cols=50304, tanh_sigmoid=tanh),
       CE_SM90_TANH[n_rows] if tanh else CE_SM90,
       CE_GENERIC_VOCAB) for n_rows in (16384, 32768, 49152) for tanh in (False, True)],
]
# (device -> config, the fallback): shapes no table has, on sm_90 too
UNTUNED = [
    (partial(mlp_config, direction="forward", N=1024, K=256), GENERIC_MLP_CONFIG),
    (partial(syrk_config, dtype=torch.float32, batch=5, M=768, K=768), SYRK_GENERIC),
    (partial(syrk_config, dtype=BF16, batch=8, M=768, K=768), SYRK_GENERIC),
    (partial(ce_config, n_rows=2048, n_cols=50304), CE_GENERIC_VOCAB),
    (partial(ce_config, n_rows=16384, n_cols=256), CEConfig(8, 256, 4)),
]
ELSEWHERE = [(8, 0), (10, 0), None]  # A100, B200, the CPU (None)


def case_id(config_for) -> str:
    return f"{config_for.func.__name__}({', '.join(map(str, config_for.keywords.values()))})"


@pytest.fixture
def device_with(monkeypatch):
    """device_with((9, 0)): a CUDA device that reports that compute capability (only the capability is asked
    for); device_with(None): the CPU."""
    def make(capability):
        if capability is None:
            return torch.device("cpu")
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        return torch.device("cuda")
    return make


def test_pick_by_device_then_shape(device_with):
    table = {SM90: {"tuned shape": "tuned"}}
    assert device_key(device_with(None)) is None
    assert device_key(device_with(SM90)) == SM90
    assert pick(table, device_with(SM90), "tuned shape", "generic") == "tuned"
    assert pick(table, device_with(SM90), "other shape", "generic") == "generic"
    for capability in ELSEWHERE:
        assert pick(table, device_with(capability), "tuned shape", "generic") == "generic"


@pytest.mark.parametrize("config_for, tuned, fallback", TUNED, ids=[case_id(case[0]) for case in TUNED])
def test_tuned_shapes(device_with, config_for, tuned, fallback):
    assert config_for(device_with(SM90)) == tuned
    for capability in ELSEWHERE:
        assert config_for(device_with(capability)) == fallback, capability


@pytest.mark.parametrize("config_for, fallback", UNTUNED, ids=[case_id(case[0]) for case in UNTUNED])
def test_other_shapes_fall_back(device_with, config_for, fallback):
    assert config_for(device_with(SM90)) == fallback


def test_rows_read_out_of_order():
    """64 x 6 rows of 128: only a read over every element whose index takes its last variable (along the rows) through
    a floor division or a modulo reads the rows out of order: the rotary's swapped pairs. A modulo over the rows'
    positions (the paired heads' tables), an in-order row, one value per row (a head's scale) and a constant index
    (a seed's) do not."""
    token, head, col = sympy.symbols("c0 c1 c2", integer=True, nonnegative=True)

    def reads(*deps) -> bool:
        node = type("Node", (), {"read_writes": type("ReadWrites", (), {"reads": list(deps)})()})()
        features = type("Features", (), {"scheduler_nodes": lambda _: [node], "numel": sympy.Integer(64 * 6),
                                         "reduction_numel": sympy.Integer(128)})()
        return PersistentRowReductions.reads_rows_out_of_order(features)

    def along_rows(index, size=128) -> MemoryDep:
        return MemoryDep("buf", index, (token, head, col), (64, 6, size))

    in_order = along_rows(768 * token + 128 * head + col)
    assert reads(in_order, along_rows(768 * token + 128 * head + 2 * FloorDiv(col, 2) - ModularIndexing(col, 1, 2) + 1))
    assert reads(MemoryDep("buf", 2304 * token + FloorDiv(col, 2), (token, col), (64, 768)))  # rows of 128 in 768
    assert not reads(in_order)
    assert not reads(along_rows(256 * token + 128 * ModularIndexing(3 * head, 1, 2) + col))
    assert not reads(MemoryDep("scale", FloorDiv(token, 6), (token,), (6 * 64,)))
    assert not reads(MemoryDep("scale", ModularIndexing(head, 1, 2), (token, head), (64, 6)))
    assert not reads(MemoryDep("seed", sympy.Integer(0), (), ()))
