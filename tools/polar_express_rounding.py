"""Why NorMuon's Polar Express input is normalized in fp32 and rounded to bf16 once (kernels/polar_express.py), where
the reference rounds the gradient to bf16 first and normalizes in bf16: error against fp64, on the CPU.

    python3 tools/polar_express_rounding.py

Gradient-like matrices (rank 16 plus noise) of the two bank shapes; "truth" runs the same five polynomials in fp64.
Measured 2026-11-23 (torch 2.13 CPU): input error 1.66e-3 (one rounding) against 2.5-2.7e-3 (two roundings); after
the five bf16 iterations 5.7e-2 / 5.1e-2 against 6.3e-2 / 5.6e-2 (attention / MLP shapes), i.e. ~10% less error,
and one fused pass instead of two.
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kernels.polar_express import NORM_EPS, NORM_SAFETY, orthogonalize_reference, spectral_norm_bound  # noqa: E402
from harness import cli  # noqa: E402


def gradient_like(n: int, rows: int, cols: int) -> torch.Tensor:
    return (torch.randn(n, rows, 16) @ torch.randn(n, 16, cols) + 0.3 * torch.randn(n, rows, cols)) * 1e-3


@cli.program
def main(argv=None):
    cli.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    torch.manual_seed(0)
    for n, rows, cols in [(8, 768, 768), (6, 3072, 768)]:
        g = gradient_like(n, rows, cols).double()
        exact_in = g / spectral_norm_bound(g)
        exact_out = orthogonalize_reference(exact_in)
        ours_in = (g.float() / spectral_norm_bound(g.float())).bfloat16()  # normalize in fp32, round once
        rounded = g.float().bfloat16()  # the reference's order: round, then normalize in bf16
        theirs_in = rounded / (rounded.norm(dim=(-2, -1), keepdim=True) * (1 + NORM_SAFETY) + NORM_EPS)

        def error(x, exact):
            return ((x.double() - exact).norm() / exact.norm()).item()
        print(f"{n} x {rows} x {cols}: input error ours {error(ours_in, exact_in):.2e}, "
              f"reference order {error(theirs_in, exact_in):.2e}; after five bf16 iterations ours "
              f"{error(orthogonalize_reference(ours_in), exact_out):.2e}, reference order "
              f"{error(orthogonalize_reference(theirs_in), exact_out):.2e}")


if __name__ == "__main__":
    main()
