"""CPU experiment: GPT.forward compiled as one graph or as two regions (the embedding and layers [0, k), then
layers [k, L) and the head; each region a copy of the forward's code for its layers). Times each region's first
call: Dynamo, AOTAutograd, Inductor's forward and backward. From the repository root:
    TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 python3 cpu_two_regions.py whole|split|split_ba [k]
"""
import os, sys, time
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, os.getcwd())  # run from the repository root
import torch, torch.utils._triton
import torch._inductor.config as inductor_config
import torch.nn.functional as F
from functools import partial
from triton.runtime.errors import InterpreterError
import train_gpt as tg
from tests.utils import batch_for
from kernels.relu_square import relu_square_mlp_fp8
from kernels.lm_head import head_loss_op
torch.utils._triton.triton_hash_with_backend = lambda: "interpreter"
inductor_config.cpu_backend = "triton"
mode, K = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 6
tokens = 128
cfg = tg.GPTConfig(vocab_size=256, model_dim=768, num_heads=6, head_dim=128, max_tokens=4 * tokens,
                   attention="varlen", fused_mlp=True, fp8_head=True, fp8_mlp=True, fp8_mlp_blocks=True, fp8_qkv=True)
torch.manual_seed(0)
model = tg.GPT(cfg)
mb, sched = batch_for(model, tokens)
tg.configure_torch()
norm = tg.norm

def views(self):
    cfg = self.cfg
    v = {}
    v["attn_w"] = dict(zip(cfg.attn_layers, self.attn_bank.unbind(0)))
    v["attn_gate"] = dict(zip(cfg.attn_layers, self.attn_gate_bank.unbind(0)))
    v["attn_lam"] = dict(zip(cfg.attn_layers, self.attn_lambdas.bfloat16().unbind(0)))
    w_in, w_out = self.mlp_bank.unbind(1)
    v["w_in"], v["w_out"] = w_in.unbind(0), w_out.unbind(0)
    ra, rm = self.resid_lambdas.bfloat16().unbind(1)
    v["resid_attn"], v["resid_mlp"] = ra.unbind(0), rm.unbind(0)
    post = self.post_lambdas.bfloat16().flatten(1).unbind(1)
    v["pa0"], v["pa1"], v["pm0"], v["pm1"] = (p.unbind(0) for p in post)
    v["x0_lam"] = self.x0_lambdas.bfloat16().unbind(0)
    v["bigram_lam"] = self.bigram_lambdas.bfloat16().unbind(0)
    return v

def layers(self, lo, hi, st, inputs, cu_seqlens, sched):
    cfg = self.cfg; V, G = cfg.vocab_size, cfg.gate_channels
    v = views(self)
    smear_lam, backout_lam, skip_lam = (self.scalars[self.SCALARS[k]] for k in ("smear", "backout", "skip"))
    mlp = partial(relu_square_mlp_fp8, blocks=cfg.fp8_mlp_blocks)
    n_ve = len(cfg.value_embed_layers)
    rows = inputs + V * torch.arange(n_ve, device=inputs.device)[:, None]
    value_embed = dict(zip(cfg.value_embed_layers, self._lookup("value_embeds", rows)))
    ve_gate = dict(zip(cfg.value_embed_layers, self.ve_gate_bank.unbind(0)))
    lane0, lane1, skip, backout, x0, bigram = st
    for layer in range(lo, hi):
        if layer == cfg.parallel_start:
            lane1 = lane0
        if layer == cfg.skip_to:
            gate = torch.sigmoid(skip_lam) * 2 * torch.sigmoid(F.linear(x0[:, :G], self.skip_gate))
            lane0 = lane0 + gate * skip
            lane1 = None if lane1 is None else lane1 + gate * skip
        if layer != cfg.mlp_only_layer:
            paired = layer in cfg.paired_head_layers
            long = layer in cfg.long_window_layers
            y = self._attention(norm(lane0), v["attn_w"][layer], v["attn_lam"][layer], v["attn_gate"][layer],
                                value_embed.get(layer), ve_gate.get(layer), cu_seqlens, sched,
                                window=sched.long_window if long else sched.short_window, paired=paired, key_offset=long)
            inject = v["x0_lam"][layer] * x0 + (v["bigram_lam"][layer] * bigram if layer > 0 else 0)
            if lane1 is None:
                lane0 = v["resid_attn"][layer] * lane0 + y + inject
            else:
                lane0 = v["resid_attn"][layer] * lane0 + v["pa0"][layer] * y + inject
                lane1 = v["resid_attn"][layer] * lane1 + v["pa1"][layer] * y
        if layer == cfg.skip_from:
            skip = lane0
        y = mlp(norm(lane0 if lane1 is None else lane1), v["w_in"][layer], v["w_out"][layer])
        lane0 = v["resid_mlp"][layer] * lane0 + v["pm0"][layer] * y
        if lane1 is not None:
            lane1 = v["resid_mlp"][layer] * lane1 + v["pm1"][layer] * y
        if layer == cfg.backout_layer:
            backout = lane0
    return lane0, lane1, skip, backout, x0, bigram

def region_a(self, inputs, cu_seqlens, bigram_inputs, sched, k):
    cfg = self.cfg; G = cfg.gate_channels
    smear_lam = self.scalars[self.SCALARS["smear"]]
    x = self._lookup("embed", inputs[None])[0]
    smear = smear_lam * torch.sigmoid(F.linear(x[1:, :G], self.smear_gate))
    x = torch.cat([x[:1], x[1:] + smear * x[:-1]])
    x0 = norm(x)
    bigram = self._lookup("bigram_embed", bigram_inputs[None])[0]
    bigram_lam = self.bigram_lambdas.bfloat16().unbind(0)
    st = (x0 + bigram_lam[0] * bigram, None, None, None, x0, bigram)
    return layers(self, 0, k, st, inputs, cu_seqlens, sched)

def region_b(self, st, inputs, targets, cu_seqlens, sched, k):
    cfg = self.cfg
    lane0, lane1, skip, backout, x0, bigram = layers(self, k, cfg.num_layers, st, inputs, cu_seqlens, sched)
    backout_lam = self.scalars[self.SCALARS["backout"]]
    x = lane0 if lane1 is None else (lane0 + lane1) * 0.5
    x = norm(x - backout_lam * backout)
    return head_loss_op(x, self.lm_head, targets, sched.mtp_weights, cfg.logit_cap, cfg.head_x_scale,
                        cfg.head_w_scale, cfg.head_grad_scale, cfg.fp8_head, cfg.tanh_sigmoid)[0]

def call(f):
    t = time.time()
    try:
        out = f()
    except InterpreterError:
        out = None
    return out, time.time() - t

print(f"config: layers {cfg.num_layers}, parallel_start {cfg.parallel_start}, skip {cfg.skip_from}->{cfg.skip_to}, backout {cfg.backout_layer}", flush=True)
if mode == "whole":
    compiled = torch.compile(model, dynamic=True, fullgraph=True)
    _, t = call(lambda: compiled(mb.inputs, mb.targets, mb.cu_seqlens, mb.bigram, sched).backward())
    print(f"whole: first forward+backward {t:.1f} s")
elif mode == "split_ba":
    cb = torch.compile(partial(region_b, model), dynamic=True, fullgraph=True)
    ca = torch.compile(partial(region_a, model), dynamic=True, fullgraph=True)
    T, D = mb.inputs.size(0), cfg.model_dim
    mk = lambda: torch.zeros(T, D, dtype=torch.bfloat16, requires_grad=True)
    st = (mk(), mk() if K > cfg.parallel_start else None, mk() if cfg.skip_from < K <= cfg.skip_to else None,
          mk() if cfg.backout_layer < K else None, mk(), mk())
    out, tb = call(lambda: cb(st, mb.inputs, mb.targets, mb.cu_seqlens, sched, K))
    print(f"region B first (layers {K}..): {tb:.1f} s", flush=True)
    _, ta = call(lambda: ca(mb.inputs, mb.cu_seqlens, mb.bigram, sched, K))
    print(f"region A second (layers 0..{K-1}): {ta:.1f} s", flush=True)
else:
    ca = torch.compile(partial(region_a, model), dynamic=True, fullgraph=True)
    cb = torch.compile(partial(region_b, model), dynamic=True, fullgraph=True)
    t0 = time.time()
    st, ta = call(lambda: ca(mb.inputs, mb.cu_seqlens, mb.bigram, sched, K))
    print(f"region A (layers 0..{K-1}): first forward (incl. its backward's compile) {ta:.1f} s", flush=True)
    if st is None:  # the interpreter failed in A's kernels: feed B dummies of the right shapes
        T, D = mb.inputs.size(0), cfg.model_dim
        mk = lambda: torch.zeros(T, D, dtype=torch.bfloat16, requires_grad=True)
        st = (mk(), mk() if K > cfg.parallel_start else None, mk() if cfg.skip_from < K <= cfg.skip_to else None,
              mk() if cfg.backout_layer < K else None, mk(), mk())
    out, tb = call(lambda: cb(st, mb.inputs, mb.targets, mb.cu_seqlens, sched, K))
    print(f"region B (layers {K}..): first forward (incl. its backward's compile) {tb:.1f} s; both {time.time()-t0:.1f} s")
print(torch._dynamo.utils.compile_times())
