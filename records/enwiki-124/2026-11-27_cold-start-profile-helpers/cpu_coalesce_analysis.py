"""The CPU build of the GPU training graph (tests/inductor_codegen.py) with Inductor's coalescing analysis on or off:
its time and its generated code. From the repository root, with Inductor's caches off:
    TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 python3 cpu_coalesce_analysis.py on|off OUT_DIR
"""
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

if sys.argv[1] == "off":
    torch._inductor.config.triton.coalesce_tiling_analysis = False
from tests.inductor_codegen import generated_code  # noqa: E402

t = time.time()
codes = generated_code()
print(f"{sys.argv[1]}: {time.time() - t:.1f} s")
os.makedirs(sys.argv[2], exist_ok=True)
for i, code in enumerate(codes):
    with open(f"{sys.argv[2]}/{i}.py", "w") as f:
        f.write(code)
