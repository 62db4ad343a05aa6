import sys, itertools, torch
# run from the repository root; ce_exp.py (kernels/softcapped_ce.py with poly_exp2.patch applied) beside this file
import os
sys.path.insert(0, '.'); sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from triton.testing import do_bench
import ce_exp
from kernels.softcapped_ce import CEConfig
from kernels import bench as kb
from kernels.relu_square import MLPConfig, matmul_relu_square_triton, mlp_config
from kernels.fp8_linear import fp8_operands, fp8_rows, fp8_tensor
what = sys.argv[1]
def t(fn, rep=60):
    return sorted(do_bench(fn, warmup=20, rep=rep) for _ in range(3))[1]
if what == "ce":
    A, B, C = kb.CE_SOFTCAP
    for n, k in kb.CE_CASES[::-1]:
        x = (8 * torch.randn(n, 50304, device='cuda')).bfloat16()
        tg = torch.randint(0, 50304, (n,), device='cuda'); w = torch.tensor([1.0, 0.5, 0.25][:k], device='cuda')
        res = []
        for (r, v, nw), s, (p1, p2) in itertools.product([(1, 4096, 32), (1, 2048, 16), (1, 2048, 32), (1, 4096, 16), (1, 8192, 16), (1, 1024, 16), (2, 2048, 32), (2, 4096, 32)], (1,), ((0, 0), (1, 0), (0, 1))):
            cfg = CEConfig(r, v, nw, True, False, s)
            try:
                ms = t(lambda: ce_exp.softcapped_ce_triton(x, tg, w, A, B, C, kb.CE_GRAD_SCALE, torch.float8_e5m2, True, cfg, p1, p2))
            except Exception:
                ms = float('inf')
            res.append((ms, f"r{r} v{v} w{nw} s{s} poly{p1}{p2}"))
            print(f"n={n} K={k} {res[-1][1]}: {ms:.3f}", flush=True)
        print(f"BEST n={n}:", sorted(res)[:6], flush=True)
        del x
else:
    tokens = 49152
    x, grad_out, bank, _, post = kb._mlp_inputs(tokens)
    x8, w8, scale = fp8_operands(x, bank[0])
    (g8, g_scale), (w_out8, w_out_scale) = fp8_rows(grad_out), fp8_tensor(bank[1])
    runs = {"forward_fp8_out8": lambda c: matmul_relu_square_triton(x8, w8, config=c, scale=scale, fp8_out=True),
            "backward_fp8_out8": lambda c: matmul_relu_square_triton(g8, w_out8, post=post, config=c, scale=w_out_scale, row_scale=g_scale, fp8_out=True),
            "forward_bf16": lambda c: matmul_relu_square_triton(x, bank[0], config=c),
            "backward_bf16": lambda c: matmul_relu_square_triton(grad_out, bank[1], post=post, config=c)}
    for d, run in runs.items():
        fp8 = "fp8" in d
        table = mlp_config(torch.device('cuda'), d, 3072, 768)
        res = [(t(lambda: run(table)), f"{table} (table)")]
        print(d, res[0], flush=True)
        for bm, bn, bk, s, nw in itertools.product((128, 256), (128, 256), (128,) if fp8 else (64,), (2, 3, 4, 5), (4, 8)):
            if bm == 256 and bn == 256: continue
            c = MLPConfig(bm, bn, bk, s, nw)
            if c == table: continue
            try:
                ms = t(lambda: run(c))
            except Exception:
                ms = float('inf')
            res.append((ms, str(c)))
        print(f"BEST {d}:", sorted(res)[:5], flush=True)
