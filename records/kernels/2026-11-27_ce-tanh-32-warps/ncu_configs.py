import sys, torch
sys.path.insert(0, '.')
from kernels.softcapped_ce import softcapped_ce_triton, CEConfig
torch.manual_seed(0)
A, B, C, V, n = 23.0, 5.0, 7.5, 50304, 49152
x = (torch.randn(n, V, device='cuda') * 4).bfloat16()
t = torch.randint(0, V, (n,), device='cuda')
w = torch.tensor([1.0], device='cuda')
cfgs = [CEConfig(1, 8192, 16), CEConfig(1, 8192, 32), CEConfig(1, 4096, 32), CEConfig(1, 8192, 16, reverse_pass2=False),
        CEConfig(1, 16384, 32), CEConfig(1, 2048, 8)]
for cfg in cfgs:
    print(cfg, flush=True)
    softcapped_ce_triton(x, t, w, A, B, C, out_dtype=torch.float8_e5m2, tanh_sigmoid=True, config=cfg)
    torch.cuda.synchronize()
if len(sys.argv) > 1:
    import triton.testing
    for cfg in cfgs:
        ms = triton.testing.do_bench(lambda: softcapped_ce_triton(x, t, w, A, B, C, out_dtype=torch.float8_e5m2, tanh_sigmoid=True, config=cfg), warmup=50, rep=300)
        print(f"{cfg}: {ms:.3f} ms", flush=True)
