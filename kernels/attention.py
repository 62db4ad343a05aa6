"""Causal attention within documents and a sliding window: the reference (masked SDPA) and the fast kernels, with
the ways of loading them.

Record boxes run FlashAttention-3 (Hopper only), which users get by one of three routes: an installed
`flash_attn_interface` (a wheel, or tools/build_fa3.sh), torch's registered FA3 implementation (the same build,
behind torch's own flash-attention ops), or the Hugging Face kernel hub, as the reference does. Without FA3:
torch's varlen flash attention (FA2, CUDA), else the masked-SDPA reference (any device, small shapes).
"""
import importlib.metadata
import importlib.util
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from harness.cli import UserError

FA3_HUB_REPO = "varunneal/flash-attention-3"  # the kernel hub repository the reference loads FA3 from
FA3_INSTALL = ("build it with tools/build_fa3.sh (Hopper, CUDA >= 12.3) and put its output folder on PYTHONPATH, "
               "install a FlashAttention-3 wheel for your torch/CUDA, or `pip install kernels` for the kernel hub")
# --attention choice -> routes tried in order; a route is a way of loading one kernel
ATTENTION_CHOICES = {
    "auto": ("fa3-interface", "fa3-torch", "fa3-hub", "varlen", "sdpa"),
    "fa3": ("fa3-interface", "fa3-torch", "fa3-hub"),
    "varlen": ("varlen",),
    "sdpa": ("sdpa",),
}


@dataclass(frozen=True)
class Attention:
    kernel: str  # what attend() runs: "fa3" (FA3's varlen function), "varlen" (torch's) or "sdpa" (the reference)
    route: str  # the ATTENTION_CHOICES route that loaded it
    description: str  # for the log
    skipped: tuple = ()  # why each better route was not taken


class FA3:
    """FlashAttention-3's varlen function once a route has loaded it: process-wide, like the library behind it."""
    varlen_func = None


def _fa3_from_interface(_hub_wait: float) -> str:
    import flash_attn_interface  # ImportError: not installed
    FA3.varlen_func = flash_attn_interface.flash_attn_varlen_func
    return f"FlashAttention-3 via flash_attn_interface ({flash_attn_interface.__file__})"


def _fa3_from_torch(_hub_wait: float) -> str:
    from torch.nn import attention
    if "FA3" not in getattr(attention, "list_flash_attention_impls", lambda: [])():
        raise RuntimeError(f"torch {torch.__version__} registers no FA3 implementation (torch >= 2.11 does)")
    attention.activate_flash_attention_impl("FA3")  # torch's flash-attention ops (varlen_attn's) now run FA3
    return "FlashAttention-3 via torch's registered implementation (torch.nn.attention.varlen)"


# Runs in a child process: this package, `kernels`, shadows the hub client's package of the same name here, and a
# child can be stopped when the hub does not answer. Prints the __init__.py of the kernel package it loaded.
_HUB_LOOKUP = """
import sys
from kernels import get_kernel
try:
    module = get_kernel(sys.argv[1])
except ValueError:  # newer clients want an explicit version or revision
    module = get_kernel(sys.argv[1], revision="main")
print(module.__file__)
"""


def _fa3_from_hub(hub_wait: float) -> str:
    try:
        importlib.metadata.distribution("kernels")
    except importlib.metadata.PackageNotFoundError:
        raise RuntimeError("the hub client is not installed (`pip install kernels`)") from None
    with tempfile.TemporaryDirectory() as elsewhere:  # a working directory without this `kernels` package
        try:
            found = subprocess.run([sys.executable, "-c", _HUB_LOOKUP, FA3_HUB_REPO], cwd=elsewhere, text=True,
                                   capture_output=True, timeout=hub_wait)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"no answer within --fa3_hub_wait {hub_wait:g} s (offline?)") from None
    if found.returncode != 0:
        raise RuntimeError(f"get_kernel({FA3_HUB_REPO!r}) failed: "
                           f"{(found.stderr.strip().splitlines() or ['no output'])[-1]}")
    init = Path(found.stdout.strip().splitlines()[-1])
    spec = importlib.util.spec_from_file_location("fa3_hub", init, submodule_search_locations=[str(init.parent)])
    package = importlib.util.module_from_spec(spec)
    sys.modules["fa3_hub"] = package  # the package's relative imports resolve through this name
    spec.loader.exec_module(package)
    interface = getattr(package, "flash_attn_interface", None) or importlib.import_module("fa3_hub.flash_attn_interface")
    FA3.varlen_func = interface.flash_attn_varlen_func
    return f"FlashAttention-3 via the kernel hub ({FA3_HUB_REPO}: {init.parent})"


def _torch_varlen(_hub_wait: float) -> str:
    importlib.import_module("torch.nn.attention.varlen")  # ImportError before torch 2.10
    return "PyTorch varlen flash attention (FA2)"


_ROUTES = {  # route -> (kernel, loader, minimum CUDA compute capability or None for any device)
    "fa3-interface": ("fa3", _fa3_from_interface, (9, 0)),
    "fa3-torch": ("varlen", _fa3_from_torch, (9, 0)),
    "fa3-hub": ("fa3", _fa3_from_hub, (9, 0)),
    "varlen": ("varlen", _torch_varlen, (8, 0)),
    "sdpa": ("sdpa", lambda _hub_wait: "masked SDPA (an explicit (T, T) mask: for CPUs, tests and small shapes)", None),
}


def select_attention(choice: str, device: torch.device, hub_wait: float,
                     routes: tuple[str, ...] | None = None) -> Attention:
    """Load the first route of `choice` (an --attention value; or of `routes`, to load the one rank 0 chose) that
    works on this device. A choice with no working route is an error naming the install step."""
    assert choice in ATTENTION_CHOICES, f"unknown attention choice {choice!r}"
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    skipped = []
    for route in routes or ATTENTION_CHOICES[choice]:
        kernel, load, needs = _ROUTES[route]
        if needs is not None and (capability is None or capability < needs
                                  or (needs == (9, 0) and capability[0] != 9)):  # FA3: Hopper only
            have = "no CUDA GPU" if capability is None else f"compute capability {capability[0]}.{capability[1]}"
            skipped.append(f"{route}: needs {'a Hopper GPU' if needs == (9, 0) else 'compute capability 8.0+'} ({have})")
            continue
        try:
            return Attention(kernel, route, load(hub_wait), tuple(skipped))
        except Exception as e:  # whatever stops a route (missing module, bad library, no hub) falls through to the next
            skipped.append(f"{route}: {type(e).__name__}: {(str(e).splitlines() or [''])[0]}")
    if routes:
        raise UserError(f"this rank cannot load the attention route that rank 0 chose ({'; '.join(skipped)})")
    fix = f"to get FlashAttention-3, {FA3_INSTALL}" if choice == "fa3" else "use --attention auto"
    raise UserError(f"--attention {choice} is not available here ({'; '.join(skipped)}); {fix}")


def attend(q: Tensor, k: Tensor, v: Tensor, cu_seqlens: Tensor, max_len: int, scale: float,
           window: int, kernel: str) -> Tensor:
    """Causal attention within documents and within `window` keys behind each query.

    q, k, v: (T, heads, head_dim); cu_seqlens: (capacity,) int32 document starts, padded with T;
    kernel: Attention.kernel.
    """
    if kernel == "fa3":
        y = FA3.varlen_func(q, k, v, cu_seqlens_q=cu_seqlens, cu_seqlens_k=cu_seqlens, max_seqlen_q=max_len,
                            max_seqlen_k=max_len, softmax_scale=scale, causal=True, window_size=(window, 0))
        return y[0] if isinstance(y, tuple) else y
    if kernel == "varlen":
        from torch.nn.attention.varlen import varlen_attn
        return varlen_attn(q, k, v, cu_seqlens, cu_seqlens, max_len, max_len, scale=scale, window_size=(window, 0))
    return attend_reference(q, k, v, cu_seqlens, scale, window)


def attend_reference(q: Tensor, k: Tensor, v: Tensor, cu_seqlens: Tensor, scale: float, window: int) -> Tensor:
    """The same function as masked SDPA with an explicit (T, T) mask: for CPUs, tests and small shapes."""
    pos = torch.arange(q.size(0), device=q.device)
    doc = torch.searchsorted(cu_seqlens[1:], pos.to(cu_seqlens.dtype), right=True)
    behind = pos[:, None] - pos[None, :]
    mask = (doc[:, None] == doc[None, :]) & (behind >= 0) & (behind <= window)
    y = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                       attn_mask=mask, scale=scale)
    return y.transpose(0, 1)
