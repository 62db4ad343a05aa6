import os
import sys

import torch

# Without a GPU, run the Triton launchers through Triton's interpreter. The variable is read when
# a kernel is decorated, so it must be set before any kernels module is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)
