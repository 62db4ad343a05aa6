import sys
import torch
from triton.testing import do_bench
sys.path.insert(0, ".")
sys.path.insert(0, "records/kernels/2026-11-29_relu-square-backward-warp-specialized")
from relu_square_ws import gluon_relu_square  # noqa: E402
from kernels.relu_square import matmul_relu_square_triton  # noqa: E402
from kernels.fp8_linear import fp8_rows, fp8_tensor, fp8_operands  # noqa: E402


def ms(fn):
    return do_bench(fn, warmup=50, rep=300, return_mode="median")


def compare(name, got, ref):
    o, o8, sc = got
    r, r8, rs = ref
    bits = lambda t: t.view(torch.uint8) if t.element_size() == 1 else t.view(torch.int16)
    d16 = (bits(o) != bits(r)).sum().item()
    d8 = (bits(o8) != bits(r8)).sum().item()
    ds = (sc != rs).sum().item()
    md = (o.float() - r.float()).abs().max().item()
    print(f"  {name}: bf16 differing {d16}, e4m3 differing {d8}, scales differing {ds}, max |diff| {md:.3e}", flush=True)


import os
torch.manual_seed(0)
D, H = 768, 3072
for T in [int(a) for a in sys.argv[1:] if a.isdigit()] or (1000, 16384, 49152):
    x = torch.randn(T, D, device="cuda", dtype=torch.bfloat16)
    g = torch.randn_like(x)
    bank = (torch.randn(2, H, D, device="cuda") / D ** 0.5).to(torch.bfloat16)
    x8, w8, scale = fp8_operands(x, bank[0])
    post = torch.relu(x @ bank[0].T).square()
    (g8, g_scale), (wo8, wo_scale) = fp8_rows(g), fp8_tensor(bank[1])
    ref_f = lambda: matmul_relu_square_triton(x8, w8, scale=scale, out_dtype=torch.bfloat16, fp8_out=True)
    ref_b = lambda: matmul_relu_square_triton(g8, wo8, post=post, scale=wo_scale, row_scale=g_scale,
                                              out_dtype=torch.bfloat16, fp8_out=True)
    if not os.environ.get("ONLY"):
        print(f"T={T}: triton fwd {ms(ref_f) * 1e3:.1f} us, bwd {ms(ref_b) * 1e3:.1f} us", flush=True)
    import os
    variants = eval(os.environ.get("VARIANTS", "[(3, (232, 40), 1, 168, 2)]"))
    for stages, regs, pw, mr, cp in variants:
        for name, fn, ref in [c for c in (("fwd", lambda: gluon_relu_square(x8, w8, scale, stages=stages, regs=regs, producer_warps=pw, maxnreg=mr, copies=cp), ref_f),
                              ("bwd", lambda: gluon_relu_square(g8, wo8, wo_scale, post=post, row_scale=g_scale,
                                                                stages=stages, regs=regs, producer_warps=pw, maxnreg=mr, copies=cp), ref_b)) if os.environ.get("ONLY", c[0]) == c[0]]:
            try:
                got = fn()
                torch.cuda.synchronize()
                print(f"T={T} gluon {name} stages={stages} regs={regs} pw={pw} maxnreg={mr} copies={cp}: {ms(fn) * 1e3:.1f} us", flush=True)
                compare(name, got, ref())
            except Exception as e:
                msg = str(e)
                print(f"T={T} gluon {name} stages={stages} regs={regs} pw={pw} maxnreg={mr} copies={cp}: FAIL {type(e).__name__}: {msg[-1500:]}",
                      flush=True)
                if "--stop" in sys.argv:
                    sys.exit(1)
