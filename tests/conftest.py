import os
import sys

import pytest
import tiktoken
import torch

# Without a GPU, run the Triton launchers through Triton's interpreter. The variable is read when
# a kernel is decorated, so it must be set before any kernels module is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Under pytest-xdist every worker, and every script it starts, would use all cores: N workers make N x cores
# threads, and the CPU training runs then stall (a 16-core GPU machine with -n 6: four of them unfinished after
# 6 minutes; with 2 threads each the file took 90 s). Share the cores out instead.
_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _workers > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _workers)))
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)


@pytest.fixture(autouse=True)
def torch_config_restored():
    """Every test leaves torch's config modules as it found them (tests/utils.py: config_changes)."""
    from tests.utils import config_changes, torch_configs
    before = torch_configs()
    yield
    if changes := config_changes(before):
        pytest.fail("the test left torch's config changed: " + "; ".join(changes[:5]), pytrace=False)


@pytest.fixture
def poison_empty(monkeypatch):
    """Make torch.empty return NaN-filled float tensors, so an output element left unwritten fails."""
    empty = torch.empty

    def nan_empty(*args, **kwargs):
        out = empty(*args, **kwargs)
        return out.fill_(float("nan")) if out.is_floating_point() else out
    monkeypatch.setattr(torch, "empty", nan_empty)


@pytest.fixture(scope="session")
def synthetic_data(tmp_path_factory):
    sys.path.insert(0, os.path.join(REPO, "data"))
    import synthetic
    out = tmp_path_factory.mktemp("synthetic")
    synthetic.generate(out=out, vocab_size=256, train_tokens=400_000, val_tokens=20_000, train_shards=2, seed=0)
    return {"train": str(out / "synthetic_train_*.bin"), "val": str(out / "synthetic_val_*.bin")}


@pytest.fixture(scope="session")
def tiny():
    """A tiktoken encoding of 256 byte tokens and <|endoftext|> = 256 for data/tokenize_text.py: every text
    round-trips, and nothing is downloaded."""
    return tiktoken.Encoding(name="tiny_bytes", pat_str=r"\s+|\S+", mergeable_ranks={bytes([b]): b for b in range(256)},
                             special_tokens={"<|endoftext|>": 256})
