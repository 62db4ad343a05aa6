import os
import sys

import pytest
import torch

# Without a GPU, run the Triton launchers through Triton's interpreter. The variable is read when
# a kernel is decorated, so it must be set before any kernels module is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)


@pytest.fixture
def poison_empty(monkeypatch):
    """Make torch.empty return NaN-filled float tensors, so an output element left unwritten fails."""
    empty = torch.empty

    def nan_empty(*args, **kwargs):
        out = empty(*args, **kwargs)
        return out.fill_(float("nan")) if out.is_floating_point() else out
    monkeypatch.setattr(torch, "empty", nan_empty)
