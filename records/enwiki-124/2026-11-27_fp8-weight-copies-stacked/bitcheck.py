import torch, train_gpt as tg
from kernels.fp8_linear import fp8_tensor
from kernels.relu_square import mlp_fp8_weights
from torch.utils._pytree import tree_leaves
torch.manual_seed(0)
cfg = tg.GPTConfig(vocab_size=256, model_dim=768, num_heads=6, head_dim=128, max_tokens=512, fused_mlp=True,
                   fp8_mlp=True, fp8_mlp_blocks=True, fp8_qkv=True)
m = tg.GPT(cfg).cuda()
with torch.no_grad():
    m.attn_bank.normal_().mul_(0.03); m.mlp_bank.normal_().mul_(0.03); m.attn_lambdas.uniform_(0.3, 1.7)
D = 768
def old():
    return ([fp8_tensor(lam[0] * w[:3 * D]) for lam, w in zip(m.attn_lambdas.bfloat16(), m.attn_bank)],
            [mlp_fp8_weights(*bank) for bank in m.mlp_bank[:cfg.num_layers]])
def new():
    return m.fp8_weights()
def per_layer(w8):
    q = list(zip(*(t.unbind(0) for t in w8[0]))); mm = list(zip(*(t.unbind(0) for t in w8[1])))
    return q, mm
with torch.no_grad():
    for name, f in (("eager", lambda g: g), ("compiled", lambda g: torch.compile(g, fullgraph=True))):
        a = tree_leaves(old_r := f(old)()); b = tree_leaves(per_layer(f(new)()))
        bad = [i for i, (x, y) in enumerate(zip(a, b)) if not torch.equal(x.view(torch.uint8) if x.dtype == torch.float8_e4m3fn else x, y.view(torch.uint8) if y.dtype == torch.float8_e4m3fn else y)]
        print(name, len(a), len(b), "differ:", bad[:20])
    if bad:
        names = ["q8", "qs"] * 10 + ["in8", "in_s", "outT8", "outT_s", "inT8", "inT_s", "out8", "out_s"] * 11
        for i in bad[:12]:
            x, y = a[i].float(), b[i].float()
            print(names[i], (x != y).sum().item(), "of", x.numel(), "max rel", ((x - y).abs() / y.abs().clamp_min(1e-30)).max().item())
