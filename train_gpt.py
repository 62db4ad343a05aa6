"""NanoGPT speedrun trainer: a clean-room implementation of the modded-nanogpt record
"Flattened GPT forward, removed post-attention lambdas, added transpose kernels" (PR #233,
https://github.com/KellerJordan/modded-nanogpt, 88.8 s to 3.28 FineWeb val loss on 8xH100).

    torchrun --standalone --nproc_per_node=8 train_gpt.py          # the record (any world size dividing 8)
    ./run.sh                                                       # same, on every visible GPU; tiny CPU demo without one
    python3 train_gpt.py --device cpu --compile False ...          # smoke test (see run.sh for a tiny config)

This file is the recipe: settings, model, optimizer, data loader, schedule, CUDA graphs, the training loop. The
kernels live in kernels/, the shard format in data/shards.py, and the harness around a run (settings parsing,
log, guard, checkpoints, profiling) in harness/. Every knob lives in `Hyperparameters` and can be set as
`--name value` or `--name=value`. Importing the file runs nothing: main() sets up the process.
"""
import contextlib
import dataclasses
import math
import os
import re
import sys
import time

PROCESS_START = time.time()  # for the startup-time report
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from data.shards import check_roles, find_shards, identities
from harness import compile_helpers
from harness.cli import UserError, program, shown
from harness.files import check_input_file
from harness.settings import need, parse_args, runtime

# -----------------------------------------------------------------------------
# Hyperparameters: every knob of the run. Defaults reproduce the record on 8xH100. A runtime(...) setting says how a
# run runs, not what it computes: a resumed run may change it.

MICRO_BATCHES = 8  # per step: one per GPU of the record's 8xH100 box; fewer GPUs accumulate 8 / world_size each
STAGES = 3  # training stages of growing batch, sequence length and windows; the extension stage follows them
GATE_CHANNELS = 12  # the model's gates read the first 12 channels of their input stream
ATTENTION = ("auto", "fa3", "varlen", "sdpa")  # --attention's choices (kernels/attention.py: ATTENTION_CHOICES)

@dataclass
class Hyperparameters:
    # data
    train_files: str = "data/fineweb10B/fineweb_train_*.bin"  # glob of the training shards, read in name order
    val_files: str = "data/fineweb10B/fineweb_val_*.bin"  # glob of the validation shards
    val_tokens: int = 10_485_760  # fixed so that val losses compare across runs
    vocab_size: int = 50257  # GPT-2; padded to a multiple of 128 in the model
    bos_id: int = 50256  # document separator that starts every document
    max_doc_tokens: int = 0  # a longer document is read as pieces of this many tokens (0: whole, cut at the stage's length)
    # schedule (in optimizer steps)
    num_scheduled_steps: int = 1450  # steps over which the lr, window and batch schedules run
    num_extension_steps: int = 40  # extra steps at the final lr and longer windows
    cooldown_frac: float = 0.60  # lr decays linearly over this final fraction of scheduled steps...
    final_lr_frac: float = 0.15  # ...down to this fraction of the stage lr
    untie_frac: float = 2 / 3  # the embedding unties from the LM head after this fraction of the scheduled steps
    # three equal stages, then the extension stage; tokens are per micro-batch (MICRO_BATCHES a step)
    micro_batch_tokens: tuple = (8 * 2048, 16 * 2048, 24 * 2048)  # tokens per micro-batch by stage
    stage_seq_lens: tuple = (896, 2048, 2048)  # documents are cut at this length
    stage_lr_muls: tuple = (1.0, 1.52, 1.73)  # ~ (batch / first batch) ** 0.6 and ** 0.5
    stage_windows: tuple = ((1, 3), (3, 7), (5, 11), (6, 13))  # (short, long) attention windows in blocks; last = extension
    stage_mtp_weights: tuple = (((1.0, 0.5, 0.25), (1.0, 0.5, 0.0)), ((1.0, 0.5), (1.0, 0.0)), ((1.0,), (1.0,)))  # (start, end)
    window_block: int = 128  # tokens per window block
    final_long_window: int = 20  # long window (blocks) for the final validation, beyond training (YaRN extends)
    # model
    model_dim: int = 768  # width of the residual stream
    num_heads: int = 6  # attention heads (even: paired-head layers pair them)
    head_dim: int = 128  # channels per head; num_heads * head_dim = model_dim
    fp8_head: bool = True  # FP8 LM-head matmul on CUDA (bf16 elsewhere)
    fp8_body: bool = True  # CUDA: FP8 QKV forward, the MLP; tanh.approx CE sigmoid (False: exact math)
    # optimizer
    adam_lr: float = 0.008  # Adam's base lr (embeddings, head, gates, scalars; times PARAM_RULES' multipliers)
    adam_eps: float = 1e-10  # Adam's epsilon
    adam_wd: float = 0.005  # Adam's cautious weight decay (applied as lr^2 * wd)
    muon_lr: float = 0.023  # NorMuon's base lr for the attention and MLP banks
    muon_wd: float = 1.2  # NorMuon's cautious weight decay (applied as lr * wd)
    muon_beta2: float = 0.95  # NorMuon second-moment decay
    muon_momentum_min: float = 0.85  # NorMuon momentum at the start and the end of the run...
    muon_momentum_max: float = 0.95  # ...and in between
    muon_momentum_warmup_steps: int = 300  # steps of the linear rise from min to max
    muon_momentum_cooldown_steps: int = 50  # final steps of the linear fall back to min
    # evaluation and logging
    val_every: int = 250  # validate every N steps (0: only at the end); excluded from train time
    val_micro_batch_tokens: int = 4 * 64 * 1024  # tokens per rank per validation forward
    seed: int = 0  # initial weights (data order is fixed by the shards)
    run_id: str = ""  # the log's file name in --log_dir (and the checkpoints' prefix); default: a fresh uuid
    log_dir: str = runtime("logs")  # folder of the log, captures, traces and checkpoints; a --resume's: its checkpoint's folder unless given
    # runtime
    device: str = runtime("auto")  # auto | cuda | cpu
    attention: str = runtime("auto")  # auto | fa3 | varlen | sdpa; auto: FA3 on Hopper by any installed route, else varlen (CUDA), else sdpa
    fa3_hub_wait: float = runtime(120.0)  # seconds to wait for the Hugging Face kernel hub's FA3 (offline: then fall through)
    dist_timeout: float = runtime(300.0)  # seconds processes wait for each other (joining, collectives) and a step may take before the run ends; above a cold compile (100-135 s)
    compile: bool = runtime(True)  # torch.compile the model and optimizer math
    compile_helpers: bool = runtime(True)  # CUDA warm-up: helper processes compile the backward, optimizer and validation graphs meanwhile
    cuda_graphs: bool = runtime(True)  # CUDA: replay each micro-batch's forward+backward as a CUDA graph
    warmup: bool = runtime(True)  # untimed compile and capture warm-up on each stage's first steps, then a state reset
    save_checkpoint: bool = runtime(False)  # save a resumable checkpoint at the end and when a run stops early: <log_dir>/<run_id>_checkpoint_rank<r>.pt, one per rank
    checkpoint_every: int = runtime(0)  # also save it every N steps (0: never)
    resume: str = ""  # continue the run saved in this checkpoint (same step, data position, schedule, state), appending to <run_id>.txt and saving its checkpoints in its --log_dir
    overwrite: bool = runtime(False)  # allow a --run_id whose log already exists (its files are replaced)
    # reliability and debugging
    guard_every: int = runtime(50)  # check the non-finite flag every N steps (as published one check earlier: no wait) and at validations; 0: off
    inject_fault_step: int = -1  # try the guard: this step's loss weights are NaN, so its loss and gradients are too
    profile_steps: str = runtime("")  # "a:b": torch.profiler Chrome trace of steps a..b-1 (rank 0) in log_dir
    sync_debug: bool = runtime(False)  # CUDA: warn on any device->host sync inside the timed steps
    emulate_world_size: int = 0  # timing only: one process runs one rank's share of a W-GPU step, no collectives
    emulate_rank: int = 0  # that rank (a compile helper: its run's, whose optimizer shards make other graphs than rank 0's)


def validate(hp: Hyperparameters):
    """Every setting in range and every rule between settings met, else a one-line error naming the flag and a valid
    value: before anything is loaded or built."""
    defaults = Hyperparameters()

    def positive_ints(name: str, n: int):
        value = getattr(hp, name)
        need(len(value) == n and all(isinstance(v, int) and v > 0 for v in value),
             f"--{name} {value!r} needs {n} positive integers, e.g. {getattr(defaults, name)!r}")

    need(hp.vocab_size >= 2, f"--vocab_size {hp.vocab_size} must be at least 2")
    need(0 <= hp.bos_id < hp.vocab_size, f"--bos_id {hp.bos_id} must be a token id below --vocab_size {hp.vocab_size}")
    need(hp.val_tokens > 0 and hp.val_micro_batch_tokens > 0 and hp.val_tokens % hp.val_micro_batch_tokens == 0,
         f"--val_tokens {hp.val_tokens} must be a positive multiple of --val_micro_batch_tokens {hp.val_micro_batch_tokens}")
    need(hp.num_scheduled_steps >= STAGES, f"--num_scheduled_steps {hp.num_scheduled_steps} must be at least {STAGES} (one per stage)")
    need(hp.num_extension_steps >= 0, f"--num_extension_steps {hp.num_extension_steps} must be 0 or more")
    for name in ("cooldown_frac", "final_lr_frac"):
        need(0.0 <= getattr(hp, name) <= 1.0, f"--{name} {getattr(hp, name)} must be in [0, 1]")
    need(0.0 < hp.untie_frac <= 1.0, f"--untie_frac {hp.untie_frac} must be in (0, 1]")
    positive_ints("micro_batch_tokens", STAGES)
    positive_ints("stage_seq_lens", STAGES)
    need(all(s <= t + 1 for s, t in zip(hp.stage_seq_lens, hp.micro_batch_tokens)),  # + 1: the last target
         f"--stage_seq_lens {hp.stage_seq_lens!r} may exceed --micro_batch_tokens {hp.micro_batch_tokens!r} by one "
         "token at most (a micro-batch reads one token more than its size, the last target)")
    need(len(hp.stage_lr_muls) == STAGES and all(0 < m <= 100 for m in hp.stage_lr_muls),
         f"--stage_lr_muls {hp.stage_lr_muls!r} needs {STAGES} multipliers in (0, 100], e.g. (1.0, 1.52, 1.73)")
    windows = hp.stage_windows
    need(len(windows) == STAGES + 1 and all(len(w) == 2 and all(isinstance(b, int) and b > 0 for b in w)
                                            and w[0] <= w[1] for w in windows),
         f"--stage_windows {windows!r} needs {STAGES + 1} (short, long) pairs of positive block counts, short <= long")
    longs = [w[1] for w in windows] + [hp.final_long_window]
    need(all(a <= b for a, b in zip(longs, longs[1:])),
         f"--stage_windows long windows {longs[:-1]} and --final_long_window {hp.final_long_window} may only grow "
         "(YaRN extends the rotary positions to longer windows, never shorter)")
    need(hp.window_block > 0, f"--window_block {hp.window_block} must be positive, e.g. 128")
    need(len(hp.stage_mtp_weights) == STAGES and all(
        len(pair) == 2 and len(pair[0]) == len(pair[1]) >= 1 and all(w >= 0 for w in pair[0] + pair[1])
        and sum(pair[0]) > 0 and sum(pair[1]) > 0 for pair in hp.stage_mtp_weights),
        f"--stage_mtp_weights needs {STAGES} (start, end) pairs of equally long non-negative weight tuples, none all "
        f"zero, e.g. {defaults.stage_mtp_weights!r}")
    need(min(hp.model_dim, hp.num_heads, hp.head_dim) > 0, "--model_dim, --num_heads and --head_dim must be positive")
    # heads come in pairs (paired-head attention) of a multiple of 4 channels (half-truncated rotary pairs)
    need(hp.model_dim % 8 == 0 and hp.model_dim >= GATE_CHANNELS,
         f"--model_dim {hp.model_dim} must be a multiple of 8 and at least {GATE_CHANNELS} (an even number of heads of "
         f"a multiple of 4 channels; the gates read {GATE_CHANNELS}), e.g. {max(16, hp.model_dim // 8 * 8)}")
    heads = min(range(2, hp.model_dim // 4 + 1, 2), key=lambda h: (hp.model_dim % (4 * h) != 0, abs(hp.model_dim / h - 128)))
    need(hp.num_heads * hp.head_dim == hp.model_dim and hp.num_heads % 2 == 0 and hp.head_dim % 4 == 0,
         f"--num_heads {hp.num_heads} x --head_dim {hp.head_dim} must equal --model_dim {hp.model_dim}, with an even "
         f"number of heads of a multiple of 4 channels, e.g. --num_heads {heads} --head_dim {hp.model_dim // heads}")
    if (hp.fp8_head or hp.fp8_body) and hp.device != "cpu":  # FP8 matmuls (cuBLASLt, TMA) need 16-byte rows
        need(hp.model_dim % 16 == 0 and all(t % 16 == 0 for t in hp.micro_batch_tokens),
             f"FP8 matmuls need --model_dim {hp.model_dim} and --micro_batch_tokens {hp.micro_batch_tokens!r} in "
             "multiples of 16; change them or pass --fp8_head False --fp8_body False")
    for name in ("adam_lr", "muon_lr"):
        need(0 < getattr(hp, name) <= 1, f"--{name} {getattr(hp, name)} must be in (0, 1], e.g. {getattr(defaults, name)}")
    need(0 < hp.adam_eps < 1, f"--adam_eps {hp.adam_eps} must be in (0, 1), e.g. 1e-10")
    for name in ("adam_wd", "muon_wd"):
        need(0 <= getattr(hp, name) <= 100, f"--{name} {getattr(hp, name)} must be in [0, 100]")
    for name in ("muon_beta2", "muon_momentum_min", "muon_momentum_max"):
        need(0 <= getattr(hp, name) < 1, f"--{name} {getattr(hp, name)} must be in [0, 1)")
    need(hp.muon_momentum_min <= hp.muon_momentum_max, "--muon_momentum_min may not exceed --muon_momentum_max")
    for name in ("muon_momentum_warmup_steps", "muon_momentum_cooldown_steps"):
        need(getattr(hp, name) >= 1, f"--{name} {getattr(hp, name)} must be at least 1")
    for name in ("max_doc_tokens", "val_every", "guard_every", "checkpoint_every", "emulate_world_size"):
        need(getattr(hp, name) >= 0, f"--{name} {getattr(hp, name)} must be 0 (off) or more")
    need(hp.emulate_world_size == 0 or MICRO_BATCHES % hp.emulate_world_size == 0,
         f"--emulate_world_size {hp.emulate_world_size} must divide {MICRO_BATCHES}: 1, 2, 4 or 8")
    need(0 <= hp.emulate_rank < max(hp.emulate_world_size, 1), f"--emulate_rank {hp.emulate_rank} must be a rank of --emulate_world_size {hp.emulate_world_size or '(set it first)'}")
    total = hp.num_scheduled_steps + hp.num_extension_steps  # a setting that cannot take effect in the run is refused
    extent = f"this run's {total} steps (0 to {total - 1}: --num_scheduled_steps + --num_extension_steps)"
    need(-1 <= hp.inject_fault_step < total, f"--inject_fault_step {hp.inject_fault_step} must be -1 or in {extent}")
    for name in ("val_every", "guard_every", "checkpoint_every"):  # the record's defaults may outlast a short run
        need(getattr(hp, name) in (0, getattr(defaults, name)) or getattr(hp, name) <= total,
             f"--{name} {getattr(hp, name)} is past the end of {extent}: at most {total}, or 0 (off)")
    need(not (hp.sync_debug and hp.device == "cpu"), "--sync_debug True warns of CUDA syncs: --device cpu has none")
    need(0 <= hp.seed < 2**63, f"--seed {hp.seed} must be in [0, 2**63)")
    need(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{,199}", hp.run_id or "x") is not None,  # its files' names: <= 255
         f"--run_id {shown(hp.run_id)!r} must be a plain file name (up to 200 letters, digits, '.', '_', '-'); "
         "--log_dir sets the folder")
    need(hp.device in ("auto", "cuda", "cpu"), f"--device must be auto, cuda or cpu, not {hp.device!r}")
    need(hp.attention in ATTENTION, f"--attention must be one of {', '.join(ATTENTION)}, not {hp.attention!r}")
    need(hp.fa3_hub_wait >= 0, f"--fa3_hub_wait {hp.fa3_hub_wait} must be 0 or more seconds")
    need(hp.dist_timeout > 0, f"--dist_timeout {hp.dist_timeout} must be positive seconds, e.g. 300")
    need(not hp.profile_steps or re.fullmatch(r"\d+:\d+", hp.profile_steps) is not None
         and int(hp.profile_steps.split(":")[0]) < int(hp.profile_steps.split(":")[1]) <= total,
         f"--profile_steps {hp.profile_steps!r} must look like 100:103 (first step, step after the last) in {extent}")


def check_resume(hp: Hyperparameters):  # a run's first check: before the process group and the kernels (minutes)
    if hp.resume:  # its contents: harness/checkpoint.load_checkpoint
        check_input_file(hp.resume, "--resume", "*_checkpoint_rank0.pt")


def check_files(hp: Hyperparameters):  # --check: the globs match shard files, none in both roles; --resume readable
    check_resume(hp)
    check_roles(dict.fromkeys(find_shards(hp.train_files, "train")), dict.fromkeys(find_shards(hp.val_files, "val")))


if __name__ == "__main__":  # --help, --check and setting errors answer, and a cold start's helpers start, before the heavy imports
    program(lambda argv: compile_helpers.spawn(parse_args(argv, Hyperparameters, validate, check_files)[0], __file__, argv))(sys.argv[1:])

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import Tensor, nn  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

from data.shards import check_val_shards, fingerprint, read_header, read_tokens, scan_train_shards  # noqa: E402
from harness.checkpoint import Checkpoints, copy_tree, header, load_checkpoint  # noqa: E402
from harness.guard import NonFiniteError, NonFiniteGuard, StopRequest, Stopped, Watch, run_ending, save_capture  # noqa: E402
from harness.launch import Runtime, Watchdog, agree, keep_freed_memory, setup_runtime  # noqa: E402
from harness.log import Logger, claim_run, open_log  # noqa: E402
from harness.profiling import StepProfiler, sync_debug  # noqa: E402
from harness.report import StepLines, TrainClock, compile_time_breakdown, compiled_by_rank, peak_memory, summary  # noqa: E402
from kernels.attention import Attention, attend  # noqa: E402
from kernels.configs import PersistentRowReductions  # noqa: E402
from kernels.embedding import lookup_op, round_flagged_rows, zero_flagged_rows  # noqa: E402
from kernels.fp8_linear import fp8_linear, fp8_tensor  # noqa: E402
from kernels.lm_head import head_loss_op  # noqa: E402
from kernels.polar_express import polar_express  # noqa: E402
from kernels.relu_square import (mlp_fp8_weights, relu_square_mlp_fp8, relu_square_mlp_op,  # noqa: E402
                                 relu_square_mlp_reference)
from kernels.transpose import transpose_add, transpose_copy  # noqa: E402


@contextlib.contextmanager
def torch_settings():
    """Torch config patches this script relies on, undone on exit (main, tools/replay.py, tests that compile)."""
    # Python floats reaching compiled code (GPTConfig's scales) are constants: symbolic ones under dynamic=True
    # restarted the model's compile once to specialize them, ~25% of its compile time.
    dynamo = dict(specialize_float=True)
    # Inductor's occupancy retry: ~5 s of a cold start, no faster step (records/enwiki-124/2026-11-26_cold-start).
    # Rows of at most 1024 elements reduce in one pass, also where a fused part reads them out of order (the rotary's
    # pairs; 1.2% off a step), rows under 256 with fixed launch configs, not a timed draw (kernels/configs.py).
    # No matmul padding: Inductor timed it per process for the six-column gates, and processes that chose differently
    # compiled graphs the others' caches missed; no slower (records/enwiki-124/2026-11-29_no-mm-padding).
    inductor = dict(dynamic_scale_rblock=False, inductor_choices_class=PersistentRowReductions, shape_padding=False)
    # FA3's attention is a torch.autograd.Function, which AOTAutograd's cache refuses by default: every warm start
    # retraced the model (records/enwiki-124/2026-11-26_vs-reference-aot-cache).
    functorch = dict(autograd_cache_allow_custom_autograd_functions=True)
    with (torch._dynamo.config.patch(dynamo), torch._inductor.config.patch(inductor),
          torch._functorch.config.patch(functorch)):
        yield


# -----------------------------------------------------------------------------
# Model configuration (GPT-2-small-sized, 11 layers with named roles) and rotary embeddings

@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int  # already padded to a multiple of 128
    model_dim: int
    num_heads: int
    head_dim: int
    max_tokens: int  # longest packed micro-batch (positions are rows of it); sizes the rotary table
    attention: str = "sdpa"  # "fa3" | "varlen" (PyTorch flash) | "sdpa" (masked, any device)
    fp8_head: bool = False
    fused_mlp: bool = False  # Triton ReLU² MLP kernel (CUDA) instead of plain PyTorch ops
    fp8_mlp: bool = False  # that kernel's first matmul in FP8 (with fused_mlp only)
    fp8_mlp_blocks: bool = False  # and its second matmul, the backward's d_pre and dx (block and row scales)
    fp8_mlp_dw: bool = False  # and its weight gradients (per-tensor scales; with fp8_mlp_blocks only)
    fp8_qkv: bool = False  # the QKV projection's forward in FP8 (kernels/fp8_linear.py: it reads normed rows)
    tanh_sigmoid: bool = False  # the CE kernel's sigmoid from tanh.approx (CUDA; kernels/softcapped_ce.py)
    num_layers: int = 11
    # Layer roles. All layers have an MLP; one has no attention (@YouJiacheng).
    mlp_only_layer: int = 6
    parallel_start: int = 7  # from here attention reads lane 0 and the MLP lane 1 (parallel residual lanes)
    skip_from: int = 3  # the stream after this layer's attention is added back...
    skip_to: int = 6  # ...before this layer, through a learned gate
    backout_layer: int = 7  # this layer's output is partly subtracted before the head
    value_embed_layers: tuple = (1, 2, 8, 9, 10)  # one value-embedding table each, in this order
    paired_head_layers: tuple = (0, 2, 5, 9)
    long_window_layers: tuple = (3, 10)  # the rest use the short window; these also get the key offset
    gate_channels: int = GATE_CHANNELS
    max_world_size: int = MICRO_BATCHES  # the MLP bank pads so that whole matrices split over this many ranks
    # FP8 LM-head scales: inputs, weights and logit grads are divided by these before the e4m3/e5m2 cast
    head_x_scale: float = 100 / 448
    head_w_scale: float = 1.6 / 448
    head_grad_scale: float = 0.75 / 448  # for the summed loss' gradient; the loss scale joins the FP8 matmuls' scales
    logit_cap: tuple = (23.0, 5.0, 7.5)  # logits -> A * sigmoid((z + B) / C)
    attn_scale: float = 0.1  # softmax scale before YaRN (learned-scale experiments by @leloykun and @brendanh0gan)
    # YaRN, when a window grows from old to new tokens: rotary frequencies that turn at most yarn_alpha times within
    # the old window slow down by old/new, those turning yarn_beta times or more keep their speed (linear between);
    # the softmax scale grows by 1 + yarn_scale_gain * log(new/old)
    yarn_alpha: float = 1.0
    yarn_beta: float = 32.0
    yarn_scale_gain: float = 0.2
    loss_scale: float = 1.0  # the training loss is multiplied by this (1 / grad_accum_steps) before backward
    eval_chunk: int = 32768  # rows of logits materialized at once during validation

    def __post_init__(self):
        L = self.num_layers
        roles = [self.mlp_only_layer, self.parallel_start, self.skip_from, self.skip_to, self.backout_layer,
                 *self.value_embed_layers, *self.paired_head_layers, *self.long_window_layers]
        assert all(0 <= r < L for r in roles), f"a layer role lies outside 0..{L - 1}"
        assert self.skip_from < self.skip_to and self.skip_from != self.mlp_only_layer
        assert self.mlp_only_layer not in self.paired_head_layers + self.long_window_layers
        assert not set(self.paired_head_layers) & set(self.long_window_layers), "key offset needs unpaired heads"
        assert self.num_heads * self.head_dim == self.model_dim, "num_heads * head_dim must equal model_dim"
        assert self.num_heads % 2 == 0, "paired-head attention needs an even number of heads"
        assert self.head_dim % 4 == 0 and self.model_dim >= self.gate_channels
        assert not self.fp8_mlp_blocks or (self.fp8_mlp and self.model_dim % 128 == 0), "fp8_mlp_blocks: fp8_mlp, D % 128"

    @property
    def attn_layers(self) -> list[int]:
        return [i for i in range(self.num_layers) if i != self.mlp_only_layer]

    @property
    def mlp_bank_layers(self) -> int:
        # pad so the 2 matrices per layer split evenly over the ranks (11 layers -> 12 at 8 ranks)
        return math.ceil(2 * self.num_layers / self.max_world_size) * self.max_world_size // 2


def norm(x: Tensor) -> Tensor:
    return F.rms_norm(x, (x.size(-1),))


class Rotary(nn.Module):
    """Half-truncated RoPE (@YouJiacheng) with YaRN rescaling when the attention window grows.

    Pairs of channels (2j, 2j+1) rotate by position * freq_j; the second half of the head has zero
    frequency ("stationary" channels, used by the key offset). One table serves both layouts: paired-head
    attention reads rows 2t and 2t + 1 for token t, so it holds 2 * max_tokens positions."""
    FILL_ROWS = 1 << 16  # filled by blocks of rows: fp32 angles, cosines and sines of all rows are GBs of transients

    def __init__(self, cfg: "GPTConfig"):
        super().__init__()
        self.cfg, self.head_dim = cfg, cfg.head_dim
        rows = 2 * cfg.max_tokens
        self.register_buffer("cos", torch.empty(rows, cfg.head_dim, dtype=torch.bfloat16), persistent=False)
        self.register_buffer("sin", torch.empty(rows, cfg.head_dim, dtype=torch.bfloat16), persistent=False)
        # YaRN's growth of the softmax scale, applied to queries: a tensor, so that a window change does
        # not recompile the model the way a new Python float would
        self.register_buffer("q_gain", torch.ones(()), persistent=False)
        self.reset()

    def reset(self):
        quarter = self.head_dim // 4
        freq = (1 / 1024) ** torch.linspace(0, 1, quarter, device=self.cos.device)
        self.freq = torch.cat([freq.repeat_interleave(2), freq.new_zeros(2 * quarter)])  # (head_dim,)
        self.q_gain.fill_(1.0)
        self._fill_tables()

    def extend(self, old_window: int, new_window: int):
        """YaRN (GPTConfig.yarn_*): slow the low frequencies by old/new, keep the fast ones, grow the softmax scale."""
        alpha, beta = self.cfg.yarn_alpha, self.cfg.yarn_beta
        turns = old_window * self.freq / (2 * math.pi)
        keep = ((turns - alpha) / (beta - alpha)).clamp(0, 1)
        ratio = old_window / new_window
        self.freq = self.freq * (ratio + keep * (1 - ratio))
        self.q_gain.mul_(self.cfg.yarn_scale_gain * math.log(new_window / old_window) + 1)
        self._fill_tables()

    def _fill_tables(self):
        sign = torch.ones_like(self.freq)
        sign[0::2] = -1  # x'[2j] = x[2j] cos + x[2j+1] sin, x'[2j+1] = x[2j+1] cos - x[2j] sin
        rows = self.cos.size(0)
        for start in range(0, rows, self.FILL_ROWS):
            end = min(start + self.FILL_ROWS, rows)
            theta = torch.outer(torch.arange(start, end, dtype=torch.float32, device=self.freq.device), self.freq)
            self.cos[start:end].copy_(theta.cos())
            self.sin[start:end].copy_(-theta.sin() * sign)

    def forward(self, x: Tensor) -> Tensor:
        """x: (T, heads, head_dim), position = row; or paired, (T, 2, heads / 2, head_dim): the attention's rows
        2t and 2t + 1, and head h = j * heads / 2 + i sits at position 2t + h % 2.
        The (2, heads / 2) split matches the attention's (2T, heads / 2) view, so that view merges two
        leading dimensions: other splits left divisions and modulos by the symbolic T in the compiled
        kernels' index math, and copies (on an H100 the rotary took 3.4x its static-shape time)."""
        T = x.size(0)
        if x.dim() == 4:
            half = torch.arange(x.size(1) * x.size(2), device=x.device).view(x.size(1), x.size(2)) % 2
            cos, sin = self.cos[:2 * T].view(T, 2, -1)[:, half], self.sin[:2 * T].view(T, 2, -1)[:, half]
        else:
            cos, sin = self.cos[:T, None], self.sin[:T, None]
        swapped = x.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)  # (x1, x0, x3, x2, ...)
        return x * cos + swapped * sin

# -----------------------------------------------------------------------------
# GPT: one flattened forward over the layers (no Block classes), the weights in banks

@dataclass(frozen=True)
class ForwardSchedule:
    """What changes over training: windows (tokens), the longest document, MTP weights."""
    short_window: int
    long_window: int
    max_seq_len: int
    mtp_weights: Tensor  # (K,) fp32 on device; loss weight of predicting token t+1+k


class GPT(nn.Module):
    """All weights live in a few parameters; GPT.forward is one loop over layers (no Block classes).

    Attention weights of all attention layers are one bank (n_attn, 4*D, D) = [Q; K; V; O] per layer and
    MLP weights one bank (n_bank, 2, 4*D, D) = [W_in; W_out] (bank layout by @chrisjmccormick), so the
    optimizer can shard whole matrices over ranks. Labels (parameter names) key the optimizer table."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        D, H, V, L = cfg.model_dim, cfg.num_heads, cfg.vocab_size, cfg.num_layers
        n_attn, n_ve, G = len(cfg.attn_layers), len(cfg.value_embed_layers), cfg.gate_channels
        bf16 = dict(dtype=torch.bfloat16)
        # Head stored transposed (D, V) for fast gradient accumulation; the input embedding is tied to
        # it (kept equal to lm_head.T by the optimizer) until the untie step (@classiclarryd).
        self.lm_head = nn.Parameter(torch.empty(D, V, **bf16).normal_(0, 0.005))
        self.embed = nn.Parameter(self.lm_head.detach().T.contiguous())
        # Value embeddings mixed into attention values (@KoszarskyB, @Grad62304977; arXiv 2410.17897)
        self.value_embeds = nn.Parameter(0.01 * torch.randn(n_ve * V, D, **bf16))
        # Hashed (previous, current) token bigram embedding, zero init
        self.bigram_embed = nn.Parameter(torch.zeros(n_ve * V, D, **bf16))
        bound = math.sqrt(3) * 0.5 * D ** -0.5  # uniform with std 0.5/sqrt(D) (@YouJiacheng, @srashedll)
        self.attn_bank = nn.Parameter(torch.empty(n_attn, 4 * D, D, **bf16).uniform_(-bound, bound))
        mlp_bank = torch.zeros(cfg.mlp_bank_layers, 2, 4 * D, D, **bf16)
        mlp_bank[:, 0].uniform_(-bound, bound)  # output projections start at zero (@Grad62304977)
        self.mlp_bank = nn.Parameter(mlp_bank)
        # Gates read the first G channels of a stream; all start closed/neutral (zero weights)
        self.smear_gate = nn.Parameter(torch.zeros(1, G, **bf16))  # 1-token look-back (@classiclarryd)
        self.skip_gate = nn.Parameter(torch.zeros(1, G, **bf16))
        self.attn_gate_bank = nn.Parameter(torch.zeros(n_attn, H, G, **bf16))  # per-head output gate
        self.ve_gate_bank = nn.Parameter(torch.zeros(n_ve, H, G, **bf16))  # per-head value-embedding gate
        # Learned scalars (fp32)
        self.attn_lambdas = nn.Parameter(torch.tensor([[0.5, 1.0]]).repeat(n_attn, 1))  # (QKV, O) weight scales
        self.resid_lambdas = nn.Parameter(torch.full((L, 2), 1.1 ** 0.5))  # per sublayer (attn, mlp)
        post = torch.ones(L, 2, 2)  # [layer, attn/mlp, lane0/lane1] write scales
        post[cfg.parallel_start:, 0, 1] = 1.5
        self.post_lambdas = nn.Parameter(post)
        self.x0_lambdas = nn.Parameter(torch.zeros(L))  # normed embedding re-injected after attention
        self.bigram_lambdas = nn.Parameter(torch.full((L,), 0.05))
        self.scalars = nn.Parameter(torch.tensor([0.0, 0.5, -1.5]))  # named in SCALARS below
        self.rotary = Rotary(cfg)
        # Gradients persist (the optimizer zeroes them in place), so a CUDA graph may write into them. The token tables
        # sum theirs in fp32 buffers, written by lookup_op's backward, which flags the rows it wrote; autograd the rest.
        for name, p in self.named_parameters():
            if name in self.LOOKUP_TABLES:
                self.register_buffer(f"{name}_grad", torch.zeros(p.shape), persistent=False)
                self.register_buffer(f"{name}_grad_rows", torch.zeros(p.size(0), dtype=torch.uint8), persistent=False)
            else:
                p.grad = torch.zeros_like(p)

    SCALARS = {"smear": 0, "backout": 1, "skip": 2}  # skip gate starts at sigmoid(-1.5) ~ 0.18
    LOOKUP_TABLES = ("embed", "value_embeds", "bigram_embed")

    def gradients(self) -> dict[str, Tensor]:
        """Every parameter's gradient, summed over micro-batches until the optimizer zeroes it."""
        return {name: getattr(self, f"{name}_grad") if name in self.LOOKUP_TABLES else p.grad
                for name, p in self.named_parameters()}

    def written_rows(self) -> dict[str, Tensor]:
        """Each token table's flags (uint8, one per row) of the gradient rows written since they were last zeroed."""
        return {name: getattr(self, f"{name}_grad_rows") for name in self.LOOKUP_TABLES}

    def load_gradients(self, grads: dict[str, Tensor]):
        """Set the held gradients (Adam's carry-over) in place (CUDA graphs hold their addresses); all rows written."""
        for name, grad in self.gradients().items():
            grad.copy_(grads[name])
        for flags in self.written_rows().values():
            flags.fill_(1)

    def _lookup(self, name: str, idx: Tensor) -> list[Tensor]:
        return lookup_op(getattr(self, name), idx, getattr(self, f"{name}_grad"), getattr(self, f"{name}_grad_rows"))

    def muon_matrix_shapes(self) -> dict[str, tuple[int, int, int]]:
        """How NorMuon sees each bank: a stack of matrices that ranks own whole."""
        D = self.cfg.model_dim
        return {"attn_bank": (4 * len(self.cfg.attn_layers), D, D), "mlp_bank": (2 * self.cfg.mlp_bank_layers, 4 * D, D)}

    def fp8_weights(self) -> tuple[tuple, tuple] | None:
        """The e4m3 copies of the weights that the FP8 body's matmuls read, stacked by layer (QKV: attention layers,
        MLP: all), made once per optimizer step by the trainer, not every micro-batch. None unless the whole body is
        FP8. A cast per bank, not per layer: the graph remaking them compiles several times faster, on a cold start's
        critical path (records/enwiki-124/2026-11-27_fp8-weight-copies-stacked)."""
        cfg, D = self.cfg, self.cfg.model_dim
        if not (cfg.fp8_qkv and cfg.fp8_mlp_blocks):
            return None
        with torch.no_grad():
            w8 = (fp8_tensor(self.attn_lambdas.bfloat16()[:, 0, None, None] * self.attn_bank[:, :3 * D]),
                  mlp_fp8_weights(*self.mlp_bank[:cfg.num_layers].unbind(1)))
        if not torch.compiler.is_compiling():  # dynamic=True makes a plain tensor input's shape symbolic: fix these
            for t in tree_leaves(w8):
                torch._dynamo.mark_static(t)
        return w8

    def reset_rotary(self):
        self.rotary.reset()

    def extend_rotary(self, old_window: int, new_window: int):
        self.rotary.extend(old_window, new_window)

    def forward(self, inputs: Tensor, targets: Tensor, cu_seqlens: Tensor, bigram_inputs: Tensor,
                sched: ForwardSchedule, w8: tuple[tuple, tuple] | None = None) -> Tensor:
        """inputs/targets/bigram_inputs: (T,) token ids; cu_seqlens: (capacity,) int32; w8: fp8_weights(), current.
        Training: returns the summed MTP loss over positions. Eval: the mean next-token loss."""
        cfg = self.cfg
        T, V, G = inputs.size(0), cfg.vocab_size, cfg.gate_channels
        # Per-layer views of the banks and scalars, unbound once so that backward stacks them in
        # one kernel instead of a select-backward per layer.
        attn_w = dict(zip(cfg.attn_layers, self.attn_bank.unbind(0)))  # layer -> (4D, D)
        attn_gate = dict(zip(cfg.attn_layers, self.attn_gate_bank.unbind(0)))  # layer -> (H, G)
        attn_lam = dict(zip(cfg.attn_layers, self.attn_lambdas.bfloat16().unbind(0)))  # layer -> (2,)
        qkv8, mlp8 = [list(zip(*(t.unbind(0) for t in stacks))) for stacks in w8] if w8 else ([], [])  # by layer
        qkv8 = dict(zip(cfg.attn_layers, qkv8))
        w_in, w_out = self.mlp_bank.unbind(1)  # (n_bank, 4D, D) each
        w_in, w_out = w_in.unbind(0), w_out.unbind(0)
        resid_attn, resid_mlp = self.resid_lambdas.bfloat16().unbind(1)
        resid_attn, resid_mlp = resid_attn.unbind(0), resid_mlp.unbind(0)
        post = self.post_lambdas.bfloat16().flatten(1).unbind(1)  # (attn->0, attn->1, mlp->0, mlp->1)
        post_attn0, post_attn1, post_mlp0, post_mlp1 = (p.unbind(0) for p in post)
        x0_lam = self.x0_lambdas.bfloat16().unbind(0)
        bigram_lam = self.bigram_lambdas.bfloat16().unbind(0)
        smear_lam, backout_lam, skip_lam = (self.scalars[self.SCALARS[k]] for k in ("smear", "backout", "skip"))
        mlp = (partial(relu_square_mlp_fp8, blocks=cfg.fp8_mlp_blocks, dw=cfg.fp8_mlp_dw) if cfg.fp8_mlp
               else (lambda *a: relu_square_mlp_op(*a)[0])) if cfg.fused_mlp else relu_square_mlp_reference
        # Value-embedding table k is rows k*V.. of one parameter
        n_ve = len(cfg.value_embed_layers)
        rows = inputs + V * torch.arange(n_ve, device=inputs.device)[:, None]  # (n_ve, T)
        value_embed = dict(zip(cfg.value_embed_layers, self._lookup("value_embeds", rows)))
        ve_gate = dict(zip(cfg.value_embed_layers, self.ve_gate_bank.unbind(0)))

        # Embedding; smear each token's embedding forward one position through a gate (@classiclarryd)
        x = self._lookup("embed", inputs[None])[0]  # (T, D)
        smear = smear_lam * torch.sigmoid(F.linear(x[1:, :G], self.smear_gate))  # (T-1, 1)
        x = torch.cat([x[:1], x[1:] + smear * x[:-1]])
        x0 = norm(x)
        bigram = self._lookup("bigram_embed", bigram_inputs[None])[0]  # (T, D)

        lane0, lane1 = x0 + bigram_lam[0] * bigram, None
        skip = backout = None
        for layer in range(cfg.num_layers):
            if layer == cfg.parallel_start:
                lane1 = lane0
            if layer == cfg.skip_to:  # U-net style skip through a gate (@classiclarryd)
                gate = torch.sigmoid(skip_lam) * 2 * torch.sigmoid(F.linear(x0[:, :G], self.skip_gate))
                lane0 = lane0 + gate * skip
                lane1 = None if lane1 is None else lane1 + gate * skip
            if layer != cfg.mlp_only_layer:
                paired = layer in cfg.paired_head_layers
                long = layer in cfg.long_window_layers
                y = self._attention(norm(lane0), attn_w[layer], attn_lam[layer], attn_gate[layer],
                                    value_embed.get(layer), ve_gate.get(layer), qkv8.get(layer), cu_seqlens, sched,
                                    window=sched.long_window if long else sched.short_window,
                                    paired=paired, key_offset=long)
                inject = x0_lam[layer] * x0 + (bigram_lam[layer] * bigram if layer > 0 else 0)
                if lane1 is None:  # single lane: no post-attention lambda
                    lane0 = resid_attn[layer] * lane0 + y + inject
                else:
                    lane0 = resid_attn[layer] * lane0 + post_attn0[layer] * y + inject
                    lane1 = resid_attn[layer] * lane1 + post_attn1[layer] * y
            if layer == cfg.skip_from:
                skip = lane0
            y = mlp(norm(lane0 if lane1 is None else lane1), w_in[layer], w_out[layer], *mlp8[layer:layer + 1])
            lane0 = resid_mlp[layer] * lane0 + post_mlp0[layer] * y
            if lane1 is not None:
                lane1 = resid_mlp[layer] * lane1 + post_mlp1[layer] * y
            if layer == cfg.backout_layer:
                backout = lane0

        x = lane0 if lane1 is None else (lane0 + lane1) * 0.5
        x = norm(x - backout_lam * backout)  # drop what early layers kept only for context
        A, B, C = cfg.logit_cap  # soft cap (Gemma 2; shifted sigmoid form by @YouJiacheng, @classiclarryd)
        if self.training:
            return head_loss_op(x, self.lm_head, targets, sched.mtp_weights, cfg.logit_cap, cfg.head_x_scale,
                                cfg.head_w_scale, cfg.head_grad_scale, cfg.fp8_head, cfg.tanh_sigmoid)[0]
        loss = x.new_zeros((), dtype=torch.float32)
        for xc, tc in zip(x.split(cfg.eval_chunk), targets.split(cfg.eval_chunk)):  # bounds the logits' memory
            logits = A * torch.sigmoid((xc @ self.lm_head + B) / C)
            loss = loss + F.cross_entropy(logits.float(), tc, reduction="sum")
        return loss / T

    def _attention(self, x: Tensor, w: Tensor, lam: Tensor, out_gate_w: Tensor, ve: Tensor | None,
                   ve_gate_w: Tensor | None, w8: tuple | None, cu_seqlens: Tensor, sched: ForwardSchedule,
                   window: int, paired: bool, key_offset: bool) -> Tensor:
        """x: (T, D) normed stream; w: (4D, D) = [Q; K; V; O]; lam: (2,) scales of QKV and O."""
        cfg = self.cfg
        T, D, H, Dh, G = x.size(0), cfg.model_dim, cfg.num_heads, cfg.head_dim, cfg.gate_channels
        project = partial(fp8_linear, w8=w8) if cfg.fp8_qkv else F.linear  # FP8 reads x unscaled: |x| <= sqrt(D)
        q, k, v = project(x, lam[0] * w[:3 * D]).view(T, 3 * H, Dh).chunk(3, dim=1)  # (T, H, Dh) each
        q, k = norm(q), norm(k)  # QK norm (@Grad62304977)
        max_len = sched.max_seq_len if self.training else T
        # Paired heads: the attention re-reads the (T, H*Dh) rows as (2T, H/2*Dh), so rows 2t and 2t+1 hold heads
        # m and m + H/2 of token t and attend to each other's keys. Until then tensors keep a (T, 2, H/2) head
        # split, which makes that re-read a merge of two leading dimensions: other orders left divisions by the
        # symbolic T in the compiled index math, and copies.
        heads = (2, H // 2) if paired else (H,)
        rot = self.rotary
        q, k, v = rot(q.view(T, *heads, Dh)) * rot.q_gain, rot(k.view(T, *heads, Dh)), v.view(T, *heads, Dh)
        if key_offset:  # stationary channels of each key see the previous token: 1-layer induction heads
            k = torch.cat([k[:, :, :Dh // 2], torch.cat([k[:1, :, Dh // 2:], k[:-1, :, Dh // 2:]])], dim=-1)
        if ve is not None:  # the gate of unpaired layers also reads the value embedding (@photomz)
            gate_in = x[:, :G] if paired else torch.cat([x[:, :G // 2], ve[:, :G // 2]], dim=-1)
            v = v + 2 * torch.sigmoid(F.linear(gate_in, ve_gate_w)).view(T, *heads, 1) * ve.view(T, *heads, Dh)
        if paired:
            q, k, v = (t.reshape(2 * T, H // 2, Dh) for t in (q, k, v))
            cu_seqlens, max_len = 2 * cu_seqlens, 2 * max_len
        y = attend(q, k, v, cu_seqlens, max_len, cfg.attn_scale, window, cfg.attention).view(T, *heads, Dh)
        y = y * torch.sigmoid(F.linear(x[:, :G], out_gate_w)).view(T, *heads, 1)  # sparse per-head gate (@classiclarryd)
        return F.linear(y.reshape(T, D), lam[1] * w[3 * D:])


def model_config(hp: Hyperparameters, rt: Runtime) -> GPTConfig:
    fast = (cuda := rt.device.type == "cuda") and hp.fp8_body  # --fp8_body's numerics
    return GPTConfig(vocab_size=round_up(hp.vocab_size, 128), model_dim=hp.model_dim, num_heads=hp.num_heads,
                     head_dim=hp.head_dim, max_tokens=max(hp.val_micro_batch_tokens, *hp.micro_batch_tokens),
                     attention=rt.attention.kernel, fp8_head=hp.fp8_head and cuda, fused_mlp=cuda, fp8_mlp=fast,
                     fp8_mlp_blocks=(blocks := fast and hp.model_dim % 128 == 0), fp8_mlp_dw=blocks, fp8_qkv=fast,
                     tanh_sigmoid=fast, loss_scale=1 / rt.grad_accum_steps)


def weight_shapes(hp: Hyperparameters) -> dict[str, tuple]:
    """The model's parameter shapes under these settings, nothing allocated (to check a checkpoint against): the
    device and kernels change none of them."""
    with torch.device("meta"):
        any_runtime = Runtime(0, 1, torch.device("meta"), 1, Attention("sdpa", "sdpa", ""))
        return {name: tuple(p.shape) for name, p in GPT(model_config(hp, any_runtime)).named_parameters()}


def build_model(hp: Hyperparameters, rt: Runtime) -> GPT:
    torch.manual_seed(hp.seed)
    # Made on its device: drawing 0.4 GB of weights and zeroing 2 GB of tables and buffers on the host took ~7 s
    # of a GPU run's start-up. A seed's weights on a GPU are then the GPU generator's, not a CPU build's.
    with rt.device:
        model = GPT(model_config(hp, rt))
    if rt.distributed:
        for p in model.parameters():
            dist.broadcast(p.detach(), 0)
    return model

# -----------------------------------------------------------------------------
# Optimizer: NorMuon for the weight banks, Adam for everything else, with explicit sharded comms
#
# Contributors to the reference optimizer include @YouJiacheng, @KonstantinWilleke, @alexrgilbert,
# @adricarda, @tuttyfrutyee, @vdlad, @ryanyang0, @vagrawal, @varunneal, @chrisjmccormick.

@dataclass(frozen=True)
class ParamRule:
    optim: str  # "normuon" | "adam"
    sharded: bool  # reduce-scatter grads, update a 1/world slice, all-gather (else all-reduce, update all)
    sparse: bool = False  # sharded, but at world 8 without accumulation only the rows each rank touched travel
    betas: tuple = (0.9, 0.99)  # Adam only
    lr_mul: float = 1.0
    wd_mul: float = 1.0
    matrix_lr_muls: tuple = ()  # NorMuon only: per-matrix lr multipliers, repeated along the bank's matrices


PARAM_RULES = {
    "attn_bank":      ParamRule("normuon", sharded=True),
    "mlp_bank":       ParamRule("normuon", sharded=True, matrix_lr_muls=(1.0, 2.0)),  # [W_in, W_out]: 2x lr out
    "attn_lambdas":   ParamRule("adam", sharded=False, betas=(0.9, 0.99), lr_mul=5.0, wd_mul=0.0),
    "scalars":        ParamRule("adam", sharded=False, betas=(0.9, 0.99), lr_mul=5.0, wd_mul=0.0),
    "smear_gate":     ParamRule("adam", sharded=False, betas=(0.9, 0.99), lr_mul=0.01, wd_mul=0.0),
    "skip_gate":      ParamRule("adam", sharded=False, betas=(0.9, 0.99), lr_mul=0.05, wd_mul=0.0),
    "attn_gate_bank": ParamRule("adam", sharded=False, betas=(0.9, 0.99)),
    "ve_gate_bank":   ParamRule("adam", sharded=False, betas=(0.9, 0.99)),
    "lm_head":        ParamRule("adam", sharded=True, betas=(0.5, 0.95), wd_mul=150.0),
    "bigram_embed":   ParamRule("adam", sharded=True, sparse=True, betas=(0.75, 0.95), lr_mul=75.0, wd_mul=5.0),
    "post_lambdas":   ParamRule("adam", sharded=False, betas=(0.9, 0.95), wd_mul=0.0),
    "x0_lambdas":     ParamRule("adam", sharded=False, betas=(0.9, 0.95), wd_mul=0.0),
    "bigram_lambdas": ParamRule("adam", sharded=False, betas=(0.9, 0.95), wd_mul=0.0),
    "resid_lambdas":  ParamRule("adam", sharded=False, betas=(0.9, 0.95), lr_mul=5.0, wd_mul=0.0),
    "value_embeds":   ParamRule("adam", sharded=True, betas=(0.75, 0.95), lr_mul=75.0, wd_mul=5.0),
    "embed":          ParamRule("adam", sharded=True, betas=(0.5, 0.95), wd_mul=150.0),
}
# The order of the reductions' launches and of the updates alike: one NCCL stream runs a process group's collectives
# in launch order, so each update waits only for the reductions before its own. The banks first: their NorMuon, the
# longest math, overlaps the other reductions (records/enwiki-124/2026-11-29_world2-collective-order-flagged-rows).
WORK_ORDER = ["attn_bank", "mlp_bank", "attn_lambdas", "scalars", "smear_gate", "skip_gate", "attn_gate_bank",
              "ve_gate_bank", "post_lambdas", "x0_lambdas", "bigram_lambdas", "resid_lambdas", "lm_head", "embed",
              "value_embeds", "bigram_embed"]
# torch 2.13 renamed the tensor collectives and warns on the old names; torch 2.11 (the GPU machines) has only those
reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
SPARSE_WORLD_SIZE = 8  # the sparse exchange pays only when each of 8 ranks touches a small part of the table
# The gradient norm (non-finite guard, log) skips the token tables: their gradients are the stream's gradient
# scattered by token, which the banks' and per-layer scalars' gradients already sum over all positions (0 * NaN is
# NaN). Saves reading ~150-200 MB per Adam step (records/enwiki-124/2026-11-23_guard-cost).
NORM_SKIPS = ("embed", "value_embeds", "bigram_embed")


def flat(t: Tensor) -> Tensor:
    """t's memory, 1-D and not a view (whose base's shape a graph guards on): elementwise adam_update then compiles
    one graph per dtype pair for every small parameter (7 graphs for shaped ones)."""
    return t.view(-1).detach()


def adam_update(p: Tensor, g: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, beta1: Tensor, beta2: Tensor,
                eps: Tensor, step_size: Tensor, decay: Tensor):
    """Adam with cautious weight decay: decay only where the update and the weight agree in sign.
    step_size = lr * sqrt(1 - beta2^t) / (1 - beta1^t); decay = lr^2 * wd. Scalars are 0-D CPU tensors,
    so one compiled graph serves every parameter and step."""
    g = g.float()
    exp_avg.mul_(beta1).add_((1 - beta1) * g)
    exp_avg_sq.mul_(beta2).add_((1 - beta2) * g * g)
    update = exp_avg / (exp_avg_sq.sqrt() + eps) * step_size
    update = update + p * ((update * p) > 0) * decay
    p.sub_(update)  # computed in fp32 and rounded once to p's dtype


def normuon_update(p_bits: Tensor, mantissa: Tensor, v: Tensor, second_moment: Tensor, beta2: Tensor,
                   lr: Tensor, decay: Tensor):
    """NorMuon step on a stack of matrices (arXiv 2510.05491) with cautious weight decay.

    v: (n, R, C) orthogonalized update; second_moment: (n, R, 1) or (n, 1, C) running mean of v^2 over the longer side's
    complement; lr: (n, 1, 1) per-matrix lr; decay: wd * base lr (0-D). The bf16 weights (p_bits, viewed as int16) plus
    their 16 lost mantissa bits form an exact fp32 master copy, so small updates are not rounded away. The normalized
    update stays fp32 up to that master copy (the reference rounds it to bf16 first): one rounding fewer, and free, as
    this function is one fused kernel that never stores the update."""
    v = v.float()
    reduce_dim = -1 if v.size(-2) >= v.size(-1) else -2
    v_sq = v.square().mean(dim=reduce_dim, keepdim=True)
    second_moment.mul_(beta2).add_((1 - beta2) * v_sq)
    scale = second_moment.clamp_min(1e-10).rsqrt()
    # rescale so the normalized update keeps the Frobenius norm of v
    old_norm_sq = v_sq.sum(dim=(-2, -1), keepdim=True)
    new_norm_sq = (v_sq * scale.square()).sum(dim=(-2, -1), keepdim=True)
    update = v * (scale * (old_norm_sq / new_norm_sq.clamp_min(1e-20)).sqrt())
    bits = (p_bits.to(torch.int32) << 16) | (mantissa.to(torch.int32) & 0xFFFF)
    p = bits.view(torch.float32)
    p = p - p * ((update * p) >= 0) * decay * lr - update * lr
    bits = p.view(torch.int32)
    p_bits.copy_((bits >> 16).to(torch.int16))
    mantissa.copy_(bits.to(torch.int16))


@dataclass(frozen=True)
class Collective:
    """One collective an optimizer step launches: a row of the communication ledger."""
    param: str
    op: str  # "all_reduce" | "reduce_scatter" | "all_gather" | "all_to_all"
    dtype: torch.dtype
    numel: int  # elements of the whole tensor (a reduction's input, a gather's output); all_to_all: those sent

    def wire_bytes(self, world_size: int) -> int:
        """Bytes each rank sends: ring algorithms send (W-1)/W of the tensor per pass, an all-reduce two passes;
        an all-to-all sends its rows once."""
        nbytes = self.numel * self.dtype.itemsize
        if self.op == "all_to_all":
            return nbytes
        return round(nbytes * (world_size - 1) / world_size * (2 if self.op == "all_reduce" else 1))


class NorMuonAdam:
    """One optimizer for all parameters, configured by PARAM_RULES (keyed by parameter name).

    step() runs three phases: (1) launch every gradient reduction in WORK_ORDER; (2) in the same order, wait for a
    reduction, update this rank's slice, launch its all-gather; (3) wait for the gathers. World size 1, and an emulated
    world size (Runtime.distributed False: one process timing rank 0's share), run the same code without collectives.
    Gradients travel in their parameter's dtype; the token tables sum theirs in fp32 and round once, only the rows
    lookups wrote (GPT.written_rows). At world 8 without accumulation the bigram table's gradient travels as the rows
    each rank touched, to their owner: every rank cuts all 8 micro-batches (TrainLoader), so only rows are exchanged.
    Adam parameters step on odd steps only, on two steps of gradients (@classiclarryd). While tied, the embedding's
    gradient is folded into the (transposed) head's and the embedding rewritten from the head after each update."""

    def __init__(self, model: GPT, hp: Hyperparameters, rt: Runtime, compile: bool):
        self.hp, self.rank, self.world_size, self.distributed = hp, rt.rank, rt.world_size, rt.distributed
        self.params = dict(model.named_parameters())
        self.gradients, self.written_rows = model.gradients, model.written_rows()
        assert set(self.params) == set(PARAM_RULES) == set(WORK_ORDER), "every parameter needs a PARAM_RULES row"
        self.matrix_shapes = model.muon_matrix_shapes()
        self.comms = {name: self._comms(name, rt) for name in self.params}
        self.state: dict[str, dict] = {}
        for name, p in self.params.items():
            rule = PARAM_RULES[name]
            shape = self.matrix_shapes[name] if rule.optim == "normuon" else p.shape
            if rule.sharded and shape[0] % self.world_size:
                raise ValueError(f"{name}: leading dim {shape[0]} does not split over {self.world_size} ranks")
            rows = shape[0] // self.world_size if rule.sharded else shape[0]
            shard_shape = (rows, *shape[1:])
            if rule.optim == "adam":
                self.state[name] = dict(step=0, exp_avg=torch.zeros(shard_shape, device=p.device),
                                        exp_avg_sq=torch.zeros(shard_shape, device=p.device))
            else:
                n, R, C = shard_shape
                pattern = rule.matrix_lr_muls or (1.0,)
                lr_muls = torch.tensor([pattern[i % len(pattern)] for i in range(shape[0])], device=p.device)
                shape_mul = max(1.0, R / C) ** 0.5  # tall matrices get a larger step
                self.state[name] = dict(momentum=torch.zeros(shard_shape, device=p.device),
                                        second_moment=torch.zeros((n, R, 1) if R >= C else (n, 1, C), device=p.device),
                                        mantissa=torch.zeros(shard_shape, dtype=torch.uint16, device=p.device),
                                        lr_muls=(shape_mul * lr_muls[self.rank * n:(self.rank + 1) * n]).view(n, 1, 1))
        # the token tables' gradients travel from persistent buffers in the parameters' dtype, zero but in written rows
        self.wires = {name: torch.zeros_like(self.params[name]) for name in self.written_rows
                      if self.comms[name] == "reduce_scatter"}
        # rows of each sparse table touched by each rank since its last update (host side: the loader knows them)
        self.touched = {name: torch.zeros((self.world_size, self.params[name].size(0)), dtype=torch.bool, device="cpu")
                        for name, comms in self.comms.items() if comms == "sparse"}
        # one micro-batch a step: autograd assigns NorMuon's gradients (the trainer leaves .grad None), no zeroing and no
        # add (records/enwiki-124/2026-11-30_assigned-normuon-gradients); Adam's sum two steps
        self.assigned = [n for n in self.params if PARAM_RULES[n].optim == "normuon"] if rt.grad_accum_steps == 1 else []
        self.tied = True
        maybe = partial(torch.compile, dynamic=True, fullgraph=True) if compile else (lambda f, dynamic=True: f)
        self._adam_update, self._normuon_update = maybe(adam_update), maybe(normuon_update)
        # the head and token tables (Adam's sharded parameters): static graphs, as a dynamic graph's kernels suit its
        # first call's size (a 12-element gate's ran them 6x slower: records/enwiki-124/2026-11-28_adam-table-graphs)
        self._adam_table_update = maybe(adam_update, dynamic=False)
        self._adam_flat = {name: [flat(t) for t in (self._shard(name, self.params[name].data),
                                                    state["exp_avg"], state["exp_avg_sq"])]
                           for name, state in self.state.items() if PARAM_RULES[name].optim == "adam"}  # memory stays put
        # 0-D CPU tensors for per-step values, so compiled graphs do not specialize on them
        self._scalar = {k: torch.zeros(()) for k in ("step_size", "decay", "lr", "beta1", "beta2", "eps")}

    def _comms(self, name: str, rt: Runtime) -> str:
        rule = PARAM_RULES[name]
        if rt.world_size == 1:
            return "none"
        if not rule.sharded:
            return "all_reduce"
        if rule.sparse and rt.world_size == SPARSE_WORLD_SIZE and rt.grad_accum_steps == 1:
            return "sparse"
        return "reduce_scatter"

    def note_touched_rows(self, rows_by_rank: list[np.ndarray]):
        """The bigram table rows each rank's micro-batches of this step look up (in rank order)."""
        for touched in self.touched.values():
            for rank, rows in enumerate(rows_by_rank):
                touched[rank, torch.from_numpy(rows)] = True

    def ledger(self, do_adam: bool, tied: bool, sparse_rows_sent: int = 0) -> list[Collective]:
        """The collectives step(do_adam) launches with the embedding tied or not, in launch order (the gathers in the
        same order, after the reductions). sparse_rows_sent: rows this rank sends of a sparse table (data-dependent)."""
        if self.world_size == 1:
            return []
        rows = []
        for name in self._active(do_adam, tied):
            p, comms = self.params[name], self.comms[name]
            if comms == "sparse":
                rows.append(Collective(name, "all_to_all", p.dtype, sparse_rows_sent * p.size(1)))
            else:
                rows.append(Collective(name, "reduce_scatter" if comms == "reduce_scatter" else "all_reduce",
                                       p.dtype, p.numel()))
        rows += [Collective(name, "all_gather", self.params[name].dtype, self.params[name].numel())
                 for name in self._active(do_adam, tied) if PARAM_RULES[name].sharded]
        return rows

    def _active(self, do_adam: bool, tied: bool) -> list[str]:
        """Parameters this step updates, in WORK_ORDER (while tied the embedding rides on the head)."""
        return [n for n in WORK_ORDER if (do_adam or PARAM_RULES[n].optim == "normuon") and not (tied and n == "embed")]

    def _shard(self, name: str, t: Tensor) -> Tensor:
        """This rank's rows of a full-size tensor (param or grad), in the view the rule optimizes."""
        rule = PARAM_RULES[name]
        if rule.optim == "normuon":
            t = t.view(self.matrix_shapes[name])
        if not rule.sharded:
            return t
        rows = t.size(0) // self.world_size
        return t[self.rank * rows:(self.rank + 1) * rows]

    def _launch_reduce(self, name: str, grad: Tensor):
        """Start averaging `grad` over ranks; returns a function that waits and gives this rank's reduced shard."""
        comms, p = self.comms[name], self.params[name]
        if comms == "sparse":
            return self._launch_sparse(name, grad)
        # the token tables' fp32 sums round once here (an emulated rank too: a real one's cost); others have p's dtype
        wire = round_flagged_rows(grad, self.written_rows[name], self.wires[name]) if name in self.wires else grad
        if comms == "none" or not self.distributed:
            shard = self._shard(name, wire)
            return lambda: shard
        if PARAM_RULES[name].optim == "normuon":
            wire = wire.view(self.matrix_shapes[name])
        if comms == "all_reduce":
            shard = wire
            work = dist.all_reduce(shard, op=dist.ReduceOp.AVG, async_op=True)
        else:
            shard = torch.empty_like(wire[:wire.size(0) // self.world_size])
            work = reduce_scatter(shard, wire, op=dist.ReduceOp.AVG, async_op=True)

        def reduced() -> Tensor:
            work.wait()
            return shard
        return reduced

    def _launch_sparse(self, name: str, grad: Tensor):
        """Send the touched rows of other ranks' slices to their owners (one all-to-all); the owner adds what it
        receives to its own slice of `grad` (fp32, already holding this rank's rows) and averages."""
        W, me, touched = self.world_size, self.rank, self.touched[name]  # touched: (W, rows) bool, on the host
        per = touched.size(1) // W
        mine = touched[me].nonzero()[:, 0]
        owner = mine // per
        send_rows, send_counts = mine[owner != me], torch.bincount(owner[owner != me], minlength=W).tolist()
        recv_parts = [touched[r, me * per:(me + 1) * per].nonzero()[:, 0] for r in range(W)]
        recv_parts[me] = recv_parts[me][:0]  # this rank's own rows are in its slice already
        recv_counts = [part.numel() for part in recv_parts]
        touched.fill_(False)
        as_index = (lambda t: t.pin_memory().to(grad.device, non_blocking=True)) if grad.is_cuda else (lambda t: t)
        send_idx, recv_idx = as_index(send_rows), as_index(torch.cat(recv_parts))
        shard = grad[me * per:(me + 1) * per]
        if not self.distributed:
            return lambda: shard
        sent = grad.index_select(0, send_idx).to(self.params[name].dtype)  # (rows, D) in the wire dtype
        received = sent.new_empty(sum(recv_counts), grad.size(1))
        work = dist.all_to_all_single(received, sent, output_split_sizes=recv_counts, input_split_sizes=send_counts,
                                      async_op=True)

        def merge() -> Tensor:
            work.wait()
            self.written_rows[name][me * per:(me + 1) * per].index_fill_(0, recv_idx, 1)  # written here: zeroed after
            return shard.index_add_(0, recv_idx, received.float()).mul_(1 / W)
        return merge

    def _launch_gather(self, name: str):
        if self.comms[name] in ("none", "all_reduce") or not self.distributed:
            return None
        full = self.params[name].data
        if PARAM_RULES[name].optim == "normuon":
            full = full.view(self.matrix_shapes[name])
        return all_gather(full, self._shard(name, full), async_op=True)

    @torch.no_grad()
    def step(self, lr_scale: float, muon_momentum: float, do_adam: bool) -> Tensor:
        """lr_scale: the schedule's multiplier on every base lr. Returns this rank's shares of the squared norms of the
        reduced NorMuon and Adam gradients the step read (but NORM_SKIPS), (2,) fp32 on the device: summed over
        ranks, the whole."""
        active = self._active(do_adam, self.tied)
        grads = self.gradients()
        if self.tied and do_adam:  # the embedding's gradient belongs to the head while they are tied
            transpose_add(grads["embed"], grads["lm_head"])
        reductions = {n: self._launch_reduce(n, grads[n]) for n in active}  # phase 1

        shards, gathers = [], {}
        for name in active:  # phase 2
            grad = reductions[name]()
            shards.append(grad)
            if PARAM_RULES[name].optim == "adam":
                self._adam_step(name, grad, lr_scale)
            else:
                self._normuon_step(name, grad, lr_scale, muon_momentum)
            if (work := self._launch_gather(name)) is not None:
                gathers[name] = work
        grad_sq = self._squared_norm([(n, g) for n, g in zip(active, shards) if n not in NORM_SKIPS])  # before zeroing

        if self.tied and do_adam:  # phase 3: the tied embedding is copied from the gathered head
            if "lm_head" in gathers:
                gathers.pop("lm_head").wait()
            transpose_copy(self.params["lm_head"].data, self.params["embed"].data)
        for work in gathers.values():
            work.wait()
        # in place, as the gradients persist; Adam's keep accumulating until the next odd step
        if stale := [g for n, g in grads.items()
                     if n not in self.written_rows and n not in self.assigned and (do_adam or n in active)]:
            torch._foreach_zero_(stale)
        for name in self.written_rows if do_adam else ():  # token tables are Adam's; a wire holds rows only if reduced
            zero_flagged_rows(grads[name], self.written_rows[name], self.wires.get(name) if name in active else None)
        return grad_sq

    def _squared_norm(self, shards: list[tuple[str, Tensor]]) -> Tensor:
        """(2,) fp32: the squared norms of the NorMuon and of the Adam gradient shards, summed, those whole on every
        rank divided by the ranks that will sum them. One fused norm per group: a mixed list falls back to a kernel
        per tensor."""
        ranks = self.world_size if self.distributed else 1
        totals = []
        for optim in ("normuon", "adam"):
            total = shards[0][1].new_zeros((), dtype=torch.float32)
            for sharded in (True, False):
                group = [g for n, g in shards
                         if PARAM_RULES[n].optim == optim and (PARAM_RULES[n].sharded and ranks > 1) == sharded]
                for dtype in {g.dtype for g in group}:
                    norms = torch._foreach_norm([g for g in group if g.dtype == dtype], 2, dtype=torch.float32)
                    total = total + torch.stack(norms).square().sum() / (1 if sharded else ranks)
            totals.append(total)
        return torch.stack(totals)

    def _adam_step(self, name: str, grad: Tensor, lr_scale: float):
        rule, state = PARAM_RULES[name], self.state[name]
        state["step"] += 1
        beta1, beta2 = rule.betas
        lr = self.hp.adam_lr * lr_scale * rule.lr_mul
        self._scalar["step_size"].fill_(lr * (1 - beta2 ** state["step"]) ** 0.5 / (1 - beta1 ** state["step"]))
        self._scalar["decay"].fill_(lr * lr * self.hp.adam_wd * rule.wd_mul)
        for key, value in (("beta1", beta1), ("beta2", beta2), ("eps", self.hp.adam_eps)):
            self._scalar[key].fill_(value)
        p, exp_avg, exp_avg_sq = self._adam_flat[name]
        adam = self._adam_table_update if rule.sharded else self._adam_update
        adam(p, flat(grad), exp_avg, exp_avg_sq, *(self._scalar[k] for k in ("beta1", "beta2", "eps", "step_size", "decay")))

    def _normuon_step(self, name: str, grad: Tensor, lr_scale: float, muon_momentum: float):
        state = self.state[name]
        # momentum as a Python float: Triton kernels take it as it is; a device tensor would cost a copy to the GPU
        v = polar_express(grad, state["momentum"], muon_momentum)  # (n, R, C) bf16
        lr = self.hp.muon_lr * lr_scale
        self._scalar["lr"].fill_(lr)
        self._scalar["decay"].fill_(self.hp.muon_wd * PARAM_RULES[name].wd_mul * lr)
        self._scalar["beta2"].fill_(self.hp.muon_beta2)
        self._normuon_update(self._shard(name, self.params[name].data).view(torch.int16),
                             state["mantissa"].view(torch.int16), v, state["second_moment"], self._scalar["beta2"],
                             state["lr_muls"] * self._scalar["lr"], self._scalar["decay"])

    @torch.no_grad()
    def untie(self):
        """Give the embedding its own Adam state: the head's, transposed (the shardings differ)."""
        head, emb = self.state["lm_head"], self.state["embed"]
        emb["step"] = head["step"]
        for key in ("exp_avg", "exp_avg_sq"):
            full = head[key]
            if self.world_size > 1:
                full = torch.zeros(self.params["lm_head"].shape, device=full.device)
                if self.distributed:
                    all_gather(full, head[key].contiguous())
                else:  # emulated: only this rank's rows are known
                    self._shard("lm_head", full).copy_(head[key])
            emb[key].copy_(self._shard("embed", full.T))
        self.tied = False

    def reset(self):
        """Back to the state __init__ made: tied, no steps, zero moments and mantissas (lr_muls are constants)."""
        self.tied = True
        for state in self.state.values():
            for key, value in state.items():
                if key == "step":
                    state[key] = 0
                elif key != "lr_muls":
                    value.zero_()

    def state_dict(self) -> dict:
        """The live state (copy it to keep it: copy_tree). The touched rows are kept apart (Trainer.snapshot):
        like Adam's carried gradients, they are empty after every Adam step."""
        return dict(tied=self.tied, state=self.state)

    def load_state_dict(self, sd: dict):
        self.tied = sd["tied"]
        for name, state in sd["state"].items():
            for key, value in state.items():
                if isinstance(value, Tensor):
                    self.state[name][key].copy_(value)
                else:
                    self.state[name][key] = value

# -----------------------------------------------------------------------------
# Data: BOS-aligned training micro-batches, contiguous validation tokens (the shard format: data/shards.py)

def cut_micro_batches(bos: np.ndarray, size: int, doc: int, need: int, max_seq_len: int,
                      count: int = MICRO_BATCHES) -> tuple[list[tuple[np.ndarray, np.ndarray]], int] | None:
    """Cut `count` micro-batches of `need` tokens from a shard of `size` tokens, from its document `doc` on: each
    sequence starts at a BOS and stops at max_seq_len (the rest of that document is skipped), the last one is cut
    to fit. Returns ([(starts, lengths)] per micro-batch, the next document), or None if the shard runs out."""
    cuts = []
    for _ in range(count):
        looked = 64  # documents looked at, grown until they hold `need` tokens (each holds at least one)
        while True:
            starts = bos[doc:doc + looked]
            ends = np.append(bos[doc + 1:doc + looked + 1], size)[:starts.size]
            lengths = np.minimum(ends - starts, max_seq_len)
            total = np.cumsum(lengths)
            k = int(np.searchsorted(total, need))  # first document at which `need` is reached
            if k < total.size:
                break
            if starts.size < looked:
                return None
            looked *= 4
        lengths = lengths[:k + 1].copy()
        lengths[k] -= total[k] - need
        cuts.append((starts[:k + 1], lengths))
        doc += k + 1
    return cuts, doc


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def bigram_hash(tokens: np.ndarray, table_size: int) -> np.ndarray:
    """Row of the bigram table for each (previous, current) token pair; position 0 gets the spare last row.
    Multipliers spread pairs over the table; pairs across document boundaries are hashed too."""
    t = tokens.astype(np.int64)
    out = np.empty_like(t)
    out[0] = table_size - 1
    out[1:] = ((36313 * t[1:]) ^ (27191 * t[:-1])) % (table_size - 1)
    return out.astype(np.int32)


@dataclass
class MicroBatch:
    inputs: Tensor  # (T,) int32
    targets: Tensor  # (T,) int64, inputs shifted by one
    cu_seqlens: Tensor  # (capacity,) int32: 0, sequence ends..., then T as padding
    bigram: Tensor  # (T,) int32 rows of the bigram table

    def tensors(self) -> tuple[Tensor, ...]:
        return self.inputs, self.targets, self.cu_seqlens, self.bigram

    def to(self, device: torch.device) -> "MicroBatch":
        """On `device` (itself if already there); copies from pinned host memory are asynchronous."""
        return MicroBatch(*(t.to(device, non_blocking=True) for t in self.tensors()))


class IndexedShard:
    """A shard's tokens with the start of every sequence, `bos`: its BOS positions, or with --max_doc_tokens those of
    its documents' pieces (indexed and checked before the run: check_data)."""

    def __init__(self, path: Path, bos: np.ndarray):
        self.path, self.bos = path, bos
        pinned = torch.empty(read_header(path), dtype=torch.uint16, pin_memory=torch.cuda.is_available())
        self.tokens = read_tokens(path, out=pinned.numpy())  # straight into pinned memory: copies to the GPU are async


class CuSeqlensCapacity:
    """Fixed length of the cu_seqlens buffer per micro-batch size, so compiled shapes stay static: sized from the
    data (the most documents that start in any window of the micro-batch's length, plus a margin), never from a
    guessed median document length; a batch that needs more entries grows it (one recompile, logged), not fails."""

    MARGIN = 1.25  # room for micro-batches denser in documents than any window of the first shard

    def __init__(self, log=print):
        self.capacity: dict[int, int] = {}
        self.log = log

    def fit(self, micro_tokens: int, bos: np.ndarray, needed: int) -> int:
        if micro_tokens not in self.capacity:
            ends = np.searchsorted(bos, bos + micro_tokens)
            densest = int((ends - np.arange(len(bos))).max()) if len(bos) else 1
            self.capacity[micro_tokens] = round_up(int(densest * self.MARGIN) + 2, 128)
        if needed > self.capacity[micro_tokens]:
            self.capacity[micro_tokens] = round_up(needed, 128)
            self.log(f"cu_seqlens capacity for {micro_tokens}-token micro-batches grown to "
                     f"{self.capacity[micro_tokens]} (documents are shorter than sampled; one recompile)")
        return self.capacity[micro_tokens]


def make_micro_batch(buf: np.ndarray, seq_ends: np.ndarray, capacity: int, bigram: np.ndarray, pin: bool) -> MicroBatch:
    """In host memory, pinned if `pin`: it goes to the GPU where it is used (MicroBatch.to), so batches waiting for
    their micro-step take no GPU memory. buf: T+1 tokens; seq_ends: (n,) end offsets of the sequences within the T
    inputs (last == T); bigram: (T,) rows of the bigram table (bigram_hash of the inputs)."""
    T = buf.size - 1
    cu = np.full(capacity, T, dtype=np.int32)
    cu[0] = 0
    cu[1:seq_ends.size + 1] = seq_ends

    def host(a: np.ndarray) -> Tensor:
        t = torch.from_numpy(a)
        return t.pin_memory() if pin else t
    return MicroBatch(host(buf[:-1].astype(np.int32)), host(buf[1:].astype(np.int64)), host(cu), host(bigram))


@dataclass
class StepData:
    micro_batches: list[MicroBatch]  # this rank's, in accumulation order, in host memory (make_micro_batch)
    bigram_rows: list[np.ndarray] | None  # per rank, the bigram table rows its micro-batches look up (sparse exchange)


SHARD_LOADER = ThreadPoolExecutor(max_workers=2)  # two: a rewound loader's first shard need not queue behind a prefetch


class TrainLoader:
    """Each step cuts MICRO_BATCHES micro-batches from the token stream, each T+1 tokens of whole-document starts:
    every sequence begins at a BOS (or, with --max_doc_tokens, at a piece of a longer document) and is cut at the
    stage's max sequence length (the rest of that document is skipped). The micro-batches of a step come from one
    shard: when it cannot supply all of them, the whole step comes from the start of the next shard and the old
    shard's tail is skipped (the reference's rule on 8 GPUs). Micro-batch s goes to rank s % world_size, so ranks see disjoint data and
    every world size trains on the batches of 8 GPUs. The next shard loads in a background thread."""

    def __init__(self, index: dict[Path, np.ndarray], hp: Hyperparameters, rank: int, world_size: int,
                 device: torch.device, bigram_rows: int, capacity: CuSeqlensCapacity, start: tuple[int, int] = (0, 0),
                 track_bigram_rows: bool = False):
        """index: the train shards in order, with their sequence starts (check_data)."""
        self.files, self.index = list(index), index
        self.hp, self.rank, self.world_size, self.pin = hp, rank, world_size, device.type == "cuda"
        self.bigram_rows, self.capacity, self.track_bigram_rows = bigram_rows, capacity, track_bigram_rows
        self.shard_index, self.doc = start  # current shard, and index into its bos of the next document
        self.next_file = self.shard_index
        self.shard = self._open_next().result()
        self._prefetch = self._open_next()

    def position(self) -> tuple[int, int]:
        """Where the next batch starts: pass it back as `start` to resume here."""
        return self.shard_index, self.doc

    def _open_next(self) -> Future | None:
        """The next shard, loading in a background thread (its errors raise from .result()), or None after the last."""
        if self.next_file >= len(self.files):
            return None
        path = self.files[self.next_file]
        self.next_file += 1
        return SHARD_LOADER.submit(IndexedShard, path, self.index[path])

    def next_step(self, micro_tokens: int, max_seq_len: int) -> StepData:
        """This rank's micro-batches of the next step (and, if tracked, every rank's bigram rows)."""
        while (cut := cut_micro_batches(self.shard.bos, self.shard.tokens.size, self.doc, micro_tokens + 1,
                                        max_seq_len)) is None:
            self._advance_shard()
        cuts, self.doc = cut
        mine, rows = [], [[] for _ in range(self.world_size)] if self.track_bigram_rows else None
        for slot, (starts, lengths) in enumerate(cuts):
            owner = slot % self.world_size
            if owner != self.rank and rows is None:
                continue
            buf = np.concatenate([self.shard.tokens[s:s + n] for s, n in zip(starts, lengths)])
            bigram = bigram_hash(buf[:-1], self.bigram_rows)
            if rows is not None:
                rows[owner].append(bigram)
            if owner == self.rank:
                seq_ends = np.cumsum(lengths)
                seq_ends[-1] -= 1  # the final token is only a target
                cap = self.capacity.fit(micro_tokens, self.shard.bos, seq_ends.size + 1)
                mine.append(make_micro_batch(buf, seq_ends, cap, bigram, self.pin))
        return StepData(mine, None if rows is None else [np.concatenate(r) for r in rows])

    def _advance_shard(self):
        if self._prefetch is None:
            raise UserError(f"training data ran out after {len(self.files)} shard(s) matching "
                            f"{self.hp.train_files!r}; add shards or shorten the schedule")
        self.shard, self.doc = self._prefetch.result(), 0
        self.shard_index += 1
        self._prefetch = self._open_next()


class ValData:
    """The first val_tokens (+1 for the last target) of the validation shards, read contiguously.
    Rank r reads micro-batches r, r + world, ... so the ranks together cover every token once."""

    def __init__(self, hp: Hyperparameters, files: list[Path], rank: int, world_size: int, device: torch.device,
                 bigram_rows: int):
        """files: the validation shards that hold the tokens, all below the vocabulary size (check_data)."""
        T = hp.val_micro_batch_tokens
        tokens = np.concatenate([read_tokens(f) for f in files])[:hp.val_tokens + 1]
        self.tokens, self.T, self.pin, self.bigram_rows = tokens, T, device.type == "cuda", bigram_rows
        self.my_batches = list(range(rank, hp.val_tokens // T, world_size))
        self.bos_id = hp.bos_id
        self.capacity = round_up(max(self._seq_ends(i).size for i in self.my_batches) + 1, 128)

    def _seq_ends(self, i: int) -> np.ndarray:
        inputs = self.tokens[i * self.T:(i + 1) * self.T]
        starts = np.flatnonzero(inputs == self.bos_id)
        return np.append(starts[starts > 0], self.T).astype(np.int32)

    def __len__(self) -> int:
        return len(self.my_batches)

    def batch(self, j: int) -> MicroBatch:
        i = self.my_batches[j]
        buf = self.tokens[i * self.T:(i + 1) * self.T + 1]
        return make_micro_batch(buf, self._seq_ends(i), self.capacity, bigram_hash(buf[:-1], self.bigram_rows), self.pin)


@dataclass
class CheckedData:
    train: dict[Path, np.ndarray]  # the train shards in order, with their sequence starts (the loader's index)
    val: list[Path]  # the validation shards that hold the val tokens
    shards: list[str]  # each file read, train then val: name, size, checksum (data/shards.py: identities)
    fingerprint: str  # of the shards: checkpoints and captures name the data they were cut from
    report: str  # for the log


def split_documents(bos: np.ndarray, size: int, max_tokens: int) -> np.ndarray:
    """The sequence starts in a shard of `size` tokens whose documents start at `bos` when each document is read as
    consecutive pieces of max_tokens tokens (the last one shorter): a piece after the first starts without a BOS."""
    pieces = -(-np.diff(np.append(bos, size)) // max_tokens)  # per document
    index_in_document = np.arange(pieces.sum()) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    return np.repeat(bos, pieces) + max_tokens * index_in_document


def index_train_shards(hp: Hyperparameters) -> tuple[dict[Path, np.ndarray], list[int], dict[Path, int]]:
    """Every train shard's header and token ids checked (memory-mapped, in parallel) and indexed, in name order:
    ({path: sequence starts}, sizes, {path: checksum}); the starts are the BOS positions, or the pieces' ones."""
    index, sizes, checksums = scan_train_shards(hp.train_files, hp.bos_id, hp.vocab_size)
    if hp.max_doc_tokens:
        index = {f: split_documents(bos, size, hp.max_doc_tokens) for (f, bos), size in zip(index.items(), sizes)}
    return index, sizes, checksums


def cover(schedule: "Schedule", starts: list[np.ndarray], sizes: list[int]) -> tuple[int, int, int]:
    """The loader's cuts run over the shards' sequence starts alone: (steps the shards cover, the shard the last one
    comes from, tokens taken)."""
    shard, doc, taken = 0, 0, 0
    for step in range(schedule.total_steps):
        settings = schedule.at(step)
        while (cut := cut_micro_batches(starts[shard], sizes[shard], doc, settings.micro_batch_tokens + 1,
                                        settings.seq_len)) is None:
            shard, doc = shard + 1, 0
            if shard == len(starts):
                return step, shard - 1, taken
        doc = cut[1]
        taken += MICRO_BATCHES * (settings.micro_batch_tokens + 1)
    return schedule.total_steps, shard, taken


def longest_schedule(hp: Hyperparameters, starts: list[np.ndarray], sizes: list[int]) -> int | None:
    """The longest num_scheduled_steps, at most hp's, whose steps the shards cover (cover()); None if not even one
    step per stage is covered."""
    def covers(n: int) -> bool:
        schedule = Schedule(dataclasses.replace(hp, num_scheduled_steps=n))
        return cover(schedule, starts, sizes)[0] == schedule.total_steps
    if covers(hp.num_scheduled_steps):
        return hp.num_scheduled_steps
    fits, too_many = STAGES - 1, hp.num_scheduled_steps  # a longer schedule takes more: bisect
    while too_many - fits > 1:
        mid = (fits + too_many) // 2
        fits, too_many = (mid, too_many) if covers(mid) else (fits, mid)
    return fits if fits >= STAGES else None


def check_data(hp: Hyperparameters, schedule: "Schedule", world_size: int) -> CheckedData:
    """Before anything is built: every train shard's header and token ids (index_train_shards), the validation
    tokens the run reads, and whether the train shards cover the schedule: the loader's cuts, run over the sequence
    starts alone."""
    per_step = hp.val_micro_batch_tokens * world_size
    need(hp.val_tokens % per_step == 0, f"--val_tokens {hp.val_tokens} must be a multiple of --val_micro_batch_tokens "
         f"x world size = {hp.val_micro_batch_tokens} x {world_size} = {per_step}")
    index, sizes, checksums = index_train_shards(hp)
    val_files = check_val_shards(hp.val_files, hp.val_tokens + 1, hp.vocab_size)  # the last target is one more
    check_roles(checksums, val_files)
    files, starts = list(index), list(index.values())
    covered, shard, taken = cover(schedule, starts, sizes)
    if covered < schedule.total_steps:
        fits = longest_schedule(hp, starts, sizes)
        lengths = np.concatenate([np.diff(np.append(b, n)) for b, n in zip(starts, sizes)])  # sequences, by shard
        longest = max(hp.stage_seq_lens)
        long_docs = (f"; the documents are long (median {int(np.median(lengths)):,} tokens) and each gives one sequence "
                     f"of at most {longest} tokens, the rest skipped: read them in pieces with --max_doc_tokens "
                     f"{longest}" if np.median(lengths) > 2 * longest else "")
        raise UserError(f"the {len(files)} train shard(s) matching {hp.train_files!r} ({sum(sizes):,} tokens) cover "
                        f"{covered} of the schedule's {schedule.total_steps} steps{long_docs}; add data, or shorten the "
                        "schedule: " + (f"--num_scheduled_steps {fits} fits" if fits else
                                        "no --num_scheduled_steps fits with these --micro_batch_tokens"))
    pieces = f"read in pieces of {hp.max_doc_tokens} tokens, " if hp.max_doc_tokens else ""
    report = (f"data: {len(files)} train shard(s), {sum(sizes):,} tokens; the schedule's {schedule.total_steps} steps "
              f"take {taken:,} of them (documents {pieces}cut at {'/'.join(map(str, hp.stage_seq_lens))} tokens) and "
              f"end in shard {shard + 1}; validation: {hp.val_tokens:,} tokens from {len(val_files)} shard(s)\n"
              f"data: train {', '.join(map(str, files))}\ndata: val {', '.join(map(str, val_files))}")
    shards = identities({**checksums, **val_files})
    return CheckedData(index, list(val_files), shards, fingerprint(shards), report)

# -----------------------------------------------------------------------------
# Schedules: three equal stages of growing batch, sequence length and attention windows, then an
# extension stage (@varunneal MTP schedule, @classiclarryd window/YaRN schedules)

@dataclass(frozen=True)
class StepSettings:
    """Everything the schedule sets for one step."""
    stage: int  # 0, 1, 2: the training stages; 3: the extension
    micro_batch_tokens: int
    seq_len: int  # documents are cut at this length
    windows: tuple  # (short, long) attention windows in blocks
    mtp_weights: tuple  # loss weights of predicting tokens t+1, t+2, ..., padded to the longest stage's count
    lr_scale: float  # multiplier on every base lr
    muon_momentum: float
    adam: bool  # Adam parameters update on odd steps only, with two steps of gradients (@classiclarryd)

    @property
    def optimizer_args(self) -> tuple[float, float, bool]:
        """NorMuonAdam.step's arguments at this step."""
        return self.lr_scale, self.muon_momentum, self.adam


class Schedule:
    """Three equal stages over the scheduled steps, then the extension: it keeps the last stage's batch,
    sequence length, lr multiplier and final MTP weights, and takes its own (longer) windows."""

    def __init__(self, hp: Hyperparameters):
        self.hp = hp
        S = hp.num_scheduled_steps
        self.total_steps = S + hp.num_extension_steps
        assert S >= STAGES and len(hp.stage_windows) == STAGES + 1 and all(len(getattr(hp, name)) == STAGES for name in (
            "micro_batch_tokens", "stage_seq_lens", "stage_lr_muls", "stage_mtp_weights")), "validate()"
        # stage i covers steps [bounds[i], bounds[i + 1]); the last one is the extension
        self.bounds = [round(i * S / STAGES) for i in range(STAGES + 1)] + [self.total_steps]
        self.transition_steps = self.bounds[1:-1]
        self.split_step = round(S * hp.untie_frac) | 1  # untie on an odd step, where Adam updates both
        extension = (hp.micro_batch_tokens[-1], hp.stage_seq_lens[-1], hp.stage_lr_muls[-1],
                     (hp.stage_mtp_weights[-1][1],) * 2)
        self.stages = [*zip(hp.micro_batch_tokens, hp.stage_seq_lens, hp.stage_lr_muls, hp.stage_mtp_weights),
                       extension]  # (micro-batch tokens, seq len, lr multiplier, (start, end) MTP weights) by stage
        self.mtp_width = max(len(w) for start_end in hp.stage_mtp_weights for w in start_end)

    def rotary_extensions(self, step: int) -> list[tuple[int, int]]:
        """The YaRN extensions applied by `step`, as (old, new) long windows in tokens: one at each stage
        transition where the long window grows."""
        block, extensions, long = self.hp.window_block, [], self.at(0).windows[1]
        for s in self.transition_steps:
            if s <= step and self.at(s).windows[1] != long:
                extensions.append((long * block, self.at(s).windows[1] * block))
                long = self.at(s).windows[1]
        return extensions

    def warmup_steps(self, micro_batches: int) -> list[int]:
        """The first steps of each stage, enough for MicroStepGraphs.WARM_CALLS of its micro-batches (two steps where
        a rank runs one micro-batch a step); steps 0 and 1 are the optimizer's even and odd (Adam) steps, the split
        step and the next odd one the untie and the embedding's first own Adam update (a graph of its own at world 1)."""
        first = range(-(-MicroStepGraphs.WARM_CALLS // micro_batches))
        steps = {0, 1, self.split_step, self.split_step + 2} | {s + d for s in self.transition_steps for d in first}
        return sorted(s for s in steps if s < self.total_steps)

    def stage(self, step: int) -> tuple[int, float]:
        """(stage, fraction of the way through it); steps past the end (the final validation) are the extension's."""
        for i, (lo, hi) in enumerate(zip(self.bounds, self.bounds[1:])):
            if step < hi:
                return i, (step - lo) / (hi - lo)
        return len(self.stages) - 1, 1.0

    def at(self, step: int) -> StepSettings:
        i, frac = self.stage(step)
        tokens, seq_len, lr_mul, (start, end) = self.stages[i]
        weights = [a + (b - a) * frac for a, b in zip(start, end)]  # MTP weights move linearly over a stage
        return StepSettings(i, tokens, seq_len, self.hp.stage_windows[i],
                            tuple(weights + [0.0] * (self.mtp_width - len(weights))),  # one shape: one graph
                            self._lr_scale(step, lr_mul), self._muon_momentum(step), step % 2 == 1)

    def _lr_scale(self, step: int, lr_mul: float) -> float:
        """The stage's multiplier, then a linear cooldown to final_lr_frac over the last cooldown_frac."""
        S, hp = self.hp.num_scheduled_steps, self.hp
        cooldown_start = int(S * (1 - hp.cooldown_frac))
        if step >= cooldown_start:
            t = min(1.0, (step - cooldown_start) / max(1, S - cooldown_start))
            return lr_mul * (1 - t) + hp.final_lr_frac * t
        return lr_mul

    def _muon_momentum(self, step: int) -> float:
        hp = self.hp
        lo, hi = hp.muon_momentum_min, hp.muon_momentum_max
        if step < hp.muon_momentum_warmup_steps:
            return lo + (hi - lo) * step / hp.muon_momentum_warmup_steps
        cooldown_start = self.total_steps - hp.muon_momentum_cooldown_steps
        if step > cooldown_start:
            return hi - (hi - lo) * (step - cooldown_start) / hp.muon_momentum_cooldown_steps
        return hi

# -----------------------------------------------------------------------------
# Training: micro-steps as CUDA graphs, then the Trainer (steps, validation, warm-up, rewinds, the loop)

class MicroStepGraphs:
    """Runs forward_backward as CUDA graphs, one per micro-batch shape (one per stage).

    Without graphs the host limits stage 1: its ~660 kernels per micro-batch cost more host time (Python, custom-op
    dispatch, launch calls) than the GPU needs to run them. The first micro-batch of a shape runs normally (it compiles
    and loads kernels), the second is captured, and from then on each is one replay. A graph replays the addresses it
    captured: batches are copied from the host into static tensors, the schedule's tensors (MTP weights, rotary table)
    change in place, and gradients sum into persistent tensors (GPT.gradients), but those the backward assigns
    (`assigned`: NorMuonAdam.assigned), which each graph writes where its capture put them. The graphs share one memory
    pool: they run one at a time, and none keeps anything alive between replays but its loss and assigned gradients."""
    WARM_CALLS = 2  # a shape's calls before it replays: the first compiles, the second is captured

    def __init__(self, forward_backward, assigned: list[nn.Parameter]):
        self.forward_backward, self.assigned = forward_backward, assigned  # forward_backward(MicroBatch, ForwardSchedule)
        self.graphs: dict[tuple, tuple] = {}  # shape key -> (graph, static batch, its loss, its assigned gradients)
        self.seen: set[tuple] = set()
        self.pool = torch.cuda.graph_pool_handle()

    def __call__(self, mb: MicroBatch, sched: ForwardSchedule) -> Tensor:
        key = (*(t.shape for t in mb.tensors()), sched.short_window, sched.long_window, sched.max_seq_len)
        if key not in self.graphs:
            if key not in self.seen:
                self.seen.add(key)
                return self.forward_backward(mb, sched)
            static = MicroBatch(*(torch.empty_like(t, device="cuda") for t in mb.tensors()))  # filled below
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                loss = self.forward_backward(static, sched)
            self.graphs[key] = graph, static, loss, [p.grad for p in self.assigned]
        graph, static, loss, grads = self.graphs[key]
        for dst, src in zip(static.tensors(), mb.tensors()):
            dst.copy_(src, non_blocking=True)
        graph.replay()
        for p, grad in zip(self.assigned, grads):
            p.grad = grad
        return loss.clone()  # the next replay overwrites `loss`


class Trainer:
    """Owns the model, optimizer, schedule and data; runs steps, validations, the warm-up and rewinds."""

    def __init__(self, hp: Hyperparameters, rt: Runtime, schedule: "Schedule", data: CheckedData, log: Logger,
                 stop: StopRequest, helpers: compile_helpers.CompileHelpers | None = None, helper: str = ""):
        """data: check_data's; stop: the signal handler's request; helpers: a cold start's, stopped after the warm-up;
        helper: this process is one of them: "backward", "optimizer" or "validation" (compile_ahead)."""
        self.hp, self.rt, self.schedule, self.train_index, self.log = hp, rt, schedule, data.train, log
        self.helpers, self.helper = helpers, helper
        self.model = build_model(hp, rt)
        # dynamic: token counts, windows and lengths are symbolic, so one training graph serves every stage
        # (and one validation graph every window); a graph per stage cost ~1 min of start-up each.
        compile_model = hp.compile and helper != "optimizer"
        self.forward = torch.compile(self.model, dynamic=True, fullgraph=True) if compile_model else self.model
        # validation's own entry, traced afresh as the validation helper traces it (forward's, retraced, missed its graph)
        self.evaluate = torch.compile(lambda *batch: self.model(*batch), dynamic=True, fullgraph=True) if compile_model else self.model
        self.w8 = self.model.fp8_weights()  # remade in place before each step and validation: CUDA graphs read them
        # the run compiles the copies' graph itself, first thing: its few kernels fit in the time it then waits for the
        # backward helper (records/enwiki-124/2026-11-27_fp8-weight-copies-stacked); helpers make them eagerly
        compiled = hp.compile and self.w8 is not None and not helper
        self.remake_w8 = torch.compile(self.copy_fp8_weights, fullgraph=True) if compiled else self.copy_fp8_weights
        self.optimizer = NorMuonAdam(self.model, hp, rt, compile=hp.compile)
        self.bigram_rows = self.model.bigram_embed.size(0)
        self.capacity = CuSeqlensCapacity(log)
        self.val = ValData(hp, data.val, rt.rank, rt.world_size, rt.device, self.bigram_rows)
        self.loader = self.new_loader()
        self.mtp_table = torch.tensor([schedule.at(s).mtp_weights for s in range(schedule.total_steps + 1)],
                                      device=rt.device)  # (steps + 1, K)
        self.mtp_weights = self.mtp_table[0].clone()  # the current step's row, rewritten in place
        self.graphs = hp.cuda_graphs and rt.device.type == "cuda" and not helper
        self.assigned = [self.model.get_parameter(name) for name in self.optimizer.assigned]  # .grad None at backward
        self.micro_step = MicroStepGraphs(self.forward_backward, self.assigned) if self.graphs else self.forward_backward
        self.rotary_extensions: list[tuple[int, int]] = []  # YaRN extensions applied so far, in tokens
        # per step, this rank's shares of the mean training loss per token and of its gradient's squared norms,
        # NorMuon's and Adam's (summed over ranks when read: StepLines); they stay on the device: no step waits
        self.metrics = torch.zeros(schedule.total_steps, 3, device=rt.device)
        self.ranks_summed = rt.world_size if rt.distributed else 1
        self.guard = NonFiniteGuard(rt.device, rt.distributed)
        self.checkpoints = Checkpoints(hp, rt.rank, rt.world_size, data.fingerprint)
        watchdog = Watchdog(hp.dist_timeout, rt.rank, log, peers=rt.distributed)  # a stall ends the run: no hang
        self.stop, self.watch = stop, Watch(self.guard, hp.guard_every, self.snapshot, self.capture, stop,
                                            self.checkpoints, log, watchdog)

    def new_loader(self, start: tuple[int, int] = (0, 0)) -> TrainLoader:
        return TrainLoader(self.train_index, self.hp, self.rt.rank, self.rt.world_size, self.rt.device,
                           self.bigram_rows, self.capacity, start, track_bigram_rows=bool(self.optimizer.touched))

    def copy_fp8_weights(self):
        """fp8_weights() of the current weights into self.w8, in place (nothing without them)."""
        if self.w8 is not None:
            for dst, src in zip(tree_leaves(self.w8), tree_leaves(self.model.fp8_weights())):
                dst.copy_(src)

    def sync(self):
        if self.rt.device.type == "cuda":
            torch.cuda.synchronize()

    def forward_schedule(self, step: int, final: bool = False) -> ForwardSchedule:
        """The forward's settings at `step`. The MTP weights tensor is one tensor updated in place (a CUDA
        graph reads it at its captured address)."""
        settings, block = self.schedule.at(step), self.hp.window_block
        short, long = settings.windows
        self.mtp_weights.copy_(self.mtp_table[step])
        if step == self.hp.inject_fault_step:  # --inject_fault_step: this step's loss and gradients go NaN
            self.mtp_weights.fill_(float("nan"))
        return ForwardSchedule(short * block, (self.hp.final_long_window if final else long) * block,
                               settings.seq_len, self.mtp_weights)

    def set_rotary(self, step: int):
        """YaRN-extend the rotary table whenever the long window grows (reset first when rewinding)."""
        wanted = self.schedule.rotary_extensions(step)
        if wanted[:len(self.rotary_extensions)] != self.rotary_extensions:
            self.model.reset_rotary()
            self.rotary_extensions = []
        for old, new in wanted[len(self.rotary_extensions):]:
            self.model.extend_rotary(old, new)
            self.rotary_extensions.append((old, new))

    def val_loss_sum(self, step: int, batches) -> Tensor:
        """The summed loss of validation micro-batches with the windows of `step` (the last: the final long window)."""
        self.set_rotary(step)
        sched = self.forward_schedule(step, final=step == self.schedule.total_steps)
        self.model.eval()
        self.remake_w8()
        with torch.no_grad():
            total = sum(self.evaluate(*mb.to(self.rt.device).tensors(), sched, self.w8) for mb in batches)
        self.model.train()
        return total

    def validate(self, step: int, clock: TrainClock) -> float:
        """The mean validation loss over all ranks with the windows of `step`."""
        if step == self.schedule.total_steps:  # before the final validation, so that its line ends the log
            self.log(clock.stage_line())
        loss = self.val_loss_sum(step, map(self.val.batch, range(len(self.val)))) / len(self.val)
        if self.rt.distributed:
            dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        self.log(clock.val_line(step, self.schedule.total_steps, loss := loss.item()))
        return loss

    def next_batches(self, step: int) -> StepData:
        settings = self.schedule.at(step)
        return self.loader.next_step(settings.micro_batch_tokens, settings.seq_len)

    def forward_backward(self, mb: MicroBatch, sched: ForwardSchedule) -> Tensor:
        """One micro-batch's forward and backward (gradients accumulate, or are assigned); returns the scaled loss."""
        for p in self.assigned:
            p.grad = None
        loss = self.forward(*mb.to(self.rt.device).tensors(), sched, self.w8) * self.model.cfg.loss_scale
        loss.backward()
        return loss.detach()

    def train_step(self, step: int, data: StepData):
        self.set_rotary(step)
        sched = self.forward_schedule(step)
        self.remake_w8()
        losses = [self.micro_step(mb, sched) for mb in data.micro_batches]  # each: summed loss / grad_accum_steps
        if data.bigram_rows is not None:
            self.optimizer.note_touched_rows(data.bigram_rows)
        with torch.profiler.record_function("optimizer_step"):  # a named range in --profile_steps traces
            grad_sq = self.optimizer.step(*self.schedule.at(step).optimizer_args)
        T = self.schedule.at(step).micro_batch_tokens  # the losses are sums over T positions: per token, / T
        self.metrics[step] = torch.cat([(torch.stack(losses).sum() / (T * self.ranks_summed))[None], grad_sq / T**2])
        if self.hp.guard_every > 0:  # values the step made anyway: no extra pass over the full gradients
            self.guard.observe(step, self.metrics[step])
        if step == self.schedule.split_step:
            self.optimizer.untie()

    def state(self, step: int) -> dict:
        """Everything the steps from `step` on depend on, by reference: weights, optimizer state, data position, and
        what Adam carries over from an even step (nothing before an even step: the odd one before it used it up)."""
        carried = dict(grads=self.model.gradients(), touched=self.optimizer.touched)  # the bigram rows they touched too
        return dict(step=step, loader=self.loader.position(), model=self.model.state_dict(),
                    optimizer=self.optimizer.state_dict(), carried=carried if step % 2 == 1 else None)

    def capture(self, good: dict, bad_step: int, detected_at: int) -> str:
        """The guard's capture: rewind to the snapshot `good`, re-run to the failing step, save it (save_capture)."""
        self.restore(good)
        for step in range(good["step"], bad_step):
            self.train_step(step, self.next_batches(step))
        state = copy_tree(self.state(bad_step), device="cpu")  # before the step reads its batches, as a checkpoint
        data, rt, hp = self.next_batches(bad_step), self.rt, self.hp
        return save_capture(os.path.join(hp.log_dir, f"{hp.run_id}_capture_rank{rt.rank}.pt"),
                            header("capture", rt.rank, rt.world_size, self.checkpoints.data, hp), state, data.micro_batches,
                            self.forward_schedule(bad_step), bad_step, detected_at, rt.grad_accum_steps,
                            partial(self.train_step, bad_step, data), self.guard)

    def snapshot(self, step: int, into: dict | None = None) -> dict:
        """A copy of state(step) on the device; `into`: an earlier snapshot whose buffers are reused."""
        return copy_tree(self.state(step), into)

    def restore(self, snap: dict):
        carried, touched = snap["carried"], self.optimizer.touched
        if carried is None:  # nothing carried: zero gradients, no rows written or touched
            torch._foreach_zero_([*self.model.gradients().values(), *self.model.written_rows().values(), *touched.values()])
        else:
            self.model.load_gradients(carried["grads"])
            copy_tree(carried["touched"], touched)
        self.model.load_state_dict(snap["model"])
        if snap["optimizer"] is None:  # the warm-up's start: the state the optimizer was made with
            self.optimizer.reset()
        else:
            self.optimizer.load_state_dict(snap["optimizer"])
        self.loader = self.new_loader(snap["loader"])
        self.set_rotary(snap["step"])

    def compile_optimizer(self):
        """The optimizer's graphs from zero gradients, before any micro-step (a compile reads only the gradients'
        shapes): NorMuon's on an even step, Adam's on an odd one, tied and untied; then the optimizer as it was made."""
        for step in (0, 1):
            self.optimizer.step(*self.schedule.at(step).optimizer_args)
        self.optimizer.untie()
        self.optimizer.step(*self.schedule.at(1).optimizer_args)
        self.optimizer.reset()

    def compile_ahead(self):
        """A compile helper's work (harness/compile_helpers.py): the warm-up's validation call, or the first two steps, one
        micro-batch each (the backward helper ends in the first; the optimizer helper compiles the optimizer first)."""
        if self.helper == "validation":
            return self.warm_validation().item()
        if self.helper == "optimizer":
            self.compile_optimizer()
        for step in (0, 1):
            data = self.next_batches(step)
            self.train_step(step, dataclasses.replace(data, micro_batches=data.micro_batches[:1]))
        self.sync()

    def warm_validation(self) -> Tensor:  # one micro-batch compiles every validation's graph, or loads the helper's
        if self.helpers:
            self.helpers.wait("validation")
        return self.val_loss_sum(self.schedule.total_steps, [self.val.batch(0)])

    def warmup(self):
        """Untimed, before the first step: compile every training shape the run will time and capture its CUDA graph
        by running the schedule's warm-up steps on real data, MicroStepGraphs.WARM_CALLS micro-batches each (the rest
        replay), and one validation micro-batch (one graph serves every window), then restore the initial state."""
        steps, calls = self.schedule.warmup_steps(self.rt.grad_accum_steps), MicroStepGraphs.WARM_CALLS
        work = " and ".join((["compiling"] if self.hp.compile else []) + (["capturing CUDA graphs"] if self.graphs else []))
        self.log(f"warm-up (untimed): {work} on steps {steps}, up to {calls} micro-batches each, then back to step 0; "
                 f"starts at {time.time() - PROCESS_START:.1f}s")
        # The optimizer still has the state it was made with: reset() remakes it, so only the weights are copied
        # (a copy of the whole state set the run's peak memory: records/enwiki-124/2026-11-27_vs-reference-f5a209d)
        initial = dict(self.state(0), model=copy_tree(self.model.state_dict()), optimizer=None)
        with compile_helpers.collector_off():  # collections walked the compile's millions of objects
            for i, step in enumerate(steps, 1):
                settings, data = self.schedule.at(step), self.next_batches(step)
                self.train_step(step, dataclasses.replace(data, micro_batches=data.micro_batches[:calls]))
                self.sync()
                self.log(f"warm-up {i}/{len(steps)}: step {step} (stage {settings.stage + 1}, "
                         f"{settings.micro_batch_tokens} tokens per micro-batch, windows {settings.windows}) done at "
                         f"{time.time() - PROCESS_START:.1f}s")
            self.warm_validation().item()  # waits for the device, as sync() does
            self.log(f"warm-up: validation done at {time.time() - PROCESS_START:.1f}s")
        self.restore(initial)
        self.guard.reset()
        if self.helpers:
            self.log(self.helpers.stop())
        if self.hp.compile:
            self.log(f"compile: {compile_time_breakdown()}")

    def run(self, resume: dict | None = None):
        """Warm up, then train and validate to the end. resume: a checkpoint (Checkpoints.save) to go on from."""
        hp, log, total = self.hp, self.log, self.schedule.total_steps
        if hp.warmup and (hp.compile or self.graphs):  # eager steps on the CPU have nothing to prepare
            self.warmup()
        if hp.compile:  # the warm-up compiled every timed graph: say why if anything recompiles after it
            torch._logging.set_logs(recompiles=True)
        if self.rt.distributed:  # the clocks start together: rank 0's would time a rank still compiling (19 s once)
            log(compiled_by_rank(self.rt.world_size))  # a gather, which waits for every rank
        start = resume["state"]["step"] if resume else 0
        if resume:  # a checkpoint (its clock goes on below)
            self.restore(resume["state"])
            log(f"resumed at step {start} ({resume['train_ms'] / 1000:.1f} s of training done)")
        clock = TrainClock(self.schedule.bounds, self.sync, resume)
        lines = StepLines(self.metrics, clock, total, log, self.rt.distributed)
        profiler = StepProfiler(hp.profile_steps, start, hp.log_dir, hp.run_id, self.rt.device, self.rt.is_master, log)
        self.watch.begin(start, lines)
        clock.start()
        log(f"startup: {time.time() - PROCESS_START:.1f}s from process start to the first timed step")
        for step in range(start, total + 1):
            clock.at_step(step)
            validate = step == total or (hp.val_every > 0 and step % hp.val_every == 0)
            stopping = self.watch.check(step, validate)  # a non-finite step raises here, with its capture
            saving = self.checkpoints.due(step, start, step == total, stopping)
            if validate or saving:  # untimed; the device is waited for anyway
                clock.pause()
                lines.flush(step)
            if saving:
                log(f"checkpoint of step {step}: {self.checkpoints.save(self.state(step), clock.state())}")
            if stopping:
                raise Stopped(f"stopped by {self.stop.reason or 'a signal on another rank'} before step {step}; "
                              f"{self.checkpoints.resume_hint()}")
            if validate:
                val_loss = self.validate(step, clock)
            if validate or saving:
                clock.start()
            if step < total:
                with sync_debug(hp.sync_debug and self.rt.device.type == "cuda"):
                    self.train_step(step, self.next_batches(step))
                profiler.step()
                lines.step_done(step + 1)
        self.watch.end()
        log(peak_memory(self.rt.device))
        self.summarize(val_loss, clock)
        if not math.isfinite(val_loss):  # with the guard off, nothing stopped the run before
            raise NonFiniteError(f"the final val loss is {val_loss}: the run diverged (--guard_every > 0 stops and "
                                 "captures the first non-finite step)")

    def summarize(self, val_loss: float, clock: TrainClock):
        m = self.model  # the weights a token passes through in matmuls: attention, the MLP layers in use, the head
        matmul_params = m.attn_bank.numel() + m.mlp_bank[:m.cfg.num_layers].numel() + m.lm_head.numel()
        step_tokens = {i: MICRO_BATCHES * self.schedule.at(b).micro_batch_tokens
                       for i, b in enumerate(self.schedule.bounds[:-1])}
        for line in summary(val_loss, self.hp.vocab_size, self.hp.val_files, clock, self.schedule.total_steps,
                            step_tokens, 6 * matmul_params, self.rt.device, self.rt.world_size, self.log.path):
            self.log(line)

# -----------------------------------------------------------------------------
# main

@torch_settings()
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    hp, given = parse_args(argv, Hyperparameters, validate, check_files)
    check_resume(hp)
    os.environ.setdefault("PYTORCH_ALLOC_CONF", "expandable_segments:True")  # less fragmentation across stage shapes
    helpers = compile_helpers.start(hp, __file__, argv)  # a cold start's, on a GPU (started above, before the imports)
    rt = setup_runtime(hp, MICRO_BATCHES)
    if rt.device.type == "cpu":
        keep_freed_memory()
    if role := compile_helpers.role():  # this process is a cold start's compile helper: no log, no signal handling
        schedule = Schedule(hp)
        trainer = Trainer(hp, rt, schedule, check_data(hp, schedule, rt.world_size),
                          Logger(hp.log_dir, hp.run_id, is_master=False), StopRequest(), helper=role)
        return compile_helpers.serve(trainer.compile_ahead)
    stop = StopRequest().install()  # Ctrl-C and SIGTERM: at once during start-up, at a step boundary in the loop
    try:
        resume = None
        if hp.resume:  # every refusal comes before anything is built or a log is opened
            hp, resume = load_checkpoint(hp, given, rt.rank, rt.world_size, lambda saved: Schedule(saved).total_steps,
                                         weight_shapes, validate)
        claim_run(hp, rt.is_master, rt.distributed)  # rank 0 holds the run id until it exits
        schedule = Schedule(hp)
        data = check_data(hp, schedule, rt.world_size)  # before the model is built
        if rt.distributed:  # the same run on every rank
            agree(dataclasses.asdict(hp), data.shards, rt.rank, rt.world_size)
        need(not resume or resume["data"] == data.fingerprint, "the shards are not those the checkpoint was "
             f"cut from (names, sizes or tokens differ: {hp.train_files!r}, {hp.val_files!r}); resume with its data")
        log = open_log(hp, rt.is_master, resuming=resume is not None)
        try:
            log(data.report)
            trainer = Trainer(hp, rt, schedule, data, log, stop, helpers)
            for line in [rt.attention.description, *(f"skipped {note}" for note in rt.attention.skipped)]:
                log(f"attention: {line}")
            cfg, gpu = trainer.model.cfg, rt.device.type == "cuda"  # the numerics that ran
            log(f"FP8: LM head {cfg.fp8_head}, QKV {cfg.fp8_qkv}, MLP up {cfg.fp8_mlp}, MLP down and backward {cfg.fp8_mlp_blocks}, dW {cfg.fp8_mlp_dw}; "
                f"CE sigmoid from tanh.approx: {cfg.tanh_sigmoid}; CUDA graphs: {hp.cuda_graphs}"
                if gpu else "device cpu: the LM head is a bf16 matmul, kernels run their PyTorch references")
            emulated = f"emulated: rank {rt.rank}'s share in this one process; " if hp.emulate_world_size else ""
            # the world size, which tools/vs_reference.py puts on a record's line (nothing else in the log says it)
            log(f"world: {rt.world_size} ({emulated}gradient accumulation {rt.grad_accum_steps})")
            trainer.run(resume)
        except BaseException as e:  # the reason a run ended early goes into its log (the console gets one line below)
            log(f"stopped: {'interrupted by ' + str(e) if isinstance(e, KeyboardInterrupt) else e}", console=False)
            raise
        if rt.distributed:  # leave together: gloo aborts (SIGABRT) a rank whose peers close their sockets first
            dist.barrier()
    finally:
        if rt.distributed:
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(program(main, ending=run_ending)())
