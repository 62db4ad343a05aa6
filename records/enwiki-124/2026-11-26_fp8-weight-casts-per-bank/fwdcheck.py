"""Loss and gradient checksums of one compiled FP8 micro-step of the full-width model, printed bit-exactly: run in
two code trees to compare their numerics (python3 fwdcheck.py, cwd = the tree)."""
import sys
import numpy as np
import torch
sys.path.insert(0, ".")
import train_gpt as tg  # noqa: E402
tg.configure_torch()
cfg = tg.GPTConfig(vocab_size=50304, model_dim=768, num_heads=6, head_dim=128, max_tokens=16384, attention="varlen",
                   fused_mlp=True, fp8_head=True, fp8_mlp=True, fp8_mlp_blocks=True, fp8_qkv=True)
torch.manual_seed(0)
with torch.device("cuda"):
    model = tg.GPT(cfg)
g = torch.Generator(device="cuda").manual_seed(1)
with torch.no_grad():
    for p in model.parameters():
        p.add_((torch.randn(p.shape, generator=g, device="cuda") * 0.02).to(p.dtype))
compiled = torch.compile(model, dynamic=True, fullgraph=True)
for seed, T in ((0, 8192), (1, 16384)):
    rng = np.random.default_rng(seed)
    docs = [np.concatenate([[50256], rng.integers(0, 50256, rng.integers(100, 2000))]) for _ in range(4 * T // 1000)]
    tokens = np.concatenate(docs).astype(np.uint16)[:T + 1]
    starts = np.flatnonzero(tokens[:-1] == 50256)
    ends = np.append(starts[starts > 0], T).astype(np.int32)
    mb = tg.make_micro_batch(tokens, ends, 64, tg.bigram_hash(tokens[:-1], model.bigram_embed.size(0)), torch.device("cuda"))
    sched = tg.ForwardSchedule(short_window=384, long_window=896, max_seq_len=2048,
                               mtp_weights=torch.tensor([1.0, 0.5, 0.25], device="cuda"))
    loss = compiled(mb.inputs, mb.targets, mb.cu_seqlens, mb.bigram, sched)
    loss.backward()
    grads = model.gradients()
    print(f"T={T} loss {loss.double().item().hex()} " + " ".join(
        f"{k}:{grads[k].double().abs().sum().item():.9e}" for k in ("attn_bank", "mlp_bank", "attn_lambdas", "lm_head")))
