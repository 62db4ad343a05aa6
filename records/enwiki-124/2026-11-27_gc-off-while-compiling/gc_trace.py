import gc, os, sys, time
mode = sys.argv[1]
sys.path.insert(0, os.getcwd())  # run from the repository root
import torch
import train_gpt as tg
from tests.utils import batch_for
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd
class Done(Exception): pass
def fw(gm, _): return make_boxed_func(gm)
def bw(gm, _): raise Done()
cfg = tg.GPTConfig(vocab_size=50304, model_dim=768, num_heads=6, head_dim=128, max_tokens=4096, fused_mlp=True,
                   fp8_head=False, fp8_mlp=True, fp8_mlp_blocks=True, fp8_qkv=True, attention="sdpa")
model = tg.GPT(cfg)
tg.configure_torch()
compiled = torch.compile(model, backend=aot_autograd(fw_compiler=fw, bw_compiler=bw), fullgraph=True, dynamic=True)
hp = tg.Hyperparameters()
settings = tg.Schedule(hp).at(0)
mb, _ = batch_for(model, 1024, seed=0)
short, long = settings.windows
sched = tg.ForwardSchedule(short * 128, long * 128, 512, torch.tensor(settings.mtp_weights))
if mode == "freeze": gc.freeze()
if mode == "disable": gc.disable()
n = [0, 0.0]; st = {}
def cb(phase, info):
    if phase == "start": st["t"] = time.perf_counter()
    else: n[0] += 1; n[1] += time.perf_counter() - st["t"]
gc.callbacks.append(cb)
t0 = time.perf_counter()
try:
    compiled(mb.inputs, mb.targets, mb.cu_seqlens, mb.bigram, sched)
except Exception:
    pass
import resource
print(f"rss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1e6:.2f} GB")
print(f"{mode}: trace {time.perf_counter()-t0:.2f}s, gc {n[0]} collections {n[1]:.2f}s")
