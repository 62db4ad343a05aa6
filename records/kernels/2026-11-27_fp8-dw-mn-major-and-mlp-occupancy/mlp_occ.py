# ReLU² MLP kernel: one persistent program per SM (table) against two per SM (epilogue of one under the main loop
# of the other) and Triton's warp_specialize flag; FP8 forward and backward with e4m3 copies, as trained.
import sys, types, torch, triton
sys.path.insert(0, ".")
from triton.testing import do_bench
import kernels.relu_square as rs
from kernels.relu_square import MLPConfig, mlp_config
from kernels.fp8_linear import fp8_operands, fp8_rows, fp8_tensor
def t(fn): return sorted(do_bench(fn, warmup=10, rep=60) for _ in range(3))[1]
src = open("kernels/relu_square.py").read().split("# Custom ops")[0].replace("flatten=True)", "flatten=True, warp_specialize=True)")
ws = types.ModuleType("rs_ws"); ws.__file__ = "kernels/relu_square_ws.py"
try:
    exec(compile(src, "kernels/relu_square.py", "exec"), ws.__dict__)
except Exception as e:
    print("ws module failed", e); ws = None
D, H = 768, 3072
for T in (49152, 16384):
    torch.manual_seed(0)
    x = torch.randn(T, D, device="cuda", dtype=torch.bfloat16); g = torch.randn_like(x)
    bank = (torch.randn(2, H, D, device="cuda") / D**0.5).to(torch.bfloat16)
    post = torch.relu(x @ bank[0].T).square()
    x8, w8, scale = fp8_operands(x, bank[0]); (g8, gs), (wo8, wos) = fp8_rows(g), fp8_tensor(bank[1])
    flops = 2 * T * D * H
    ref = {"fwd": rs.matmul_relu_square_triton(x8, w8, scale=scale, fp8_out=True),
           "bwd": rs.matmul_relu_square_triton(g8, wo8, post=post, scale=wos, row_scale=gs, fp8_out=True)}
    runs = {"fwd": lambda m, c: m.matmul_relu_square_triton(x8, w8, config=c, scale=scale, fp8_out=True),
            "bwd": lambda m, c: m.matmul_relu_square_triton(g8, wo8, post=post, config=c, scale=wos, row_scale=gs, fp8_out=True)}
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"cublas fp8 T={T}: {t(lambda: torch._scaled_mm(x8, w8.T, scale.new_ones(()), scale, out_dtype=torch.bfloat16, use_fast_accum=True)):.3f} ms")
    for p in ("fwd", "bwd"):
        table = mlp_config(x.device, "forward_fp8_out8" if p == "fwd" else "backward_fp8_out8", H, D)
        cands = [(table, 1, rs), (table, 1, ws)] + [(MLPConfig(*c), k, rs) for k in (2, 3) for c in
                 [(128, 128, 128, 2, 4), (128, 128, 128, 3, 4), (128, 128, 128, 2, 8), (128, 128, 64, 4, 4),
                  (128, 128, 64, 3, 4), (128, 256, 128, 2, 8), (256, 128, 64, 2, 8), (64, 256, 128, 3, 4)]]
        for c, k, m in cands:
            if m is None: continue
            m.sm_count = (lambda d, k=k: k * sm)
            name = f"{p} T={T} {c.block_m}x{c.block_n}x{c.block_k} s{c.num_stages} w{c.num_warps} x{k}/SM{' ws' if m is ws else ''}"
            try:
                ms = t(lambda: runs[p](m, c))
                out = runs[p](m, c)
                ok = all(torch.equal(a, b) for a, b in zip(out, ref[p]))
                print(f"{name}: {ms:.3f} ms {flops/ms/1e9:.0f} TF/s {'same' if ok else 'DIFFERS'}", flush=True)
            except Exception as e:
                print(f"{name}: FAIL {type(e).__name__} {str(e)[:150]}", flush=True)
        rs.sm_count = lambda d: sm
