"""train_gpt.py with the CPU arithmetic of test_train.py's exact-math pin: with the environment that test sets
(PINNED_CPU), the same bits on any x86-64 CPU. The test's docstring says why each part is there.

    python3 tests/pinned_cpu.py --device cpu ...    # train_gpt.py's flags
"""
import runpy
import sys
from pathlib import Path

import numpy as np
import torch


def sqrt(x: torch.Tensor) -> torch.Tensor:
    """The correctly rounded square root: ATen's CPU sqrt calls MKL's vector math, which is up to an ulp off,
    differently on AMD and Intel CPUs whatever MKL_CBWR says; numpy's rounds correctly on every CPU. Narrower
    floats (bf16) take float32's root and round it, as ATen does."""
    wide = x.detach().to(torch.promote_types(x.dtype, torch.float32))
    return torch.as_tensor(np.sqrt(wide.numpy())).to(x.dtype if x.is_floating_point() else wide.dtype)


def main():
    torch.use_deterministic_algorithms(True)
    torch.backends.mkldnn.enabled = False  # oneDNN would take the bf16 matmuls to AVX-512 or AMX kernels by CPU
    aten = torch.library.Library("aten", "IMPL")  # kept while train_gpt.py runs
    aten.impl("sqrt", sqrt, "CPU")
    aten.impl("sqrt_", lambda x: x.copy_(sqrt(x)), "CPU")
    repo = Path(__file__).resolve().parent.parent
    sys.path[0] = str(repo)  # as for `python3 train_gpt.py`: the repository, not tests/, comes first
    sys.argv = [str(repo / "train_gpt.py"), *sys.argv[1:]]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
