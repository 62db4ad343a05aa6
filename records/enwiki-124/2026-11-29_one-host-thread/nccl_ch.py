"""Reduce-scatter and all-gather at world 2 at the optimizer's sizes, timed by CUDA events (median of 12 after 3):
run under torchrun --nproc_per_node=2 with the NCCL environment under test."""
import os
import statistics
import sys

import torch
import torch.distributed as dist

if "RANK" not in os.environ or not torch.cuda.is_available():
    sys.exit("error: run it with torchrun --nproc_per_node=2 on a machine of two GPUs")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev)
SIZES = {"mlp_bank": 24 * 3072 * 768, "lm_head": 768 * 50304, "value_embeds": 5 * 50304 * 768}
res = []
for name, n in SIZES.items():
    full = torch.randn(n, device=dev, dtype=torch.bfloat16)
    shard = torch.empty(n // world, device=dev, dtype=torch.bfloat16)
    for op, f in (("RS", lambda: dist.reduce_scatter_tensor(shard, full)), ("AG", lambda: dist.all_gather_into_tensor(full, shard))):
        ts = []
        for i in range(15):
            dist.barrier(); torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); f(); e.record(); torch.cuda.synchronize()
            if i >= 3: ts.append(s.elapsed_time(e))
        ms = statistics.median(ts)
        res.append(f"{name} {op} {ms:.3f} ms {n * 2 / 2 / ms / 1e6:.0f} GB/s")
if rank == 0:
    print(os.environ.get("TAG", ""), "|", "; ".join(res), flush=True)
dist.destroy_process_group()
