"""Attention: the masked-SDPA path against a per-document loop, the choice of backend (FA3 by any route, torch's
varlen FA2, masked SDPA) with its errors, and on a GPU every backend against an fp32 reference at the model's shapes.

    python3 -m pytest -q tests/test_attention.py

The selection tests stand in fake FA3 modules and a fake kernel-hub client for the real ones: they check which
route is taken and what is said, never a kernel's numbers (the GPU tests do that with the real kernels).
"""
import dataclasses
import importlib.metadata
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

import train_gpt as tg
from harness.cli import UserError
from kernels.attention import FA3, FA3_HUB_REPO, attend, select_attention
from tests.utils import GPU_ONLY, assert_close, rel_error

REAL_DISTRIBUTION = importlib.metadata.distribution


def test_sdpa_attention_matches_per_document_loop():
    torch.manual_seed(0)
    T, H, D, window = 50, 2, 8, 6
    q, k, v = (torch.randn(T, H, D) for _ in range(3))
    cu = torch.tensor([0, 7, 8, 31, T, T, T], dtype=torch.int32)
    out = attend(q, k, v, cu, T, 0.3, window, "sdpa")
    ref = torch.empty_like(q)
    for s, e in zip(cu[:-1].tolist(), cu[1:].tolist()):
        for i in range(s, e):
            lo = max(s, i - window)
            w = torch.softmax(0.3 * torch.einsum("hd,jhd->hj", q[i], k[lo:i + 1]), dim=-1)
            ref[i] = torch.einsum("hj,jhd->hd", w, v[lo:i + 1])
    assert_close(out, ref, atol=1e-5, rtol=1e-5)


# --- choosing a backend ------------------------------------------------------------------------

def choose(device: torch.device, choice: str = "auto", wait: float = 60.0, routes=None):
    """select_attention as setup_runtime calls it, for --attention `choice` and --fa3_hub_wait `wait`."""
    return select_attention(choice, device, wait, routes)


@pytest.fixture
def hopper(monkeypatch):
    """A pretend CUDA device of compute capability 9.0 (only the capability is asked for), with no FA3 installed
    by any route, whatever this machine has."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setitem(sys.modules, "flash_attn_interface", None)  # None in sys.modules: ImportError on import
    monkeypatch.setattr(torch.nn.attention, "list_flash_attention_impls", lambda: [], raising=False)
    monkeypatch.setattr(importlib.metadata, "distribution", _no_distribution)
    monkeypatch.setattr(FA3, "varlen_func", None)
    return torch.device("cuda", 0)


def _no_distribution(name):
    raise importlib.metadata.PackageNotFoundError(name)


def test_cpu_takes_masked_sdpa_and_says_why():
    choice = choose(torch.device("cpu"))
    assert (choice.kernel, choice.route) == ("sdpa", "sdpa")
    assert any("fa3-interface: needs a Hopper GPU (no CUDA GPU)" in s for s in choice.skipped)
    assert any(s.startswith("varlen: needs compute capability 8.0+") for s in choice.skipped)


@pytest.mark.parametrize("choice, message", [("fa3", "tools/build_fa3.sh"), ("varlen", "--attention auto")])
def test_explicit_choice_that_cannot_load_is_a_clear_error(choice, message):
    with pytest.raises(UserError, match=message):
        choose(torch.device("cpu"), choice)


def test_non_hopper_gpu_skips_fa3_for_torch_varlen(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    choice = choose(torch.device("cuda", 0))
    assert (choice.kernel, choice.route) == ("varlen", "varlen")
    assert choice.skipped[0] == "fa3-interface: needs a Hopper GPU (compute capability 8.0)"


def test_installed_flash_attn_interface_is_the_first_route(hopper, monkeypatch):
    fake = type(sys)("flash_attn_interface")
    fake.flash_attn_varlen_func = lambda *a, **k: "fa3"
    fake.__file__ = "/opt/fa3/flash_attn_interface.py"
    monkeypatch.setitem(sys.modules, "flash_attn_interface", fake)
    choice = choose(hopper)
    assert (choice.kernel, choice.route, choice.skipped) == ("fa3", "fa3-interface", ())
    assert FA3.varlen_func is fake.flash_attn_varlen_func and "/opt/fa3/" in choice.description


def test_torch_registered_fa3_runs_behind_varlen(hopper, monkeypatch):
    activated = []
    monkeypatch.setattr(torch.nn.attention, "list_flash_attention_impls", lambda: ["FA3", "FA4"])
    monkeypatch.setattr(torch.nn.attention, "activate_flash_attention_impl", activated.append)
    choice = choose(hopper, "fa3")
    assert (choice.kernel, choice.route, activated) == ("varlen", "fa3-torch", ["FA3"])
    assert choice.skipped[0].startswith("fa3-interface: ModuleNotFoundError")


def fake_hub(tmp_path, monkeypatch, get_kernel_body: str):
    """A fake `kernels` hub client installed in tmp_path (found by importlib.metadata and by child processes) whose
    get_kernel runs `get_kernel_body` and returns a fake FA3 kernel package."""
    site = tmp_path / "site"
    (site / "kernels").mkdir(parents=True)
    (site / "kernels-0.0.dist-info").mkdir()
    (site / "kernels-0.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: kernels\nVersion: 0.0\n")
    package = tmp_path / "hub_cache" / "flash_attn3"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from . import flash_attn_interface\n")
    (package / "flash_attn_interface.py").write_text("def flash_attn_varlen_func(*args, **kwargs):\n    return 'hub'\n")
    (site / "kernels" / "__init__.py").write_text(textwrap.dedent(f"""
        import importlib.util, sys, time
        def get_kernel(repo_id, **kwargs):
            {get_kernel_body}
            spec = importlib.util.spec_from_file_location("flash_attn3", {str(package / "__init__.py")!r},
                                                          submodule_search_locations=[{str(package)!r}])
            module = sys.modules["flash_attn3"] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
        """))
    monkeypatch.setattr(importlib.metadata, "distribution", REAL_DISTRIBUTION)  # undo the `hopper` fixture's
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.delitem(sys.modules, "fa3_hub", raising=False)
    monkeypatch.delitem(sys.modules, "fa3_hub.flash_attn_interface", raising=False)


def test_kernel_hub_route_loads_fa3_in_a_child_process(hopper, tmp_path, monkeypatch):
    fake_hub(tmp_path, monkeypatch, f"assert repo_id == {FA3_HUB_REPO!r}")
    choice = choose(hopper)
    assert (choice.kernel, choice.route) == ("fa3", "fa3-hub"), choice.skipped
    assert FA3.varlen_func() == "hub" and FA3_HUB_REPO in choice.description
    assert [s.split(":")[0] for s in choice.skipped] == ["fa3-interface", "fa3-torch"]


def test_kernel_hub_that_does_not_answer_is_left_after_the_wait(hopper, tmp_path, monkeypatch):
    fake_hub(tmp_path, monkeypatch, "time.sleep(60)")
    start = time.time()
    choice = choose(hopper, wait=2.0)
    assert time.time() - start < 30, "the hub route must give up after --fa3_hub_wait"
    assert (choice.kernel, choice.route) == ("varlen", "varlen")
    assert "fa3-hub: RuntimeError: no answer within --fa3_hub_wait 2 s (offline?)" in choice.skipped


def test_kernel_hub_not_installed_is_named(hopper):
    choice = choose(hopper)
    assert "fa3-hub: RuntimeError: the hub client is not installed (`pip install kernels`)" in choice.skipped


# --- numerics on the GPU, at the model's shapes ----------------------------------------------------

def document_starts(T: int, max_len: int, seed: int) -> torch.Tensor:
    """cu_seqlens for T tokens of documents of log-normal length (median ~400, as in FineWeb), cut at max_len."""
    rng = np.random.default_rng(seed)
    lengths = np.minimum(np.maximum(1, rng.lognormal(np.log(400), 1.0, T).astype(int)), max_len)
    ends = np.cumsum(lengths)
    ends = np.append(ends[ends < T], T)
    return torch.tensor(np.concatenate([[0], ends]), dtype=torch.int32, device="cuda")


def run_attention(kernel, q, k, v, cu, max_len, window, grad_out):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = attend(q, k, v, cu, max_len, 0.12, window, kernel)
    out.backward(grad_out)
    return out, q.grad, k.grad, v.grad


def stage_cases():
    """(micro-batch tokens, document cut length, window in tokens) of every stage's short and long window, the
    extension and the final validation's long window."""
    hp = tg.Hyperparameters()
    for tokens, seq_len, windows in zip((*hp.micro_batch_tokens, hp.micro_batch_tokens[-1]),
                                        (*hp.stage_seq_lens, hp.stage_seq_lens[-1]), hp.stage_windows):
        for window in windows:
            yield tokens, seq_len, window * hp.window_block
    yield hp.micro_batch_tokens[-1], hp.stage_seq_lens[-1], hp.final_long_window * hp.window_block


def loaded_fa3():
    try:
        return choose(torch.device("cuda"), "fa3", routes=("fa3-interface",))
    except UserError:
        return None


@GPU_ONLY
@pytest.mark.parametrize("paired", [False, True])
@pytest.mark.parametrize("tokens, seq_len, window", list(stage_cases()))
def test_backends_agree_at_model_shapes(tokens, seq_len, window, paired):
    """FA3 (when installed) and torch's varlen FA2, bf16, agree with each other at the training shapes (paired heads:
    twice the rows, half the heads), outputs and gradients; both match an fp32 masked-SDPA reference on the first
    4096 rows (the (T, T) mask does not fit at full size)."""
    torch.manual_seed(tokens + window)
    rows, heads = (2 * tokens, 3) if paired else (tokens, 6)
    cu = document_starts(tokens, seq_len, seed=window) * (2 if paired else 1)
    max_len = seq_len * (2 if paired else 1)
    q, k, v, grad_out = (torch.randn(rows, heads, 128, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    kernels = ["varlen"] + (["fa3"] if loaded_fa3() else [])
    full = {kernel: run_attention(kernel, q, k, v, cu, max_len, window, grad_out) for kernel in kernels}
    if "fa3" in full:
        for name, a, b in zip(("out", "dq", "dk", "dv"), full["fa3"], full["varlen"]):
            assert rel_error(a, b) < 1e-2, (name, rel_error(a, b))
    n = 4096
    head = torch.cat([cu[cu < n], cu.new_tensor([n])])
    ref = run_attention("sdpa", q[:n].float(), k[:n].float(), v[:n].float(), head, max_len, window, grad_out[:n].float())
    for kernel in kernels:
        small = run_attention(kernel, q[:n], k[:n], v[:n], head, max_len, window, grad_out[:n])
        for name, a, b in zip(("out", "dq", "dk", "dv"), small, ref):
            assert torch.isfinite(a).all() and rel_error(a, b) < 1e-2, (kernel, name, rel_error(a, b))


@GPU_ONLY
def test_torch_registered_fa3_matches_reference():
    """The fa3-torch route: with torch's FA3 activated, varlen_attn runs FA3 and still matches fp32 SDPA."""
    from torch.nn import attention
    try:
        choice = choose(torch.device("cuda"), "fa3", routes=("fa3-torch",))
    except UserError as e:
        pytest.skip(f"torch's FA3 route is not available: {e}")
    try:
        torch.manual_seed(0)
        T, window = 4096, 384
        cu = document_starts(T, 896, seed=1)
        q, k, v, grad_out = (torch.randn(T, 6, 128, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        got = run_attention(choice.kernel, q, k, v, cu, 896, window, grad_out)
        ref = run_attention("sdpa", q.float(), k.float(), v.float(), cu, 896, window, grad_out.float())
        for name, a, b in zip(("out", "dq", "dk", "dv"), got, ref):
            assert rel_error(a, b) < 1e-2, (name, rel_error(a, b))
        assert attention.current_flash_attention_impl() == "FA3"
    finally:
        attention.restore_flash_attention_impl()


def test_runtime_records_the_choice():
    """Every process carries its Attention in the Runtime; the model is built for its kernel."""
    rt = tg.setup_runtime(tg.Hyperparameters(device="cpu"), tg.MICRO_BATCHES)
    assert rt.attention.route == "sdpa" and dataclasses.is_dataclass(rt.attention)
