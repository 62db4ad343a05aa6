"""adam_update's speed on table shards by how its graph was compiled: dynamic with a 12-element first call (as the
optimizer did before 654bcd3), dynamic with the shard's size first, or static (through a wrapper function, as
measured; the optimizer compiles adam_update itself with dynamic=False, the same graph). Each case in a fresh process
with empty caches:

    TORCHINDUCTOR_CACHE_DIR=/tmp/ic_CASE TRITON_CACHE_DIR=/tmp/tc_CASE python3 PATH/adam_bench.py CASE
    (CASE: tiny_first | big_first | static)
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root
import torch  # noqa: E402

import train_gpt as tg  # noqa: E402

CASES = ("tiny_first", "big_first", "static")
if len(sys.argv) != 2 or sys.argv[1] not in CASES or not torch.cuda.is_available():
    sys.exit(f"error: usage: python3 adam_bench.py {{{' | '.join(CASES)}}}, on a CUDA machine")
case = sys.argv[1]
dev = torch.device("cuda")
sizes = {"value_embeds_w2": 5 * 50304 * 768 // 2, "lm_head_w2": 768 * 50304 // 2, "value_embeds_w8": 5 * 50304 * 768 // 8}

def tensors(n, gdtype=torch.bfloat16):
    p = torch.randn(n, device=dev).bfloat16()
    g = torch.randn(n, device=dev).to(gdtype) * 1e-3
    return p, g, torch.zeros(n, device=dev), torch.zeros(n, device=dev)

sc = [torch.tensor(v) for v in (0.9, 0.99, 1e-10, 1e-3, 1e-6)]
with tg.torch_settings():
    dyn = torch.compile(tg.adam_update, dynamic=True, fullgraph=True)
    def table_update(*a):
        tg.adam_update(*a)
    static = torch.compile(table_update, dynamic=False, fullgraph=True)
    if case == "tiny_first":
        dyn(*tensors(12), *sc)
    fn = static if case == "static" else dyn
    for name, n in sizes.items():
        args = tensors(n)
        fn(*args, *sc)  # compile / autotune (big_first: the first call is a big one)
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ts = []
        for _ in range(20):
            s.record(); fn(*args, *sc); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
        ts.sort(); ms = ts[len(ts) // 2]
        print(f"{case:11s} {name:16s} n={n:>11,} median {ms:.3f} ms  {22 * n / ms / 1e9:.2f} TB/s (22 B/element)", flush=True)
