"""Launch configs: every kernel family with tuned configs keeps a table of them, {device key: {shape key: config}},
and a generic fallback for other GPUs, other shapes and the CPU interpreter; `pick` chooses between them.

Their launchers take `config=None` to pick from the table, or an explicit config (kernels/bench.py's sweeps).
For the kernels Inductor writes, PersistentRowReductions changes one of Inductor's own choices.
"""
import hashlib
import inspect

import sympy
import torch
from torch._inductor import config as inductor_config
from torch._inductor.choices import InductorChoices
from torch._inductor.codegen.triton import FixedTritonConfig
from torch._inductor.dependencies import MemoryDep
from torch._inductor.virtualized import V
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

# Tables are keyed by CUDA compute capability: they were tuned on H100s, and the H200 is the same sm_90 chip
# (132 SMs) with more memory, so one key covers both. Other GPUs and the CPU interpreter (key None) fall back.
SM90 = (9, 0)


def device_key(device: torch.device) -> tuple[int, int] | None:
    return torch.cuda.get_device_capability(device) if device.type == "cuda" else None


def pick(table: dict, device: torch.device, shape_key, fallback):
    """table[device key][shape key] if tuned, else fallback."""
    return table.get(device_key(device), {}).get(shape_key, fallback)


def sm_count(device: torch.device) -> int:
    """SMs to size a persistent grid by. The interpreter gets 2 stand-ins, so that such a grid still has several
    programs, each walking several tiles, as on a GPU."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 2


class PersistentRowReductions(InductorChoices):
    """Inductor's choices, but a reduction over a constant length of at most 1024 elements always keeps its row in
    registers (a persistent reduction: one pass). Inductor does so only for in-order reads; it loops over the row
    (re-reading it, with fp32 intermediates in memory) when a fused pointwise part reads out of order, as the rotary's
    channel pairs did in the QK norm's kernels (128-element rows), and skips it for other reduction kinds over ranges
    of sizes. Installed by train_gpt.configure_torch; measured on this model's graph only
    (records/enwiki-124/2026-11-27_persistent-row-reductions).

    Rows shorter than 256 (the QK norm's 128, the FP8 copies' 128-element blocks) also launch with a fixed config
    where Inductor would time 1, 8 and 32 rows a program at the kernel's first launch: for the QK norm's forward (two
    arguments written in place) those timings were 2-4x the kernel's own time and within noise of each other, so each
    compile picked by chance, and 1 row a program ran it ~1.5x slower
    (records/enwiki-124/2026-11-29_fixed-short-row-configs). Rows read out of order (the rotary's pairs) take 2 rows
    a program and 1 warp, the rest 8 and 2: in a traced stage-3 window 2 x 1 ran the QK norm's kernels 23% faster and
    the attention gate's backward (in order) 1.67x slower
    (records/enwiki-124/2026-11-29_short-row-configs-by-read-order)."""
    MAX_ROW = 1024  # Inductor's own limit for in-order rows
    SHORT_ROW = 256  # below this Inductor times several rows-a-program candidates; from it on it picks one itself
    SHORT_ROW_CONFIG = dict(XBLOCK=8, num_warps=2, num_stages=1)
    OUT_OF_ORDER_ROW_CONFIG = dict(XBLOCK=2, num_warps=1, num_stages=1)

    def uuid(self) -> str:
        """Inductor's cache key for these choices (torch >= 2.13 asks for it): this class's source, else its name.
        Torch 2.11 keys the class by its name alone: after editing it there, clear Inductor's cache."""
        try:
            return hashlib.sha256(inspect.getsource(type(self)).encode()).hexdigest()
        except (OSError, TypeError):  # no source file (bytecode only)
            return f"{type(self).__module__}.{type(self).__qualname__}"

    @staticmethod
    def should_use_persistent_reduction(features, cooperative_reduction: bool) -> bool:
        if InductorChoices.should_use_persistent_reduction(features, cooperative_reduction):
            return True
        return (inductor_config.triton.persistent_reductions and not cooperative_reduction
                and V.graph.sizevars.statically_known_leq(features.reduction_numel,
                                                               PersistentRowReductions.MAX_ROW))

    @staticmethod
    def reads_rows_out_of_order(features) -> bool:
        """Whether a fused part reads a row's elements out of order: a read over every element whose last variable
        (along the rows) sits inside a floor division or a modulo, as in the rotary's swapped pairs (Inductor's own
        contiguity test passes those reads). A read of one value per row is in order whatever its index."""
        elements = features.numel * features.reduction_numel

        def out_of_order(dep) -> bool:
            if not (isinstance(dep, MemoryDep) and isinstance(dep.index, sympy.Expr) and dep.var_names):
                return False  # not a buffer's, or a constant index (a seed's)
            return (sympy.expand(sympy.Mul(*dep.size) - elements) == 0
                    and any(dep.var_names[-1] in term.free_symbols
                            for term in dep.index.atoms(FloorDiv, ModularIndexing)))
        return any(out_of_order(dep) for node in features.scheduler_nodes() for dep in node.read_writes.reads)

    def triton_kernel_kwargs(self, kernel_cls, features, groups, kernel_kwargs: dict) -> dict:
        """A fixed config for a persistent reduction over constant rows shorter than SHORT_ROW (x and r0_ tiling),
        OUT_OF_ORDER_ROW_CONFIG where a fused pointwise part reads the rows out of order, else SHORT_ROW_CONFIG;
        none where a constant number of rows is too small for it (then Inductor has one candidate itself)."""
        tiling, rows = groups[0], features.reduction_numel
        if not (rows.is_number and 1 < rows < self.SHORT_ROW and set(tiling) == {"x", "r0_"}):
            return kernel_kwargs
        config = self.OUT_OF_ORDER_ROW_CONFIG if self.reads_rows_out_of_order(features) else self.SHORT_ROW_CONFIG
        if tiling["x"].is_number and tiling["x"] < config["XBLOCK"]:
            return kernel_kwargs
        if not kernel_kwargs.get("override_persistent_reduction",
                                 self.should_use_persistent_reduction(features, cooperative_reduction=False)):
            return kernel_kwargs
        return {**kernel_kwargs, "fixed_config": FixedTritonConfig(dict(config))}
