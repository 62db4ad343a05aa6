"""train_gpt.py on the CPU: configuration, model wiring, optimizer math, data loader, errors, and
end-to-end runs (one process, and two gloo processes against one with accumulation).

    python3 -m pytest -q tests/test_train.py
"""
import dataclasses
import gc
import hashlib
import importlib.util
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import train_gpt as tg
from tools.fit_schedule import main as fit_schedule
from data.shards import find_shards, read_tokens, write_shard
from harness.cli import UserError
from harness.report import compile_time_breakdown
from harness.settings import parse_args
from kernels.attention import ATTENTION_CHOICES, select_attention
from kernels.configs import PersistentRowReductions
from tests.utils import (REPO, TINY, TINY_FLAGS, assert_close, batch_for, config_changes, cpu_runtime, cpu_trainer,
                         doc_stream, one_error_line, random_gradients, run_script, settings, shard_index, tiny_model,
                         torch_configs, val_losses)

# --- configuration ---------------------------------------------------------------------------

def test_parse_args_forms_and_types():
    hp = settings(["--val_tokens", "1024", "--val_micro_batch_tokens", "256", "--cooldown_frac=0.5",
                        "--compile", "False", "--stage_seq_lens", "[32, 64, 64]", "--train_files", "x_*.bin",
                        "--adam_lr", "1"])
    assert (hp.val_tokens, hp.cooldown_frac, hp.compile, hp.stage_seq_lens) == (1024, 0.5, False, (32, 64, 64))
    assert hp.train_files == "x_*.bin" and hp.adam_lr == 1.0 and isinstance(hp.adam_lr, float)


@pytest.mark.parametrize("argv, message", [
    (["--no_such_knob", "1"], "unknown setting --no_such_knob"),
    (["--val_tokens", "many"], "--val_tokens"),
    (["--val_tokens", "1.5"], "expects an int"),
    (["--seed"], "needs a value"),
    (["--log_dir", "--check"], "--log_dir needs a value, not the flag --check"),  # a wrapper's own flag, appended
    (["--train_files", "--run_id", "x"], "--train_files needs a value, not the flag --run_id"),
    (["val_tokens", "3"], "unexpected argument"),
    # one validation pass over the whole configuration: one line naming the flag and a valid value
    (["--head_dim", "30", "--model_dim", "60"], "--model_dim 60 must be a multiple of 8"),
    (["--num_heads", "3", "--head_dim", "256"], "--num_heads 3 x --head_dim 256 must equal --model_dim 768, with an "
                                                "even number of heads of a multiple of 4 channels, e.g. --num_heads 6 "
                                                "--head_dim 128"),
    (["--model_dim", "96"], "e.g. --num_heads 2 --head_dim 48"),
    (["--seed", str(2**70)], f"--seed {2**70} must be in [0, 2**63)"),
    (["--adam_lr", "1e999"], "--adam_lr inf must be finite"),
    (["--stage_mtp_weights", "(((0.0,), (0.0,)), ((1.0,), (1.0,)), ((1.0,), (1.0,)))"], "none all zero"),
    (["--profile_steps", "1400:1500"], "in this run's 1490 steps"),
    (["--dist_timeout", "0"], "--dist_timeout 0.0 must be positive seconds"),
    (["--val_micro_batch_tokens", "0"], "must be a positive multiple of --val_micro_batch_tokens 0"),
    (["--micro_batch_tokens", "(0, 128, 192)"], "--micro_batch_tokens (0, 128, 192) needs 3 positive integers"),
    (["--run_id", "sub/dir"], "--run_id 'sub/dir' must be a plain file name"),
    (["--adam_lr", "1e30"], "--adam_lr 1e+30 must be in (0, 1]"),
    (["--bos_id", "50300"], "--bos_id 50300 must be a token id below --vocab_size 50257"),
    (["--micro_batch_tokens", "(1000, 2000, 3000)", "--stage_seq_lens", "(500, 1000, 1000)"], "multiples of 16"),
    (["--stage_windows", "((1, 3), (3, 2), (5, 11), (6, 13))"], "short <= long"),
    (["--final_long_window", "4"], "may only grow"),
    (["--profile_steps", "5:3"], "--profile_steps '5:3' must look like 100:103"),
    (["--attention", "flash"], "--attention must be one of auto, fa3, varlen, sdpa, not 'flash'"),
    (["--emulate_world_size", "3"], "--emulate_world_size 3 must divide 8"),
    (["--emulate_rank", "1"], "--emulate_rank 1 must be a rank of --emulate_world_size (set it first)"),
    (["--emulate_world_size", "8", "--emulate_rank", "8"], "--emulate_rank 8 must be a rank of --emulate_world_size 8"),
    (["--emulate_world_size", "2", "--emulate_rank", "-1"], "--emulate_rank -1 must be a rank of --emulate_world_size 2"),
    (["--max_doc_tokens", "-1"], "--max_doc_tokens -1 must be 0 (off) or more"),
    (["--device", "cpu", "--micro_batch_tokens", "(127, 255, 383)", "--stage_seq_lens", "(129, 128, 128)"],
     "may exceed --micro_batch_tokens (127, 255, 383) by one token at most"),
])
def test_parse_args_errors(argv, message):
    with pytest.raises(UserError, match=re.escape(message)):
        settings(argv)


def test_check_refuses_a_missing_resume():
    """The run reads --resume at its start (harness/checkpoint.load_checkpoint); --check says whether it can."""
    with pytest.raises(UserError, match="^--resume '/no/such/checkpoint.pt': no such file$"):
        parse_args(["--resume", "/no/such/checkpoint.pt", "--check"], tg.Hyperparameters, tg.validate, tg.check_files)


SHORT = ["--num_scheduled_steps", "6", "--num_extension_steps", "2"]  # a run of 8 steps, 0 to 7


@pytest.mark.parametrize("argv, message", [
    (["--inject_fault_step", "8"], "--inject_fault_step 8 must be -1 or in this run's 8 steps (0 to 7: "
                                   "--num_scheduled_steps + --num_extension_steps)"),
    (["--val_every", "9"], "--val_every 9 is past the end of this run's 8 steps (0 to 7: --num_scheduled_steps + "
                           "--num_extension_steps): at most 8, or 0 (off)"),
    (["--guard_every", "9"], "--guard_every 9 is past the end of this run's 8 steps"),
    (["--checkpoint_every", "100"], "--checkpoint_every 100 is past the end of this run's 8 steps"),
    (["--profile_steps", "7:9"], "--profile_steps '7:9' must look like 100:103 (first step, step after the last) in "
                                 "this run's 8 steps"),
    (["--sync_debug", "True", "--device", "cpu"], "--sync_debug True warns of CUDA syncs: --device cpu has none"),
])
def test_a_setting_that_cannot_take_effect_is_refused_naming_the_runs_extent(argv, message):
    with pytest.raises(UserError, match=re.escape(message)):
        settings(SHORT + argv)


@pytest.mark.parametrize("argv", [[], ["--inject_fault_step", "7"], ["--val_every", "8"], ["--guard_every", "8"],
                                  ["--checkpoint_every", "8"], ["--profile_steps", "7:8"], ["--sync_debug", "True"]])
def test_a_setting_within_the_run_or_a_default_cadence_is_taken(argv):
    """The last step, a cadence of the run's length, and the record's default cadences (validate every 250, guard every
    50) in a short run, as the CPU demo and the tests run them."""
    assert settings(SHORT + argv).num_scheduled_steps == 6


def test_a_sequence_may_fill_a_micro_batch_and_its_last_target():
    """A micro-batch of T tokens reads T + 1: a sequence of T + 1 tokens fills it (run.sh's CPU runs on your shards)."""
    hp = settings(["--device", "cpu", "--micro_batch_tokens", "(127, 255, 383)", "--stage_seq_lens", "(128, 128, 128)"])
    assert hp.stage_seq_lens == (128, 128, 128)


@pytest.mark.parametrize("keep", [False, True])
def test_cpu_runs_keep_freed_memory(keep):
    """keep_freed_memory (main() on the CPU): memory a freed 64 MB block held serves the next 32 MB block, which
    glibc's malloc otherwise maps afresh from the kernel, at a page fault per 4 KB."""
    code = ("import resource, sys, torch\nfrom harness.launch import keep_freed_memory\n"
            "if sys.argv[1] == 'True': keep_freed_memory()\n"
            "torch.ones(1 << 24)\n"  # 64 MB, written and freed
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
            "torch.ones(1 << 23)\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)")
    r = subprocess.run([sys.executable, "-c", code, str(keep)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    faults = int(r.stdout)
    assert (faults < 100) if keep else (faults > 8000), faults


def test_attention_choices_are_the_kernels_table():
    """validate() checks --attention before torch loads, against its own list: it must be the kernels' table."""
    assert tg.ATTENTION == tuple(ATTENTION_CHOICES)


def test_importing_the_project_changes_no_environment_or_torch_setting():
    """Importing any module of the project sets no environment variable and no global torch setting: main() runs
    under torch_settings(), whose changes last as long as its block."""
    modules = [str(p.relative_to(REPO).with_suffix("")).replace("/", ".")
               for folder in ("kernels", "harness", "data") for p in sorted((REPO / folder).glob("*.py"))]
    probe = ("import os, sys, torch, torch._dynamo, importlib\n"
             "before = (dict(os.environ), torch._dynamo.config.get_config_copy())\n"
             "for name in sys.argv[1:]: importlib.import_module(name)\n"
             "print(before == (dict(os.environ), torch._dynamo.config.get_config_copy()))\n"
             "with sys.modules['train_gpt'].torch_settings(): print(torch._dynamo.config.specialize_float)\n"
             "print(before == (dict(os.environ), torch._dynamo.config.get_config_copy()))")
    out = subprocess.run([sys.executable, "-c", probe, "train_gpt", *modules], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.split() == ["True", "True", "True"], out


def test_torch_settings_last_as_long_as_their_block_and_a_hidden_entry_is_caught():
    """torch_settings() changes torch's config only inside its block. config_changes(), which every test's teardown
    runs (tests/conftest.py), names a changed entry and one a test deleted: deleting hides a config entry (every later
    read raises), which is how a monkeypatch undo of an attribute served by __getattr__ broke later tests."""
    before = torch_configs()
    with tg.torch_settings():
        assert sorted(config_changes(before)) == [
            "torch._dynamo.config.specialize_float is True, was False",
            "torch._functorch.config.autograd_cache_allow_custom_autograd_functions is True, was False",
            "torch._inductor.config.dynamic_scale_rblock is False, was True",
            "torch._inductor.config.inductor_choices_class is <class 'kernels.configs.PersistentRowReductions'>, "
            "was None",
            "torch._inductor.config.shape_padding is False, was True"]
    assert config_changes(before) == []
    delattr(torch._dynamo.config, "specialize_float")
    try:
        assert config_changes(before) == ["torch._dynamo.config.specialize_float is hidden (deleted)"]
    finally:
        torch._dynamo.config.specialize_float = before["torch._dynamo.config"]["specialize_float"]
    assert config_changes(before) == []


def test_help_lists_every_setting_and_check_validates_without_heavy_imports(synthetic_data):
    """--help names every setting with its default and meaning (from the Hyperparameters comments); --check (which
    also finds the data files) and setting errors answer before torch is imported."""
    out = subprocess.run([sys.executable, "train_gpt.py", "--help"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0
    for field in dataclasses.fields(tg.Hyperparameters):
        assert re.search(rf"^  --{field.name} \S.*  \S", out.stdout, re.M), f"--{field.name} lacks a default or meaning"
    probe = "import sys, runpy; sys.argv = ['train_gpt.py', *sys.argv[1:]]\ntry:\n    runpy.run_path('train_gpt.py', run_name='__main__')\nfinally:\n    print('torch imported:', 'torch' in sys.modules)"
    data = ["--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"]]
    for argv, code, text in ((["--check", *data], 0, "settings OK"), (["--num_heads", "5"], 1, "error: --num_heads"),
                             (["--check", *data, "--val_files", "nowhere/*.bin"], 1, "error: no val shards match")):
        out = subprocess.run([sys.executable, "-c", probe, *argv], cwd=REPO, capture_output=True, text=True)
        assert out.returncode == code and text in out.stdout + out.stderr and "torch imported: False" in out.stdout, out


def test_schedule_matches_record():
    s = tg.Schedule(tg.Hyperparameters())
    assert s.bounds == [0, 483, 967, 1450, 1490] and s.split_step == 967
    first, last = s.at(0), s.at(1489)
    assert first.windows == (1, 3) and s.at(1450).windows == (6, 13) and s.at(1450).stage == 3
    assert s.at(500).micro_batch_tokens == 32768 and first.seq_len == 896 and last.seq_len == 2048
    assert first.mtp_weights == (1.0, 0.5, 0.25) and last.mtp_weights == (1.0, 0.0, 0.0)
    assert first.lr_scale == 1.0 and s.at(1450).lr_scale == pytest.approx(0.15)
    assert first.muon_momentum == pytest.approx(0.85) and s.at(600).muon_momentum == pytest.approx(0.95)
    assert s.at(1490).muon_momentum == pytest.approx(0.85) and s.at(1490).stage == 3  # the final validation
    assert [s.at(n).adam for n in range(4)] == [False, True, False, True]
    # the extension keeps the last stage's batch and lr multiplier (before the cooldown's end) and its end weights
    assert s.at(1460).micro_batch_tokens == 49152 and s.at(1460).mtp_weights == s.at(1449).mtp_weights


@pytest.mark.parametrize("scheduled, extension", [(1450, 40), (120, 4), (7, 0), (3, 1)])
def test_warmup_covers_every_stage_shape_twice_and_both_optimizer_steps(scheduled, extension):
    """MicroStepGraphs compiles a shape's first micro-batch and captures its second: the warm-up must show each stage
    (its tokens, windows and length: the graph's key) at least twice, or the timed loop would capture a graph, and
    run an even and an odd (Adam) step, and the untie with the embedding's first Adam update of its own (a static
    graph at world 1, which the timed loop would compile: ~0.5 s once). Fewer steps than that would be start-up for
    nothing."""
    s = tg.Schedule(tg.Hyperparameters(num_scheduled_steps=scheduled, num_extension_steps=extension))
    for micro_batches in (1, 2, 4, 8):
        steps = s.warmup_steps(micro_batches)
        assert steps == sorted(set(steps)) and 0 <= steps[0] and steps[-1] < s.total_steps
        assert {n % 2 for n in steps} == {0, 1}
        stages = [s.at(n).stage for n in steps]
        for stage, (lo, hi) in enumerate(zip(s.bounds, s.bounds[1:])):  # twice, where the stage runs that long
            need = min(2, (hi - lo) * micro_batches)
            assert stages.count(stage) * micro_batches >= need, f"stage {stage} seen once at {micro_batches} micro-batches"
        untie = {n for n in (s.split_step, s.split_step + 2) if n < s.total_steps}
        assert untie <= set(steps), (untie, steps)
        expected = 2 + len(untie) + (len(s.bounds) - 2 - (extension == 0)) * (1 if micro_batches > 1 else 2)
        assert len(steps) <= expected, steps


@pytest.mark.parametrize("untie_frac", ["0.1", "0.9"])
def test_warmup_runs_two_micro_batches_a_step_then_restores_the_start(tmp_path, synthetic_data, untie_frac):
    """The warm-up needs a shape's first two micro-batches (compile, capture); the rest of a step would only replay.
    Then one validation micro-batch with the final windows: the validation's graph is compiled before the first
    timed step, not after the last (where a stall would be unwatched). It ends where it began: weights, optimizer
    state (it unties the embedding at the split step: step 1 at untie_frac 0.1, 5 at 0.9), gradients and data
    position."""
    hp = settings(TINY_FLAGS + ["--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"],
                                "--num_scheduled_steps", "6", "--num_extension_steps", "1", "--untie_frac", untie_frac,
                                "--log_dir", str(tmp_path)])
    trainer = cpu_trainer(hp)
    assert trainer.schedule.split_step in trainer.schedule.warmup_steps(trainer.rt.grad_accum_steps)
    assert trainer.rt.grad_accum_steps > 2
    sizes, collecting, micro_step = [], set(), trainer.micro_step

    def spy(mb, sched):
        sizes.append(mb.inputs.numel())
        collecting.add(gc.isenabled())
        return micro_step(mb, sched)
    trainer.micro_step = spy
    evaluate, evaluated = trainer.evaluate, []

    def evaluate_spy(inputs, *args):
        evaluated.append((inputs.numel(), args[3].long_window, trainer.model.training, torch.is_grad_enabled()))
        return evaluate(inputs, *args)
    trainer.evaluate = evaluate_spy
    before = trainer.snapshot(0)
    trainer.warmup()
    assert evaluated == [(hp.val_micro_batch_tokens, hp.final_long_window * hp.window_block, False, False)]
    assert collecting == {False}, "the garbage collector is off while the warm-up compiles"
    assert gc.isenabled() and gc.get_freeze_count(), "on after it, with the compile's objects frozen out of it"
    gc.unfreeze()  # this test process's objects, for the tests after this one
    steps = trainer.schedule.warmup_steps(trainer.rt.grad_accum_steps)
    assert sizes == [trainer.schedule.at(n).micro_batch_tokens for n in steps for _ in range(2)]
    after = trainer.state(0)
    for part in ("model", "optimizer"):
        flat_before, flat_after = torch.utils._pytree.tree_leaves(before[part]), torch.utils._pytree.tree_leaves(after[part])
        assert all(torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b for a, b in zip(flat_before, flat_after))
    assert after["loader"] == before["loader"]
    assert all(not g.any() for g in trainer.model.gradients().values())
    assert not any(t.any() for t in [*trainer.model.written_rows().values(), *trainer.optimizer.wires.values()])


# --- model -----------------------------------------------------------------------------------

def test_forward_backward_shapes_and_grads():
    model = tiny_model()
    mb, sched = batch_for(model, 128)
    loss = model(mb.inputs, mb.targets, mb.cu_seqlens, mb.bigram, sched)
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    params = dict(model.named_parameters())
    for name, grad in model.gradients().items():
        assert grad.shape == params[name].shape and torch.isfinite(grad).all(), name
        assert grad.dtype == (torch.float32 if name in model.LOOKUP_TABLES else params[name].dtype), name
    model.eval()
    with torch.no_grad():
        val = model(mb.inputs, mb.targets, mb.cu_seqlens, mb.bigram, sched)
    # near-uniform logits at init: the mean loss is close to log(vocab)
    assert abs(val.item() - np.log(256)) < 0.5


def test_zero_init_outputs_and_lane_wiring():
    model = tiny_model()
    cfg = model.cfg
    mb, sched = batch_for(model, 96, seed=1)
    loss = model(mb.inputs, mb.targets, mb.cu_seqlens, mb.bigram, sched)
    loss.backward()
    g = {n: grad.float() for n, grad in model.gradients().items()}
    # MLP output projections start at zero, so no gradient reaches the MLP input weights yet
    assert g["mlp_bank"][:, 0].abs().max() == 0 and g["mlp_bank"][:cfg.num_layers, 1].abs().max() > 0
    # the padding layer of the bank is never used
    assert g["mlp_bank"][cfg.num_layers:].abs().max() == 0
    # post-attention lambdas exist only on the two-lane layers
    assert g["post_lambdas"][:cfg.parallel_start, 0].abs().max() == 0
    assert (g["post_lambdas"][cfg.parallel_start:, 0].abs().sum(-1) > 0).all()
    # the MLP-only layer gets no x0/bigram injection
    assert g["x0_lambdas"][cfg.mlp_only_layer] == 0 and g["bigram_lambdas"][cfg.mlp_only_layer] == 0


def gpu_attention_kernels() -> list[str]:
    """The attention kernels this machine can compile the model with: sdpa on a CPU; varlen, and fa3 when it loads,
    on a GPU."""
    if not torch.cuda.is_available():
        return ["sdpa"]
    try:
        return ["varlen", select_attention("fa3", torch.device("cuda"), hub_wait=0).kernel]
    except UserError:
        return ["varlen"]


@pytest.mark.parametrize("attention", sorted(set(gpu_attention_kernels())))
@tg.torch_settings()  # what main() compiles under (specialized floats)
def test_model_compiles_once_for_every_stage(attention):
    """fullgraph tracing of forward and backward (AOTAutograd) with the GPU configuration's custom ops,
    as the trainer compiles it: a Triton launch that the compiler would trace into, or a graph break,
    fails here, and so does a recompile when the token count, windows, MTP weights or YaRN scale change
    between stages (each costs about a minute of start-up on a GPU). On a CPU the Triton MLP runs through
    the interpreter (values are not checked: it mishandles bf16); on a GPU with FA3, its kernels too."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    cuda = torch.cuda.is_available()
    cfg = tg.GPTConfig(vocab_size=256, model_dim=128, num_heads=2, head_dim=64, max_tokens=512, fused_mlp=True,
                       fp8_head=cuda, fp8_mlp=True, fp8_mlp_blocks=True, fp8_mlp_dw=True, fp8_qkv=True,
                       tanh_sigmoid=cuda, attention=attention)
    torch.manual_seed(0)
    model = tg.GPT(cfg).to("cuda" if cuda else "cpu")
    graphs = []
    count = aot_autograd(fw_compiler=lambda gm, _: graphs.append("fw") or make_boxed_func(gm),
                         bw_compiler=lambda gm, _: graphs.append("bw") or make_boxed_func(gm))
    torch._dynamo.reset()
    attempts = torch._dynamo.utils.compilation_time_metrics
    attempts.pop("compile_attempt_1", None)
    compiled = torch.compile(model, backend=count, fullgraph=True, dynamic=True)
    hp = tg.Hyperparameters(micro_batch_tokens=(128, 256, 384), stage_seq_lens=(64, 128, 128), window_block=8,
                            num_scheduled_steps=3, num_extension_steps=1)
    schedule = tg.Schedule(hp)
    w8 = model.fp8_weights()  # made once, as the trainer does
    for step in range(schedule.total_steps):  # one step per stage, then the extension (YaRN grows the scale)
        settings = schedule.at(step)
        mb, _ = batch_for(model, settings.micro_batch_tokens, seed=step)
        short, long = settings.windows
        if step == schedule.total_steps - 1:
            model.extend_rotary(schedule.at(step - 1).windows[1] * 8, long * 8)
        sched = tg.ForwardSchedule(short * 8, long * 8, settings.seq_len, torch.tensor(settings.mtp_weights))
        if cuda:
            mb = tg.MicroBatch(*(t.cuda() for t in (mb.inputs, mb.targets, mb.cu_seqlens, mb.bigram)))
            sched = dataclasses.replace(sched, mtp_weights=sched.mtp_weights.cuda())
        compiled(mb.inputs, mb.targets, mb.cu_seqlens, mb.bigram, sched, w8).backward()
    assert graphs == ["fw", "bw"], f"expected one forward and one backward graph for all stages, got {graphs}"
    assert "compile_attempt_1" not in attempts, "Dynamo restarted its analysis of the model (a symbolic float?)"
    grads, flags = model.gradients(), model.written_rows()
    assert all(grads[name].any() for name in model.LOOKUP_TABLES), "the compiled backward lost a table's gradient"
    assert all(flags[n].any() and not grads[n][~flags[n].bool()].any() for n in model.LOOKUP_TABLES), \
        "the compiled backward flags every table row it writes"
    model.eval()
    with torch.no_grad():
        compiled(mb.inputs, mb.targets, mb.cu_seqlens, mb.bigram, sched, w8)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's run is deterministic (the GPU's table gradients are "
                    "atomic sums): a CPU case")
def test_fp8_weights_made_once_are_the_forward_own_casts():
    """GPT.fp8_weights, which the trainer makes once per optimizer step for all micro-batches, are the FP8 copies the
    forward would make itself: the loss and every gradient equal, bit for bit (the kernels through the interpreter)."""
    cfg = tg.GPTConfig(vocab_size=256, model_dim=128, num_heads=2, head_dim=64, max_tokens=512, fused_mlp=True,
                       fp8_mlp=True, fp8_mlp_blocks=True, fp8_qkv=True)

    def micro_step(own_casts: bool):
        torch.manual_seed(0)
        model = tg.GPT(cfg)
        mb, sched = batch_for(model, 128)
        loss = model(mb.inputs, mb.targets, mb.cu_seqlens, mb.bigram, sched, None if own_casts else model.fp8_weights())
        loss.backward()
        return loss.detach(), model.gradients()
    (loss, grads), (loss_w8, grads_w8) = micro_step(True), micro_step(False)
    assert torch.equal(loss, loss_w8)
    assert all(torch.equal(grads[name], grads_w8[name]) for name in grads), "a gradient differs"
    assert tg.GPT(dataclasses.replace(cfg, fp8_qkv=False)).fp8_weights() is None, "partly FP8: the forward casts"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("assign", [False, True])
def test_cuda_graph_replays_match_eager_micro_steps(assign):
    """MicroStepGraphs (run, capture, then replay per shape) gives the losses and summed gradients of plain
    micro-steps: new batches reach the static inputs, the MTP weights are read in place, and a second
    shape gets its own graph. assign: the banks' gradients are the last backward's (NorMuonAdam.assigned), written
    where each graph's capture put them, so after a replay of the first shape again they are its."""
    def micro_steps(use_graphs: bool):
        model = tiny_model(attention="varlen", fused_mlp=True).cuda()
        mtp = torch.tensor([1.0, 0.5, 0.25], device="cuda")
        assigned = [model.attn_bank, model.mlp_bank] if assign else []

        def forward_backward(mb, sched):
            for p in assigned:
                p.grad = None
            mb = mb.to(torch.device("cuda"))  # as the trainer's: batches wait in pinned host memory
            loss = model(mb.inputs, mb.targets, mb.cu_seqlens, mb.bigram, sched)
            loss.backward()
            return loss.detach()
        step = tg.MicroStepGraphs(forward_backward, assigned) if use_graphs else forward_backward
        losses = []
        for i, T in enumerate([128, 128, 128, 128, 256, 256, 256, 128]):  # shape 1: run, capture, replays
            mb, sched = batch_for(model, T, seed=i)
            mb = tg.MicroBatch(*(t.pin_memory() for t in mb.tensors()))
            mtp.copy_(torch.tensor([1.0, 0.5 / (i + 1), 0.0]))
            losses.append(step(mb, dataclasses.replace(sched, mtp_weights=mtp)))
        return model, step, torch.stack(losses)
    graphed, graphs, graph_losses = micro_steps(True)
    eager, _, eager_losses = micro_steps(False)
    assert len(graphs.graphs) == 2, "expected one graph per micro-batch shape"
    assert_close(graph_losses, eager_losses, atol=1e-3, rtol=1e-3, name="losses")
    eager_grads = eager.gradients()
    for name, grad in graphed.gradients().items():
        scale = eager_grads[name].float().abs().max().item() + 1e-12
        assert_close(grad.float(), eager_grads[name].float(), atol=2e-2 * scale, rtol=2e-2, name=name)


@pytest.mark.parametrize("fill_rows", [7, tg.Rotary.FILL_ROWS])
def test_rotary_puts_each_head_at_its_position(monkeypatch, fill_rows):
    """x (T, heads, head_dim): token t rotates as position t. Paired, x is (T, 2, heads/2, head_dim) and head
    h = j * heads/2 + i of token t rotates as position 2t + h % 2. Reference: the rotation written out per head,
    with YaRN-rescaled frequencies; the table is filled by blocks of fill_rows."""
    monkeypatch.setattr(tg.Rotary, "FILL_ROWS", fill_rows)
    T, H, Dh = 40, 6, 32
    rot = tg.Rotary(tg.GPTConfig(vocab_size=256, model_dim=H * Dh, num_heads=H, head_dim=Dh, max_tokens=64))
    rot.extend(16, 48)
    t = torch.arange(T, dtype=torch.float32)

    def expected(x: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        theta = torch.outer(position, rot.freq)
        even, odd = x[:, 0::2].float(), x[:, 1::2].float()
        c, s = theta[:, 0::2].cos(), theta[:, 0::2].sin()  # pairs share a frequency
        return torch.stack([even * c + odd * s, odd * c - even * s], dim=-1).flatten(-2)
    x = torch.randn(T, 2, H // 2, Dh).bfloat16()
    out = rot(x)
    for h in range(H):
        j, i = divmod(h, H // 2)
        assert_close(out[:, j, i], expected(x[:, j, i], 2 * t + h % 2), atol=2e-2, rtol=2e-2,
                     name=f"paired rotary, head {h}")
    x = torch.randn(T, H, Dh).bfloat16()
    out = rot(x)
    for h in range(H):
        assert_close(out[:, h], expected(x[:, h], t), atol=2e-2, rtol=2e-2, name=f"rotary, head {h}")


def test_compiled_graph_has_no_index_math_modulo_the_token_count():
    """The training graph at GPU settings, compiled with a symbolic token count: no Triton load or store indexes
    modulo it. Such index math came with copy kernels and 3x slower kernels on an H100 (tests/inductor_codegen.py).
    And no reduction over short rows loops, nor has its launch config timed at its first launch (a pick by chance:
    kernels/configs.PersistentRowReductions)."""
    out = subprocess.run([sys.executable, "-m", "tests.inductor_codegen"], cwd=REPO, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    assert summary["modules"] >= 2, f"expected the forward's and the backward's code: {out.stderr[-1500:]}"
    assert not summary["symbolic_modulo"], "index math modulo the token count:\n" + "\n".join(summary["symbolic_modulo"])
    assert not summary["looped_short_rows"], ("looped reductions over rows of at most 1024 elements (one pass each "
                                              "is faster):\n" + "\n".join(summary["looped_short_rows"]))
    assert not summary["timed_short_rows"], ("one-pass reductions over rows shorter than 256 elements whose launch config "
                                             "Inductor times:\n" + "\n".join(summary["timed_short_rows"]))
    # the QK norm's kernels read the rotary's swapped pairs (flip); the attention gates' read their rows in order
    launch = lambda config: (config["XBLOCK"], config["num_warps"])  # noqa: E731
    expected = {True: launch(PersistentRowReductions.OUT_OF_ORDER_ROW_CONFIG),
                False: launch(PersistentRowReductions.SHORT_ROW_CONFIG)}
    wrong = [kernel for kernel in summary["fixed_configs"] if tuple(kernel[1:]) != expected["flip" in kernel[0]]]
    assert summary["fixed_configs"] and not wrong, f"short-row kernels launched as the other read order's: {wrong}"


def test_lookup_gradients_sum_in_fp32_over_micro_batches():
    """The token tables' gradients (scattered into fp32 buffers by lookup_op's backward) equal autograd's
    dense embedding gradients, summed over micro-batches; no table gets a .grad of its own."""
    model = tiny_model()
    reference = {name: torch.zeros(getattr(model, name).shape, dtype=torch.float64) for name in model.LOOKUP_TABLES}
    for seed in range(2):
        mb, sched = batch_for(model, 96, seed=seed)
        model(mb.inputs, mb.targets, mb.cu_seqlens, mb.bigram, sched).backward()
        probe = {}
        original = tg.lookup_op

        def dense_lookup(table, idx, grad_acc, flags):  # the same forward through F.embedding: autograd's gradient
            name = next(n for n in model.LOOKUP_TABLES if getattr(model, n) is table)
            probe[name] = table.detach().clone().requires_grad_()
            return list(F.embedding(idx, probe[name]))  # one (T, D) tensor per row of idx, as lookup_op
        tg.lookup_op = dense_lookup
        try:
            model(mb.inputs, mb.targets, mb.cu_seqlens, mb.bigram, sched).backward()
        finally:
            tg.lookup_op = original
        for name, table in probe.items():
            reference[name] += table.grad.double()
    grads, flags = model.gradients(), model.written_rows()
    for name in model.LOOKUP_TABLES:
        assert getattr(model, name).grad is None
        written = flags[name].bool()
        assert not grads[name][~written].any() and not written.all(), f"{name}: the flags name every row written"
        # autograd's reference sums in bf16 on the CPU; the buffers sum in fp32
        assert_close(grads[name], reference[name], atol=1e-2 * reference[name].abs().max().item(), rtol=1e-2, name=name)


# --- optimizer -------------------------------------------------------------------------------

def test_normuon_step_matches_plain_reference():
    """One optimizer step on the attention bank equals the plain fp32 NorMuon math."""
    from kernels.polar_express import polar_express_reference
    model = tiny_model()
    hp = tg.Hyperparameters(**TINY)
    opt = tg.NorMuonAdam(model, hp, cpu_runtime(), compile=False)
    grads = random_gradients(model)
    bank = model.attn_bank
    w0, grad = bank.detach().float().clone(), grads["attn_bank"].float().clone()
    lr_scale, momentum = 0.7, 0.9
    opt.step(lr_scale, momentum, do_adam=False)

    n, R, C = model.muon_matrix_shapes()["attn_bank"]
    g = grad.view(n, R, C)
    v = polar_express_reference(g.clone(), torch.zeros_like(g), momentum).float()  # fresh momentum buffer
    v_sq = v.square().mean(-1, keepdim=True)  # R >= C: one statistic per row
    second = (1 - hp.muon_beta2) * v_sq
    scale = second.clamp_min(1e-10).rsqrt()
    scale = scale * (v_sq.sum((-2, -1), keepdim=True) / (v_sq * scale ** 2).sum((-2, -1), keepdim=True)).sqrt()
    update = v * scale
    lr = hp.muon_lr * lr_scale
    w = w0.view(n, R, C)
    expected = w - w * ((update * w) >= 0) * hp.muon_wd * lr * lr - update * lr
    assert_close(bank.detach().float().view(n, R, C), expected, atol=2e-2 * lr, rtol=1e-2)
    # the mantissa side buffer holds the bits bf16 drops: together they are the fp32 master weights
    # (atol: the cautious-decay mask may flip where the update is ~0, moving a weight by wd * lr^2 * |w|)
    bits = (bank.detach().view(n, R, C).view(torch.int16).to(torch.int32) << 16) | \
           (opt.state["attn_bank"]["mantissa"].view(torch.int16).to(torch.int32) & 0xFFFF)
    assert_close(bits.view(torch.float32).view(n, R, C), expected, atol=hp.muon_wd * lr * lr * w.abs().max(), rtol=1e-5)
    assert not grads["mlp_bank"].any() and grads["embed"].all()  # zeroed in place; Adam's wait for an odd step


def test_adam_steps_on_odd_steps_and_tied_embedding():
    model = tiny_model()
    opt = tg.NorMuonAdam(model, tg.Hyperparameters(**TINY), cpu_runtime(), compile=False)
    random_gradients(model)
    head0 = model.lm_head.detach().clone()
    opt.step(1.0, 0.9, do_adam=True)
    assert not torch.equal(model.lm_head, head0)
    assert torch.equal(model.embed, model.lm_head.T)  # tied: embedding rewritten from the head
    opt.untie()
    random_gradients(model)
    opt.step(1.0, 0.9, do_adam=True)
    assert not torch.equal(model.embed, model.lm_head.T)
    assert opt.state["embed"]["step"] == opt.state["lm_head"]["step"] == 2


# --- data ------------------------------------------------------------------------------------

def write_docs(tmp_path: Path, name: str, tokens: np.ndarray) -> Path:
    path = tmp_path / name
    write_shard(path, tokens)
    return path


def test_train_loader_ranks_partition_the_batches(tmp_path):
    rng = np.random.default_rng(0)
    for i in range(2):
        write_docs(tmp_path, f"t_train_{i:06d}.bin", doc_stream(rng, 400))
    hp = tg.Hyperparameters(**TINY, bos_id=255, train_files=str(tmp_path / "t_train_*.bin"))
    cpu = torch.device("cpu")

    def steps(rank, world, n=12):
        loader = tg.TrainLoader(shard_index(hp), hp, rank, world, cpu, 1280, tg.CuSeqlensCapacity(log=lambda m: None))
        return [loader.next_step(96, 24).micro_batches for _ in range(n)]
    single = steps(0, 1)
    split = [steps(r, 2) for r in range(2)]
    for s in range(len(single)):
        for slot, mb in enumerate(single[s]):
            other = split[slot % 2][s][slot // 2]  # slot s goes to rank s % world, in accumulation order
            assert torch.equal(mb.inputs, other.inputs) and torch.equal(mb.cu_seqlens, other.cu_seqlens)
    seen = []
    for step in single:
        for mb in step:
            T = mb.inputs.numel()
            assert T == 96 and torch.equal(mb.inputs[1:], mb.targets[:-1].int())
            ends = mb.cu_seqlens.tolist()
            starts = [0] + [e for e in ends[1:] if e < T]
            assert all(mb.inputs[s] == 255 for s in starts), "every sequence starts with BOS"
            lengths = np.diff([e for e in ends if e <= T])
            assert lengths.max() <= 24 and ends[-1] == T
            seen.append(mb.inputs.numpy())
    # consecutive micro-batches never repeat a document start
    assert len({a.tobytes() for a in seen}) == len(seen)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory and copies to a GPU")
def test_train_batches_wait_in_pinned_host_memory(tmp_path):
    """A step's micro-batches stay on the host (pinned: asynchronous copies), taking no GPU memory until their
    micro-step copies them over; MicroBatch.to gives the same values on the GPU."""
    write_docs(tmp_path, "t_train_000000.bin", doc_stream(np.random.default_rng(0), 400))
    hp = tg.Hyperparameters(**TINY, bos_id=255, train_files=str(tmp_path / "t_train_*.bin"))
    loader = tg.TrainLoader(shard_index(hp), hp, 0, 1, torch.device("cuda"), 1280, tg.CuSeqlensCapacity(log=print))
    for mb in loader.next_step(96, 24).micro_batches:
        assert all(t.device.type == "cpu" and t.is_pinned() for t in mb.tensors())
        on_gpu = mb.to(torch.device("cuda"))
        assert all(g.is_cuda and torch.equal(g.cpu(), t) for g, t in zip(on_gpu.tensors(), mb.tensors()))


def test_cu_seqlens_capacity_grows_instead_of_failing():
    logs = []
    cap = tg.CuSeqlensCapacity(log=logs.append)
    long_docs = np.arange(0, 10_000, 500)
    first = cap.fit(1000, long_docs, 3)
    assert first >= 3 and first % 128 == 0
    assert cap.fit(1000, long_docs, first + 5) >= first + 5 and "grown" in logs[0]


def test_bigram_hash_in_range():
    t = np.random.default_rng(0).integers(0, 50257, 10_000)
    h = tg.bigram_hash(t, 5 * 50304)
    assert h[0] == 5 * 50304 - 1 and h.min() >= 0 and h[1:].max() < 5 * 50304 - 1


# --- errors ----------------------------------------------------------------------------------

def data_settings(tmp_path, **overrides) -> tg.Hyperparameters:
    """Tiny settings over two train shards and a val shard of synthetic documents written into tmp_path."""
    rng = np.random.default_rng(0)
    for i in range(2):
        write_docs(tmp_path, f"d_train_{i:06d}.bin", doc_stream(rng, 400))
    write_docs(tmp_path, "d_val_000000.bin", doc_stream(rng, 200))
    settings = dict(TINY, bos_id=255, train_files=str(tmp_path / "d_train_*.bin"), val_files=str(tmp_path / "d_val_*.bin"),
                    micro_batch_tokens=(64, 128, 192), stage_seq_lens=(32, 64, 64), val_micro_batch_tokens=256,
                    val_tokens=1024, num_scheduled_steps=6, num_extension_steps=2)
    return tg.Hyperparameters(**(settings | overrides))


def test_split_documents_reads_each_document_as_pieces():
    """Documents at 0 (5 tokens), 5 (300: pieces of 128, 128, 44) and 305 (128: one piece) of a 433-token shard."""
    assert tg.split_documents(np.array([0, 5, 305]), 433, 128).tolist() == [0, 5, 133, 261, 305]
    assert tg.split_documents(np.array([3]), 4, 2).tolist() == [3]  # tokens before the first BOS are not read


def long_doc_settings(tmp_path, **overrides) -> tg.Hyperparameters:
    """data_settings over one train shard of 40 documents of 192-448 tokens (whole multiples of 64)."""
    rng = np.random.default_rng(1)
    docs = [np.concatenate([[255], rng.integers(0, 255, 64 * n - 1)]) for n in rng.integers(3, 8, 40)]
    hp = data_settings(tmp_path, train_files=str(tmp_path / "long_train_*.bin"), **overrides)
    write_docs(tmp_path, "long_train_000001.bin", np.concatenate(docs).astype(np.uint16))
    return hp


def test_long_documents_are_refused_with_the_setting_that_reads_them(tmp_path):
    """Cut at 64 tokens, documents of 192-448 cover few steps: the refusal names --max_doc_tokens 64, with which the
    same shards cover the schedule."""
    hp = long_doc_settings(tmp_path, num_scheduled_steps=5)
    with pytest.raises(UserError, match=re.escape("median") + ".*" + re.escape("read them in pieces with "
                                                                                "--max_doc_tokens 64")):
        tg.check_data(hp, tg.Schedule(hp), world_size=1)
    hp = dataclasses.replace(hp, max_doc_tokens=64)
    assert "documents read in pieces of 64 tokens" in tg.check_data(hp, tg.Schedule(hp), world_size=1).report


def test_pieces_fill_micro_batches_of_one_token_less_with_nothing_skipped(tmp_path):
    """run.sh's reading of your shards on the CPU: with pieces of 64 tokens and micro-batches of 63, 127 and 191
    tokens (each reads one more, the last target), every step takes 1, 2 or 3 whole pieces per micro-batch, so the
    micro-batches read the shard's tokens one after the other, none skipped, in sequences of at most 64."""
    hp = long_doc_settings(tmp_path, max_doc_tokens=64, micro_batch_tokens=(63, 127, 191), stage_seq_lens=(64, 64, 64))
    schedule = tg.Schedule(hp)
    data = tg.check_data(hp, schedule, world_size=1)
    [(path, starts)] = data.train.items()
    tokens = read_tokens(path)
    loader = tg.TrainLoader(data.train, hp, 0, 1, torch.device("cpu"), 1280, tg.CuSeqlensCapacity(log=lambda m: None))
    at = 0
    for step in range(schedule.total_steps):
        step_settings = schedule.at(step)
        for mb in loader.next_step(step_settings.micro_batch_tokens, step_settings.seq_len).micro_batches:
            T = mb.inputs.numel()
            read = np.append(mb.inputs.numpy(), mb.targets[-1].item())
            assert np.array_equal(read, tokens[at:at + T + 1]), f"step {step}: not the next {T + 1} tokens"
            assert np.diff(mb.cu_seqlens.numpy()).max() <= 64
            at += T + 1
    assert at == tg.cover(schedule, [starts], [tokens.size])[2]


def test_longest_schedule_is_the_longest_the_shards_cover(tmp_path):
    hp = data_settings(tmp_path, num_scheduled_steps=400)
    index, sizes, _ = tg.index_train_shards(hp)
    starts = list(index.values())

    def covered(n: int) -> bool:
        schedule = tg.Schedule(dataclasses.replace(hp, num_scheduled_steps=n))
        return tg.cover(schedule, starts, sizes)[0] == schedule.total_steps
    n = tg.longest_schedule(hp, starts, sizes)
    assert 3 <= n < 400 and covered(n) and not covered(n + 1)
    assert tg.longest_schedule(dataclasses.replace(hp, num_scheduled_steps=n - 5), starts, sizes) == n - 5
    assert tg.longest_schedule(dataclasses.replace(hp, micro_batch_tokens=(2048, 4096, 8192)), starts, sizes) is None


def test_fit_schedule_prints_the_longest_schedule_and_what_it_takes(tmp_path, capsys):
    """run.sh's plan on your shards: one line that starts with the steps; when none fit, check_data's refusal."""
    hp = data_settings(tmp_path)
    flags = [*TINY_FLAGS, "--train_files", hp.train_files, "--val_files", hp.val_files, "--num_extension_steps", "2"]
    index, sizes, _ = tg.index_train_shards(hp)
    longest = tg.longest_schedule(dataclasses.replace(hp, num_scheduled_steps=400), list(index.values()), sizes)
    assert fit_schedule([*flags, "--num_scheduled_steps", "400"]) == 0
    line = capsys.readouterr().out
    assert line.startswith(f"{longest} scheduled steps (+ 2; 400 asked) fit the train shards: they take ")
    assert f"of their {sum(sizes):,} tokens (" in line and line.count("\n") == 1
    assert fit_schedule([*flags, "--num_scheduled_steps", "6", "--max_doc_tokens", "16"]) == 0
    assert capsys.readouterr().out.startswith("6 scheduled steps (+ 2) fit")
    with pytest.raises(SystemExit) as e:
        fit_schedule([*flags, "--micro_batch_tokens", "(2048, 4096, 8192)", "--stage_seq_lens", "(64, 64, 64)"])
    assert e.value.code == 1
    one_error_line(capsys.readouterr().err, "no --num_scheduled_steps fits with these --micro_batch_tokens")


def test_check_data_reports_what_the_schedule_takes(tmp_path):
    hp = data_settings(tmp_path)
    data = tg.check_data(hp, tg.Schedule(hp), world_size=1)
    assert list(data.train) == find_shards(hp.train_files, "train") and all(b.size > 0 for b in data.train.values())
    assert data.val == find_shards(hp.val_files, "val")
    # 8 micro-batches of T + 1 tokens per step: 2 steps in each stage of (64, 128, 192) tokens and the extension
    assert "data: 2 train shard(s)" in data.report and "the schedule's 8 steps take 9,280 of them" in data.report


@pytest.mark.parametrize("problem, message", [
    ("bad_token_in_second_shard", "d_train_000001.bin: token id 300 >= vocab_size 256"),
    ("no_bos", "no document separator (token 255)"),
    ("directory", "which is not a file"),
    ("schedule_too_long", "cover "),
    ("val_too_short", "lower --val_tokens"),
    ("val_world_multiple", "multiple of --val_micro_batch_tokens x world size = 256 x 8"),
    ("no_val", "no val shards match"),
])
def test_check_data_refuses_bad_data_before_any_work(tmp_path, problem, message):
    hp = data_settings(tmp_path)
    world = 1
    if problem == "bad_token_in_second_shard":
        tokens = doc_stream(np.random.default_rng(5), 400)
        tokens[-1] = 300
        write_docs(tmp_path, "d_train_000001.bin", tokens)
        hp = dataclasses.replace(hp, vocab_size=256)
    elif problem == "no_bos":
        write_docs(tmp_path, "d_train_000001.bin", np.full(500, 7, dtype=np.uint16))
    elif problem == "directory":
        (tmp_path / "d_train_000002.bin").mkdir()
    elif problem == "schedule_too_long":
        hp = dataclasses.replace(hp, num_scheduled_steps=400)
    elif problem == "val_too_short":
        hp = dataclasses.replace(hp, val_tokens=256 * 1000)
    elif problem == "val_world_multiple":
        world = 8
    else:
        hp = dataclasses.replace(hp, val_files=str(tmp_path / "nothing_*.bin"))
    with pytest.raises(UserError, match=re.escape(message)):
        tg.check_data(hp, tg.Schedule(hp), world)


def test_unsupported_world_size_and_missing_cuda_fail_early():
    r = run_script(["--device", "cpu"], env_extra={"WORLD_SIZE": "3", "RANK": "0", "MASTER_ADDR": "127.0.0.1",
                                                   "MASTER_PORT": "29400"})
    assert r.returncode != 0
    one_error_line(r.stderr, "world size 3 is not supported")
    if not torch.cuda.is_available():
        r = run_script(["--device", "cuda"])
        assert r.returncode != 0
        one_error_line(r.stderr, "CUDA is not available")


@pytest.mark.parametrize("problem, message", [("missing", "no train shards match"), ("corrupt", "bad magic number")])
def test_bad_train_data_fails_early_with_a_clear_message(tmp_path, synthetic_data, problem, message):
    if problem == "corrupt":
        (tmp_path / "bad_train_000000.bin").write_bytes(b"not a shard" * 200)
    r = run_script(TINY_FLAGS + ["--train_files", str(tmp_path / "bad_train_*.bin"), "--val_files", synthetic_data["val"],
                                 "--log_dir", str(tmp_path)])
    assert r.returncode != 0
    one_error_line(r.stderr, message)


def test_no_host_sync_inside_training_steps(monkeypatch, tmp_path, synthetic_data):
    """The timed loop reads nothing back from the device per step (on a GPU, each read would be a
    sync): no .item()/.tolist()/.cpu()/bool() of a tensor inside train_step."""
    hp = settings(TINY_FLAGS + ["--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"],
                                     "--num_scheduled_steps", "6", "--log_dir", str(tmp_path)])
    trainer = cpu_trainer(hp)
    reads = []
    for name in ("item", "tolist", "cpu", "__bool__", "__float__", "__int__", "__index__"):
        original = getattr(torch.Tensor, name)

        def spy(self, *args, _original=original, _name=name, **kwargs):
            reads.append(_name)
            return _original(self, *args, **kwargs)
        monkeypatch.setattr(torch.Tensor, name, spy)
    for step in range(4):  # an Adam step (odd) and a NorMuon-only step (even) included
        trainer.train_step(step, trainer.next_batches(step))
    assert reads == []
    monkeypatch.undo()
    assert trainer.guard.read() == (None, False)  # a read where the loop waits anyway


def test_fault_is_caught_captured_and_replayed(tmp_path, synthetic_data):
    flags = TINY_FLAGS + ["--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"],
                          "--num_scheduled_steps", "9", "--val_every", "0", "--warmup", "False", "--guard_every", "4",
                          "--inject_fault_step", "5", "--log_dir", str(tmp_path), "--run_id", "fault"]
    r = run_script(flags)
    capture = tmp_path / "fault_capture_rank0.pt"
    assert r.returncode != 0 and "non-finite loss or gradient at step 5 (noticed at step 12)" in r.stderr, r.stderr[-2000:]
    assert f"Replay: python3 tools/replay.py {capture}" in r.stderr and capture.exists()
    assert "stopped: non-finite loss or gradient at step 5" in (tmp_path / "fault.txt").read_text()
    saved = torch.load(capture, weights_only=True)
    assert saved["state"]["step"] == 5 and saved["reproduced"] and len(saved["batches"]) == 8
    assert saved["state"]["carried"] is not None  # an odd (Adam) step: the even step's gradients come with it
    reader = cpu_trainer(settings(flags))
    for step in range(5):
        reader.next_batches(step)
    assert tuple(saved["state"]["loader"]) == tuple(reader.loader.position()), "step 5's batches not yet read"
    for name, w in saved["state"]["model"].items():
        assert torch.isfinite(w.float()).all(), f"captured weights must be from before the bad step ({name})"
    r = run_script([str(capture), "--device", "cpu"], script="tools/replay.py")
    # the injected fault makes the step's loss weights NaN: the first non-finite output is the loss's
    assert r.returncode == 1, r.stdout + r.stderr[-2000:]
    assert re.search(r"micro-batch 0: first NaN output: nanogpt.head_loss\S* at train_gpt.py:\d+ in forward: .*head_loss_op\(.*\n", r.stdout), r.stdout
    assert "non-finite gradients:" in r.stdout


def test_replay_names_the_first_nan_with_its_line_and_layer():
    """tools/replay.py's watch over the forward: a NaN weight in layer 5's MLP first shows at the MLP call, in layer
    5; a NaN made from finite inputs (0 * inf in the same place) is named as made there."""
    spec = importlib.util.spec_from_file_location("replay", REPO / "tools" / "replay.py")
    replay = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(replay)
    model = tiny_model()
    mb, sched = batch_for(model, 96)
    with torch.no_grad():
        model.mlp_bank[5, 0, 3, 1] = float("nan")
    with replay.FirstNaN() as watch:
        model(mb.inputs, mb.targets, mb.cu_seqlens, mb.bigram, sched)
    assert watch.origin is None
    assert re.fullmatch(r"\S+ at train_gpt.py:\d+ in forward: y = mlp\(.*\) \(layer 5\)", watch.found), watch.found
    with torch.no_grad():
        model.mlp_bank[5, 0, 3, 1] = float("inf")  # ReLU² of the inf is inf, times a zero MLP-out weight: NaN
    with replay.FirstNaN() as watch:
        model(mb.inputs, mb.targets, mb.cu_seqlens, mb.bigram, sched)
    assert re.fullmatch(r"\S+ at train_gpt.py:\d+ in forward: y = mlp\(.*\) \(layer 5\)", watch.origin), watch.origin


def test_replay_refuses_a_crafted_pickle(tmp_path):
    """tools/replay.py loads captures with weights_only=True: a .pt file whose pickle calls a function is refused
    with a one-line error, and the function never runs."""
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))
    crafted = tmp_path / "crafted.pt"
    torch.save({"config": {}, "payload": Payload()}, crafted)
    r = run_script([str(crafted), "--device", "cpu"], script="tools/replay.py")
    assert r.returncode == 2 and not marker.exists()
    one_error_line(r.stderr, "holds objects other than tensors")


def test_interrupted_and_resumed_run_ends_bit_identical(tmp_path, synthetic_data):
    """SIGINT mid-run: the run stops at a step boundary, logs why, and saves a checkpoint atomically; --resume
    continues from it (same step, data position, schedule and state) and ends with exactly the weights and
    optimizer state of an uninterrupted run."""
    common = TINY_FLAGS + ["--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"],
                           "--num_scheduled_steps", "12", "--num_extension_steps", "2", "--val_every", "6",
                           "--guard_every", "4", "--warmup", "False", "--log_dir", str(tmp_path), "--save_checkpoint", "True"]
    whole = run_script(common + ["--run_id", "whole"])
    assert whole.returncode == 0, whole.stderr[-2000:]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.Popen([sys.executable, "train_gpt.py", *common, "--run_id", "cut"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:  # interrupt once training is under way
        if line.startswith("startup:"):
            time.sleep(1.0)
            proc.send_signal(signal.SIGINT)
            break
    out, err = proc.communicate(timeout=600)
    checkpoint = tmp_path / "cut_checkpoint_rank0.pt"
    assert proc.returncode != 0 and "stopped by SIGINT before step" in err and checkpoint.exists(), err[-2000:]
    assert f"resume with: python3 train_gpt.py --resume {checkpoint}" in err
    stopped_at = int(re.search(r"before step (\d+)", err)[1])
    assert 0 < stopped_at < 14, "interrupt earlier: the test needs a run stopped mid-way"
    log = (tmp_path / "cut.txt").read_text()
    assert "stopped: stopped by SIGINT" in log and not list(tmp_path.glob("*.tmp"))
    resumed = run_script(["--resume", str(checkpoint), "--device", "cpu"])
    assert resumed.returncode == 0 and f"resumed at step {stopped_at}" in resumed.stdout, resumed.stderr[-2000:]
    a = torch.load(tmp_path / "whole_checkpoint_rank0.pt", weights_only=True)["state"]
    b = torch.load(checkpoint, weights_only=True)["state"]  # overwritten by the resumed run's final checkpoint
    assert a["step"] == b["step"] == 14
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name
    for name, state in a["optimizer"]["state"].items():
        for key, value in state.items():
            assert torch.equal(value, b["optimizer"]["state"][name][key]) if isinstance(value, torch.Tensor) \
                else value == b["optimizer"]["state"][name][key], (name, key)
    assert val_losses(whole.stdout)[-1] == val_losses(resumed.stdout)[-1]


def test_resume_refuses_changed_settings_and_a_reused_run_id_is_refused(tmp_path, synthetic_data):
    flags = TINY_FLAGS + ["--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"],
                          "--num_scheduled_steps", "3", "--num_extension_steps", "0", "--warmup", "False",
                          "--log_dir", str(tmp_path), "--run_id", "taken", "--save_checkpoint", "True"]
    assert run_script(flags).returncode == 0
    log_before = (tmp_path / "taken.txt").read_text()
    again = run_script(flags)
    assert again.returncode != 0
    one_error_line(again.stderr, "--run_id 'taken' is taken")
    assert (tmp_path / "taken.txt").read_text() == log_before, "another run's log must stay as it was"
    changed = run_script(["--resume", str(tmp_path / "taken_checkpoint_rank0.pt"), "--adam_lr", "0.01"])
    assert changed.returncode != 0 and "--adam_lr 0.01 differs from the resumed run's 0.008" in changed.stderr
    replaced = run_script(flags + ["--overwrite", "True"])
    assert replaced.returncode == 0 and (tmp_path / "taken.txt").read_text().count("step:0/3") <= 1


# --- end to end ------------------------------------------------------------------------------

def test_cpu_smoke_run_learns(tmp_path, synthetic_data):
    r = run_script(TINY_FLAGS + ["--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"],
                                 "--num_scheduled_steps", "30", "--num_extension_steps", "2", "--val_every", "16",
                                 "--profile_steps", "3:5", "--log_dir", str(tmp_path), "--run_id", "smoke"],
                   timeout=900)  # 6-10 min on a 2-core CPU: 10-16 s a step, and longer while other tests run
    assert r.returncode == 0, r.stderr[-3000:]
    losses = val_losses(r.stdout)
    assert len(losses) == 3 and losses[-1] < losses[0] - 1.0, losses
    assert re.search(r"step:32/32 val_loss:[\d.]+ train_time:\d+ms step_avg:[\d.]+ms", r.stdout)
    # every step's line, with its training loss and gradient norm, in order
    step_lines = re.findall(r"^step:(\d+)/32 train_loss:([\d.]+) grad_norm:([\d.]+) train_time:\d+ms", r.stdout, re.M)
    assert [int(n) for n, _, _ in step_lines] == list(range(1, 33))
    assert float(step_lines[-1][1]) < float(step_lines[0][1]) and all(float(g) > 0 for _, _, g in step_lines)
    log = (tmp_path / "smoke.txt").read_text()
    assert "# kernels/transpose.py" in log and "config: " in log  # the log records code and settings
    assert (tmp_path / "smoke_trace.json").stat().st_size > 0  # --profile_steps wrote a Chrome trace


# SHA-256 of the synthetic shards that the pinned run reads: its input, checked apart from its arithmetic. numpy's
# Generator draws them: the same bytes on numpy 1.24 to 2.4, with numpy's SIMD dispatch on or off.
SYNTHETIC_DATA_DIGEST = "1774bdd62d016816691744f997a072fa2f3be1f074b9a0a705b7dc7ecca553d4"
# SHA-256 of the weights, optimizer state and val losses of the tiny CPU configuration after 8 steps (every stage,
# Adam's odd steps, the untie), run by tests/pinned_cpu.py. Only a change of the exact math changes it: such a change
# updates it here and says why in its commit message.
EXACT_MATH_DIGEST = "adb301aa5bb3ac99aa97e9a94f6eff25e0dfc1e292a6515bdef61b1c0915a30c"
# One thread, the plain (non-vectorized) ATen kernels, MKL's one SSE2 path: see the test for why.
PINNED_CPU = dict(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MKL_CBWR="COMPATIBLE", ATEN_CPU_CAPABILITY="default")
# Every library call the pinned run makes: MKL's fp32 GEMMs (the attention's) on that path, one thread; no oneDNN.
PINNED_LIBRARY_CALLS = {"MKL SGEMM CNR:COMPATIBLE NThr:1", "MKL SGEMM_BATCH CNR:COMPATIBLE NThr:1"}


def digest_of_run(log_dir: Path, run_id: str) -> str:
    def walk(tree, prefix):
        if isinstance(tree, dict):
            for key in sorted(tree, key=str):
                yield from walk(tree[key], f"{prefix}.{key}")
        elif isinstance(tree, torch.Tensor):
            yield prefix.encode() + tree.contiguous().view(torch.uint8).numpy().tobytes()
        else:
            yield f"{prefix}={tree!r}".encode()
    state = torch.load(log_dir / f"{run_id}_checkpoint_rank0.pt", weights_only=True)["state"]
    h = hashlib.sha256()
    for chunk in walk({"model": state["model"], "optimizer": state["optimizer"]}, "state"):
        h.update(chunk)
    h.update(" ".join(re.findall(r"^step:\d+/\d+ val_loss:(\S+)", (log_dir / f"{run_id}.txt").read_text(), re.M)).encode())
    return h.hexdigest()


def test_exact_math_is_pinned_on_the_cpu(tmp_path, synthetic_data):
    """The recipe's exact math, bit for bit: a refactor or a speed change of the same math leaves the digest alone.

    The bits are the code's, given torch 2.13.0+cpu (its ATen kernels and its MKL) and glibc 2.36's libm; no CPU
    feature changes them. Where a CPU could, and what holds it:
    - ATen's kernels, the bf16 matmuls among them: ATEN_CPU_CAPABILITY=default, the plain C++ ones (avx2 and
      avx512 round differently).
    - The fp32 matmuls (the attention's, MKL's SGEMM and SGEMM_BATCH): MKL_CBWR=COMPATIBLE, one SSE2 path on every
      CPU (MKL's own choice differs between AMD and Intel); MKL_ENABLE_INSTRUCTIONS then changes nothing.
    - ATen's CPU sqrt, acos, asin and atan call MKL's vector math, up to an ulp off and differently on AMD and
      Intel whatever MKL_CBWR says: the run's sqrt (Adam's, NorMuon's) is numpy's correctly rounded one instead
      (tests/pinned_cpu.py). `x ** 0.5` would reach MKL's again.
    - oneDNN is off (it would take the bf16 matmuls to AVX-512 or AMX kernels): ONEDNN_MAX_CPU_ISA changes nothing.
    - glibc's expf, logf, sincosf, powf and pow: its FMA and SSE2 variants round alike here; another glibc may not.
    - One thread: MKL promises its bits for a fixed count (two gave the same here).
    The data is checked against its own digest, and the run's library calls (MKL_VERBOSE, ONEDNN_VERBOSE) against
    PINNED_LIBRARY_CALLS, before the digest: past both, with torch and glibc as above, another digest is the code's.
    Measured: the same digest on an AMD AVX-512 CPU with each knob above set from outside, and in QEMU as an Intel
    Haswell (AVX2) and Sandy Bridge (AVX, no FMA); not on an AVX-512 or AMX Intel CPU (QEMU has no AVX-512).
    """
    locked = re.search(r"^torch==(\S+)$", (REPO / "locks" / "cpu.txt").read_text(), re.M)[1]
    if torch.__version__ != locked:  # the digest is of the CPU lock's torch: its kernels make the bits
        pytest.skip(f"the pin's digest is of torch {locked} (locks/cpu.txt); this is torch {torch.__version__}")
    shards = find_shards(synthetic_data["train"], "train") + find_shards(synthetic_data["val"], "val")
    assert hashlib.sha256(b"".join(p.read_bytes() for p in shards)).hexdigest() == SYNTHETIC_DATA_DIGEST, \
        "the synthetic shards changed (data/synthetic.py or numpy): the pin's input, not its arithmetic"
    mkl_log = tmp_path / "mkl_verbose.txt"
    r = subprocess.run([sys.executable, "tests/pinned_cpu.py", *TINY_FLAGS, "--train_files", synthetic_data["train"],
                        "--val_files", synthetic_data["val"], "--num_scheduled_steps", "6",
                        "--num_extension_steps", "2", "--val_every", "4", "--save_checkpoint", "True",
                        "--log_dir", str(tmp_path), "--run_id", "pin"],
                       cwd=REPO, capture_output=True, text=True, timeout=600,
                       env={**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, **PINNED_CPU,
                            "MKL_VERBOSE": "1", "MKL_VERBOSE_OUTPUT_FILE": str(mkl_log), "ONEDNN_VERBOSE": "all"})
    assert r.returncode == 0, r.stderr[-3000:]
    calls = {f"MKL {name} CNR:{cnr} NThr:{threads}" for name, cnr, threads in
             re.findall(r"^MKL_VERBOSE (\w+)\(.* CNR:(\S+) .* NThr:(\d+)", mkl_log.read_text(), re.M)}
    onednn = re.findall(r"onednn_verbose,.*", r.stdout)  # nothing at all while oneDNN is not reached
    assert calls == PINNED_LIBRARY_CALLS and not onednn, f"library calls other than the pinned: {calls} {onednn[-1:]}"
    assert digest_of_run(tmp_path, "pin") == EXACT_MATH_DIGEST, \
        f"the exact math changed, or its platform did: torch {torch.__version__}, glibc {platform.libc_ver()[1]}"


def sharded_flags(synthetic_data, log_dir):
    return TINY_FLAGS + ["--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"],
                         "--num_scheduled_steps", "6", "--num_extension_steps", "0", "--val_every", "0",
                         "--warmup", "False", "--log_dir", str(log_dir), "--save_checkpoint", "True",
                         "--val_tokens", "2048"]  # a multiple of 8 ranks x 256


@pytest.fixture(scope="module")
def one_process_run(synthetic_data, tmp_path_factory):
    """The world-size-1 run (accumulation 8) that every sharded run is compared with: run once."""
    log_dir = tmp_path_factory.mktemp("one_process")
    one = run_script(sharded_flags(synthetic_data, log_dir) + ["--run_id", "one"], nproc=1)
    assert one.returncode == 0, one.stderr[-2000:]
    assert "\nworld: 1 (gradient accumulation 8)\n" in one.stdout  # the line tools/vs_reference.py reads
    return {"stdout": one.stdout, "checkpoint": log_dir / "one_checkpoint_rank0.pt"}


@pytest.mark.parametrize("world_size", [2, 4, 8])
def test_sharded_ranks_match_one_process_with_accumulation(tmp_path, synthetic_data, one_process_run, world_size):
    """World size 2, 4 or 8 (gloo; accumulation 4, 2 or none: at 8 the bigram table's sparse exchange) trains
    the same model as world size 1 (accumulation 8), through the untie step.

    Tolerances: gradients are summed in bf16 in a different order, so results are not bitwise equal.
    Val loss after 6 steps agrees to 2e-3. NorMuon banks agree to 6% (relative Frobenius norm; the bf16
    orthogonalization amplifies rounding step by step: ~1% after 3 steps, ~3.5% after 6, and world sizes
    2 and 4 differ from each other as much as from world size 1, so it is noise, not a bias). Adam's
    first steps are nearly sign(grad) * lr, which turns rounding noise in near-zero gradients into
    full-size differences on a few elements (one of the smear gate's 12 weights flipped: 47% of its norm), so
    Adam parameters are compared by the share of elements that differ by more than half their size: at most
    25% (up to 8% seen), where a wiring mistake (a shard never updated or gathered, a wrong reduction) moves
    nearly all of them.
    """
    many = run_script(sharded_flags(synthetic_data, tmp_path) + ["--run_id", "many"], nproc=world_size)
    assert many.returncode == 0, many.stderr[-2000:]
    assert f"\nworld: {world_size} (gradient accumulation {8 // world_size})\n" in many.stdout
    assert f"\ngraphs each rank compiled itself: {', '.join(['0'] * world_size)}\n" in many.stdout  # eager
    (l1,), (l2,) = val_losses(one_process_run["stdout"]), val_losses(many.stdout)
    assert abs(l1 - l2) < 2e-3, (l1, l2)
    s1 = torch.load(one_process_run["checkpoint"], weights_only=True)["state"]["model"]
    s2 = torch.load(tmp_path / "many_checkpoint_rank0.pt", weights_only=True)["state"]["model"]
    for name in s1:
        a, b = s1[name].float(), s2[name].float()
        if tg.PARAM_RULES[name].optim == "normuon":
            assert (a - b).norm() <= 0.06 * a.norm(), (name, ((a - b).norm() / a.norm()).item())
        else:
            differ = ((a - b).abs() > 0.5 * a.abs() + 1e-8).float().mean().item()
            assert differ <= 0.25, (name, differ)


@pytest.mark.parametrize("rank", [0, 5])
def test_an_emulated_rank_says_so_in_its_world_line(rank, tmp_path, synthetic_data):
    """--emulate_world_size: the world line names the emulated world and the rank whose share this one process runs
    (--emulate_rank), which writes the log as a process alone."""
    r = run_script(sharded_flags(synthetic_data, tmp_path) + ["--num_scheduled_steps", "3", "--emulate_world_size", "8",
                                                               "--emulate_rank", str(rank), "--run_id", "em"])
    assert r.returncode == 0, r.stderr[-2000:]
    line = f"world: 8 (emulated: rank {rank}'s share in this one process; gradient accumulation 1)\n"
    assert f"\n{line}" in r.stdout and f"\n{line}" in (tmp_path / "em.txt").read_text()


def test_trace_summary_reads_a_profiler_trace(tmp_path, capsys):
    """tools/trace_summary.py: per-step GPU time by family, idle time between kernels, host time per step."""
    sys.path.insert(0, str(REPO / "tools"))
    import trace_summary
    kernels = [("triton_poi_fused_add_0", 0, 100), ("nvjet_sm90_tst_gemm", 150, 200), ("_transpose_kernel", 400, 100),
               ("ncclDevKernel_AllGather_RING_LL", 80, 40), ("ncclDevKernel_ReduceScatter", 320, 200)]
    events = [{"cat": "kernel", "name": n, "ts": ts, "dur": dur} for n, ts, dur in kernels] + [{"cat": "cpu_op", "name": "x"}]
    events += [{"cat": "user_annotation", "name": "ProfilerStep#3", "ts": 0, "dur": 700},
               {"cat": "user_annotation", "name": "optimizer_step", "ts": 500, "dur": 120}]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace_summary.summarize(str(path), steps=1)
    out = capsys.readouterr().out
    assert "GPU busy 0.6 ms/step, idle inside the window 0.0 ms/step: 0.0 between back-to-back kernels (0 gaps" in out
    assert "cuBLAS matmul" in out and "inductor" in out and "_transpose_kernel" in out
    # an Inductor kernel fused with attention's backward is Inductor's work, not the attention kernel's
    assert trace_summary.family("triton_per_fused__flash_attn_backward_mul_sum_5") == trace_summary.family(kernels[0][0])
    # all-gather 80-120 under the add until 100; reduce-scatter 320-520 under the matmul until 350 and the transpose's
    # 400-500
    assert re.search(r"0\.20 +0\.13 +0\.07  ncclDevKernel_ReduceScatter\n +0\.04 +0\.02 +0\.02  ncclDevKernel_AllGather_RING_LL"
                     r"\n +0\.24 +0\.15 +0\.09  all\n", out), out
    assert "host time per step: step 0.70 ms, optimizer_step 0.12 ms" in out


def test_trace_summary_leaves_out_the_warm_up_steps_gpu_work(tmp_path, capsys):
    """The profiler's warm-up step leaves its kernels (and GPU ranges) in the trace without its host ranges: only
    GPU work launched inside a ProfilerStep range counts, else every step reads a fifth too long."""
    sys.path.insert(0, str(REPO / "tools"))
    import trace_summary

    def launched(name, ts, dur, at, cid, cat="kernel"):  # GPU work and the host call that queued it
        return [{"cat": cat, "name": name, "ts": ts, "dur": dur, "args": {"correlation": cid}},
                {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": at, "dur": 1, "args": {"correlation": cid}}]
    events = [{"cat": "user_annotation", "name": "ProfilerStep#1", "ts": 1000, "dur": 1000, "args": {"External id": 7}},
              {"cat": "user_annotation", "name": "optimizer_step", "ts": 1500, "dur": 100, "args": {"External id": 8}},
              {"cat": "gpu_user_annotation", "name": "optimizer_step", "ts": 1800, "dur": 300, "args": {"External id": 8}},
              {"cat": "gpu_user_annotation", "name": "optimizer_step", "ts": 900, "dur": 200, "args": {"External id": 3}}]
    events += launched("warm_up_kernel", 1050, 400, 950, 1)  # queued in the warm-up step, ran in the traced one
    events += [{"cat": "kernel", "name": "orphan_kernel", "ts": 1060, "dur": 10, "args": {"correlation": 2}}]
    events += launched("step_kernel", 1500, 200, 1100, 3) + launched("Memcpy HtoD", 1700, 100, 1200, 4, "gpu_memcpy")
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace_summary.main([str(path)])
    out = capsys.readouterr().out
    assert "1 kernels/step; GPU busy 0.2 ms/step" in out and "step_kernel" in out and "warm_up_kernel" not in out, out
    assert "(2 GPU events launched outside the traced steps left out" in out
    assert "0.30 ms/step  optimizer_step" in out and "0.50 ms/step  optimizer_step" not in out, out


def test_trace_summary_splits_graph_replays_from_host_launches(tmp_path, capsys):
    """GPU work queued by a CUDA graph's replay against work the host launched one call at a time, each with the idle
    time before it (gaps over GAP_CAP_US left out), and the host launches by the host op that queued them."""
    sys.path.insert(0, str(REPO / "tools"))
    import trace_summary

    def work(name, ts, dur, cid, xid=None, cat="kernel"):
        return {"cat": cat, "name": name, "ts": ts, "dur": dur, "args": {"correlation": cid, "External id": xid}}
    events = [{"cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 2000},
              {"cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 5, "dur": 10, "args": {"correlation": 1}},
              {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 900, "dur": 5, "args": {"correlation": 2}},
              {"cat": "cuda_runtime", "name": "cudaMemsetAsync", "ts": 950, "dur": 5, "args": {"correlation": 3}},
              {"cat": "cuda_driver", "name": "cuLaunchKernel", "ts": 960, "dur": 5, "args": {"correlation": 4}},
              {"cat": "cpu_op", "name": "aten::fill_", "ts": 890, "dur": 20, "args": {"External id": 20}},
              {"cat": "cpu_op", "name": "aten::zero_", "ts": 940, "dur": 20, "args": {"External id": 30}}]
    events += [work("graph_a", 100, 300, 1), work("graph_b", 404, 200, 1),  # 4 us idle inside the replay
               work("fill", 610, 20, 2, 20), work("Memset", 700, 10, 3, 30, "gpu_memset"),  # 6 us, then 70 (over 50)
               work("our_triton", 720, 40, 4)]  # 10 us; no host op recorded
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    kinds, op_time, op_count = trace_summary.by_launch(events)
    assert kinds == {"graph replays": [500, 4, 2], "host launches": [70, 16, 3]}, kinds
    assert op_time == {"aten::fill_": 20, "aten::zero_": 10, "(no host op recorded)": 40} and op_count["aten::fill_"] == 1
    trace_summary.main([str(path)])
    out = capsys.readouterr().out
    assert "0.50 + 0.00 ms/step  x2     graph replays\n      0.07 + 0.02 ms/step  x3     host launches\n" in out, out
    assert "0.04 ms/step  x1       (no host op recorded)\n      0.02 ms/step  x1       aten::fill_" in out, out


def test_trace_summary_tells_launch_gaps_from_a_dry_queue():
    """Idle time splits into the gaps of <= 5 us between queued kernels and the longer ones; a copy or a fill keeps the
    GPU busy (a profile once read ~1 us per kernel as the host falling behind)."""
    sys.path.insert(0, str(REPO / "tools"))
    import trace_summary
    events = [{"cat": "kernel", "name": "k", "ts": 14 * i, "dur": 10} for i in range(401)]  # 400 gaps of 4 us
    t = events[-1]["ts"] + 10
    events += [{"cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": t, "dur": 1000},  # no gap: the copy is work
               {"cat": "gpu_memset", "name": "Memset", "ts": t + 1000, "dur": 50},
               {"cat": "kernel", "name": "k", "ts": t + 1050 + 2400, "dur": 10}]  # the queue ran dry for 2.4 ms
    assert trace_summary.idle_time(events) == (1600, 2400, 400)  # us between queued kernels, us dry, short gaps


def test_compile_time_breakdown_reads_torch_compiles_counters():
    """The start-up's `compile:` line: torch.compile's own counters, summed over graphs."""
    f = torch.compile(lambda x: (x * 2).sin().sum(), backend="aot_eager", dynamic=True)
    f(torch.randn(8))
    line = compile_time_breakdown()
    found = re.fullmatch(r"(\d+\.\d)s in compiled frames .*, Inductor (\d+\.\d)s over forward and backward graphs, "
                         r"of which (\d+\.\d)s building and loading kernels", line)
    assert found and float(found.group(1)) > 0, line  # counters are per process: other tests' graphs may add up
