import torch
from kernels.softcapped_ce import CEConfig, softcapped_ce_triton
from kernels.bench import time_ms
A, B, C = 23.0, 5.0, 7.5; GS = 0.75 / 448; V = 50304; n = 49152
torch.manual_seed(0)
logits = (8 * torch.randn(n, V, device="cuda")).to(torch.bfloat16)
targets = torch.randint(0, V, (n,), device="cuda"); w = torch.tensor([1.0], device="cuda")
res = []
for fast in (False, True):
    for r, v, nw in ((1, 4096, 16), (1, 8192, 16), (1, 2048, 8), (1, 4096, 8), (2, 2048, 16), (2, 4096, 16), (1, 8192, 32), (1, 4096, 32)):
        for rev in (True, False):
            cfg = CEConfig(r, v, nw, reverse_pass2=rev, fma_reciprocal=True, num_stages=1, fast_grad=fast)
            t = time_ms(lambda: softcapped_ce_triton(logits, targets, w, A, B, C, GS, torch.float8_e5m2, config=cfg), rep_ms=40)
            res.append((t, cfg))
for t, cfg in sorted(res, key=lambda x: x[0])[:14]:
    print(f"{t:.3f} {cfg}")
# pass-1 only lower bound: losses only with the gradient store skipped is not available; time a plain read of the logits
print("read logits once (sum):", f"{time_ms(lambda: logits.sum(dtype=torch.float32)):.3f} ms")
