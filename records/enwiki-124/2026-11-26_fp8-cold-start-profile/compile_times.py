"""Cold start with per-kernel Triton compile times and per-buffer simplify_and_reorder times; dumps on SIGTERM."""
import collections, os, signal, sys, time
os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
import torch, triton
import triton.compiler.compiler as tcc
import torch._inductor.ir as ir
kern = collections.defaultdict(lambda: [0, 0.0]); simp = collections.defaultdict(lambda: [0, 0.0])
_compile = tcc.compile
def compile(src, *a, **k):
    t = time.perf_counter(); r = _compile(src, *a, **k)
    name = getattr(getattr(src, "fn", None), "__name__", None) or getattr(src, "name", "?")
    kern[name][0] += 1; kern[name][1] += time.perf_counter() - t
    return r
tcc.compile = compile; triton.compile = compile
_simp = ir.ComputedBuffer.simplify_and_reorder
def simplify_and_reorder(self, *a, **k):
    t = time.perf_counter(); r = _simp(self, *a, **k)
    try:
        key = ",".join(sorted({str(n.target).split(".")[-2] if "." in str(n.target) else str(n.target) for n in self.get_origins()}))[:150]
    except Exception:
        key = "?"
    simp[key][0] += 1; simp[key][1] += time.perf_counter() - t
    return r
ir.ComputedBuffer.simplify_and_reorder = simplify_and_reorder
def dump(*_):
    with open(os.path.join(os.environ.get("OUT", "."), os.environ.get("CS_ID", "cs") + "_cstime.txt"), "w") as f:
        f.write(f"triton compile: {sum(v[1] for v in kern.values()):.1f}s over {sum(v[0] for v in kern.values())} compiles\n")
        for n, (c, s) in sorted(kern.items(), key=lambda x: -x[1][1])[:60]:
            f.write(f"{s:8.2f}s x{c:3d} {n}\n")
        f.write(f"\nsimplify_and_reorder: {sum(v[1] for v in simp.values()):.1f}s over {sum(v[0] for v in simp.values())} buffers\n")
        for n, (c, s) in sorted(simp.items(), key=lambda x: -x[1][1])[:60]:
            f.write(f"{s:8.2f}s x{c:4d} {n}\n")
import atexit
atexit.register(dump)
sys.argv = ["train_gpt.py"] + sys.argv[1:]
sys.path.insert(0, os.getcwd())
import train_gpt
train_gpt.main(sys.argv[1:])
