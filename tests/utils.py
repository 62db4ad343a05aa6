"""Shared test helpers: the repository's root, comparisons, the GPU marker, the check of a refused program's one
`error:` line, a file on a full disk, and the tiny training configuration with its builders."""
import errno
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import train_gpt as tg
from data.shards import scan_train_shards
from harness.guard import StopRequest
from harness.log import Logger
from harness.settings import parse_args
from kernels.attention import Attention
from torch.utils._config_module import ConfigModule

REPO = Path(__file__).resolve().parents[1]
HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if HAS_CUDA else "cpu"
# bf16 and fp8 cases (Triton's interpreter mishandles them) and the model's real shapes (slow on a CPU)
GPU_ONLY = pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA (bf16/fp8 kernels, real shapes)")


def torch_configs() -> dict[str, dict]:
    """Every torch config module imported so far (torch._dynamo.config, torch._inductor.config, ...): its values."""
    return {m.__name__: m.get_config_copy() for m in list(sys.modules.values()) if isinstance(m, ConfigModule)}


def config_changes(before: dict[str, dict]) -> list[str]:
    """What differs from torch_configs()'s `before`: an entry changed, or hidden. A config module serves its entries
    through __getattr__, and deleting one (as a monkeypatch undo may) hides it: every later read raises. Change
    settings torch's way instead, `with torch._dynamo.config.patch(...)`, which restores them."""
    changes = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # a deprecated entry warns when read
        for name, values in before.items():
            module = sys.modules[name]
            now = module.get_config_copy()
            for key, value in values.items():
                if not hasattr(module, key):
                    changes.append(f"{name}.{key} is hidden (deleted)")
                elif now[key] != value:
                    changes.append(f"{name}.{key} is {now[key]!r}, was {value!r}")
    return changes


def assert_close(actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float, name: str = "output"):
    """allclose that fails on any NaN/inf mismatch and says where and by how much it is off."""
    assert actual.shape == expected.shape, f"{name}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    a, e = actual.detach().double().cpu(), expected.detach().double().cpu()
    nonfinite = ~torch.isfinite(a) & torch.isfinite(e)
    bad = nonfinite | ((a - e).abs() > atol + rtol * e.abs())
    if bad.any():
        idx = bad.nonzero()[:5].tolist()
        samples = ", ".join(f"{tuple(i)}: got {a[tuple(i)].item():.6g} want {e[tuple(i)].item():.6g}" for i in idx)
        raise AssertionError(f"{name}: {int(bad.sum())}/{bad.numel()} elements differ "
                             f"(atol={atol}, rtol={rtol}; {int(nonfinite.sum())} non-finite), "
                             f"max abs err {(a - e).abs().nan_to_num(float('inf')).max().item():.3g}; first: {samples}")


def rel_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """||actual - expected|| / ||expected|| in float64 (NaN if actual has NaNs)."""
    a, e = actual.detach().double().cpu(), expected.detach().double().cpu()
    return ((a - e).norm() / e.norm().clamp_min(1e-300)).item()


# --- the tiny training configuration -----------------------------------------------------------

TINY = dict(vocab_size=256, model_dim=64, num_heads=2, head_dim=32)
TINY_FLAGS = ["--device", "cpu", "--compile", "False", "--vocab_size", "256", "--bos_id", "255",
              "--model_dim", "64", "--num_heads", "2", "--head_dim", "32",
              "--micro_batch_tokens", "(64, 128, 192)", "--val_micro_batch_tokens", "256",
              "--stage_seq_lens", "(32, 64, 64)", "--window_block", "8", "--val_tokens", "1024"]


def settings(argv: list[str]) -> tg.Hyperparameters:
    """train_gpt.py's settings from command-line flags, as main() parses them."""
    return parse_args(argv, tg.Hyperparameters, tg.validate)[0]


def cpu_runtime(world_size: int = 1, rank: int = 0) -> tg.Runtime:
    """One CPU process; world_size > 1 emulates that rank of a larger run (no collectives)."""
    return tg.Runtime(rank, world_size, torch.device("cpu"), tg.MICRO_BATCHES // world_size,
                      Attention("sdpa", "sdpa", "masked SDPA"))


def cpu_trainer(hp: tg.Hyperparameters, world_size: int = 1, helper: str = "", rank: int = 0) -> tg.Trainer:
    """A Trainer of these settings in this process (data checked as main() does), logging nowhere; helper: as a
    compile helper of that role builds it; world_size > 1: that rank of an emulated world."""
    schedule = tg.Schedule(hp)
    rt = cpu_runtime(world_size, rank)
    return tg.Trainer(hp, rt, schedule, tg.check_data(hp, schedule, rt.world_size),
                      Logger(hp.log_dir, "test", is_master=False), StopRequest(), helper=helper)


def shard_index(hp: tg.Hyperparameters) -> dict:
    """The train shards with their BOS positions, as check_data hands them to the loader."""
    return scan_train_shards(hp.train_files, hp.bos_id, hp.vocab_size)[0]


def tiny_model(**overrides) -> tg.GPT:
    cfg = tg.GPTConfig(vocab_size=256, model_dim=64, num_heads=2, head_dim=32, max_tokens=512, **overrides)
    torch.manual_seed(0)
    return tg.GPT(cfg)


def doc_stream(rng: np.random.Generator, n_docs: int, bos: int = 255, max_len: int = 40) -> np.ndarray:
    docs = [np.concatenate([[bos], rng.integers(0, bos, rng.integers(0, max_len))]) for _ in range(n_docs)]
    return np.concatenate(docs).astype(np.uint16)


def batch_for(model: tg.GPT, T: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    tokens = doc_stream(rng, 4 * T // 10 + 10)[:T + 1]
    starts = np.flatnonzero(tokens[:-1] == 255)
    ends = np.append(starts[starts > 0], T).astype(np.int32)
    mb = tg.make_micro_batch(tokens, ends, 64, tg.bigram_hash(tokens[:-1], model.bigram_embed.size(0)), pin=False)
    sched = tg.ForwardSchedule(short_window=16, long_window=48, max_seq_len=T,
                               mtp_weights=torch.tensor([1.0, 0.5, 0.25]))
    return mb, sched


def random_gradients(model) -> dict:
    """Fill every gradient in place (they persist: the optimizer zeroes them, CUDA graphs hold them); every token-table
    row counts as written."""
    model.load_gradients({name: torch.randn_like(grad) for name, grad in model.gradients().items()})
    return model.gradients()


def run_script(args, env_extra=None, nproc=None, timeout=600, script="train_gpt.py"):
    """Run a program of the repository (train_gpt.py under torchrun when nproc is given) on the CPU."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(env_extra or {})
    cmd = [sys.executable, script] if nproc is None else \
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", script]
    result = subprocess.run(cmd + args, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:  # pytest shows captured prints of a failing test in full; assert messages get cut
        print(f"$ {' '.join(cmd + args)}\n--- exit {result.returncode}, stderr:\n{result.stderr}")
    return result


class FullDisk:
    """A binary file that takes `room` bytes, then fails each write as a full disk does (put in place of the open()
    of harness/files.atomic_write, which every file the project writes goes through)."""

    def __init__(self, f, room: int):
        self.f, self.room = f, room

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()

    def __getattr__(self, name):  # flush, fileno, ...: the file's own
        return getattr(self.f, name)

    def write(self, data):
        data = bytes(data)
        if len(data) <= self.room:
            self.room -= len(data)
            return self.f.write(data)
        self.f.write(data[:self.room])
        self.room = 0
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def one_error_line(stderr: str, *words: str) -> str:
    """The one `error:` line a refused program printed (blank lines aside, no traceback), holding each of `words`."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in stderr, stderr[-2000:]
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def val_losses(stdout: str) -> list[float]:
    return [float(x) for x in re.findall(r"val_loss:([\d.]+)", stdout)]
