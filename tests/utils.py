"""Shared test helpers."""
import torch

HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if HAS_CUDA else "cpu"


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
