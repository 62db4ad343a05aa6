"""harness/compile_helpers.py: where helpers start, the private AOTAutograd functions they replace, and the mechanism
end to end on the CPU: a helper process compiles a function's backward (its forward compile skipped) into Inductor's
cache, and the run, waiting for it at its own backward compile, finds it there and computes what the uncompiled
function does (and so for the validation graph); train_gpt.py's own helper processes run their part of the first
steps, and the run's validation graph is the one its validation helper traces.

    python3 -m pytest -q tests/test_compile_helpers.py
"""
import dataclasses
import inspect
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest
import torch
from torch._functorch._aot_autograd import graph_compile

from harness import compile_helpers
from harness.cli import UserError
from harness.launch import Launch
from harness.report import TrainClock
from tests.utils import REPO, TINY_FLAGS, cpu_trainer, settings


def wanted(**changes) -> SimpleNamespace:
    """Settings under which helpers start on a machine with CUDA."""
    return SimpleNamespace(**{**dict(compile_helpers=True, compile=True, warmup=True, resume="", device="auto",
                                     emulate_world_size=0), **changes})


class Popen:
    """Records the helpers a test starts instead of starting them."""
    started = []

    def __init__(self, cmd, env, **kwargs):
        Popen.started.append((cmd, env, kwargs))
        self.pid, self.code = 0, 0

    def poll(self):
        return self.code


@pytest.fixture
def gpu_machine(monkeypatch):
    """A machine where helpers can start: a driver, CUDA, helpers recorded by Popen instead of started."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(compile_helpers.subprocess, "Popen", Popen)
    monkeypatch.setattr(compile_helpers.atexit, "register", lambda fn: None)
    monkeypatch.setattr(graph_compile, "_aot_stage2b_bw_compile", graph_compile._aot_stage2b_bw_compile)  # restored
    monkeypatch.setattr(compile_helpers, "_spawned", None)
    monkeypatch.setattr(compile_helpers, "DRIVER", sys.executable)  # a file that exists
    Popen.started = []
    return monkeypatch


@pytest.mark.parametrize("changes", [dict(compile_helpers=False), dict(compile=False), dict(warmup=False),
                                     dict(resume="run_checkpoint_rank0.pt"), dict(device="cpu")])
def test_no_helpers_where_they_cannot_help(changes, gpu_machine):
    assert compile_helpers.start(wanted(**changes), "train_gpt.py", []) is None and Popen.started == []


def test_no_helpers_without_cuda_or_hooks_or_inside_a_helper(gpu_machine):
    gpu_machine.setattr(torch.cuda, "is_available", lambda: False)
    assert compile_helpers.start(wanted(), "train_gpt.py", []) is None
    gpu_machine.setattr(torch.cuda, "is_available", lambda: True)
    gpu_machine.delattr(graph_compile, "_aot_stage2b_fw_compile")  # a torch without the functions they replace
    assert compile_helpers.start(wanted(), "train_gpt.py", []) is None
    gpu_machine.undo()
    gpu_machine.setattr(torch.cuda, "is_available", lambda: True)
    gpu_machine.setattr(compile_helpers.subprocess, "Popen", Popen)
    gpu_machine.setenv(compile_helpers.ROLE, "backward:1")
    assert compile_helpers.start(wanted(), "train_gpt.py", []) is None and Popen.started == []


def test_start_hooks_the_runs_backward_compile_once_and_stop_unhooks_it(gpu_machine):
    hook = graph_compile._aot_stage2b_bw_compile
    helpers = compile_helpers.start(wanted(), "train_gpt.py", [])
    assert helpers is not None and len(Popen.started) == 3 and graph_compile._aot_stage2b_bw_compile is not hook
    hooked = graph_compile._aot_stage2b_bw_compile
    helpers.hook()  # once
    assert graph_compile._aot_stage2b_bw_compile is hooked
    helpers.stop()
    assert graph_compile._aot_stage2b_bw_compile is hook and helpers.procs == {}


def test_helpers_spawned_before_the_imports_are_kept_by_start_or_stopped(gpu_machine, tmp_path):
    """train_gpt.py's __main__ path starts the helpers before torch is imported, where a driver is present: start()
    hooks those (it starts no second set), or stops them where CUDA turns out not to be usable."""
    driver, flags = tmp_path / "nvidiactl", ["--seed", "1"]
    gpu_machine.setattr(compile_helpers, "DRIVER", str(driver))
    compile_helpers.spawn(wanted(), "train_gpt.py", flags)  # no driver
    driver.touch()
    compile_helpers.spawn(wanted(device="cpu"), "train_gpt.py", flags)  # not wanted
    assert Popen.started == [] and compile_helpers._spawned is None
    compile_helpers.spawn(wanted(), "train_gpt.py", flags)
    spawned = compile_helpers._spawned
    assert len(Popen.started) == 3 and spawned.compile_backward is None  # hooked only once torch is imported
    assert compile_helpers.start(wanted(), "train_gpt.py", flags) is spawned and len(Popen.started) == 3
    assert spawned.compile_backward is not None and compile_helpers._spawned is None
    spawned.stop()
    compile_helpers.spawn(wanted(), "train_gpt.py", flags)
    spawned = compile_helpers._spawned
    gpu_machine.setattr(torch.cuda, "is_available", lambda: False)  # e.g. CUDA_VISIBLE_DEVICES=""
    assert compile_helpers.start(wanted(), "train_gpt.py", flags) is None
    assert spawned.procs == {} and compile_helpers._spawned is None and len(Popen.started) == 6


def test_train_gpt_spawns_its_helpers_with_its_settings_before_importing_torch(tmp_path):
    code = textwrap.dedent(f"""
        import runpy, sys
        sys.path.insert(0, {str(REPO)!r})
        from harness import compile_helpers
        def spawn(settings, script, argv):
            print("torch imported:", "torch" in sys.modules, "seed:", settings.seed, "argv:", argv)
            raise SystemExit(0)
        compile_helpers.spawn = spawn
        sys.argv = ["train_gpt.py", "--seed", "7"]
        runpy.run_path({str(REPO / "train_gpt.py")!r}, run_name="__main__")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.stdout.strip() == "torch imported: False seed: 7 argv: ['--seed', '7']", out.stderr


def test_a_bad_launch_environment_is_refused_with_the_runs_one_line(gpu_machine):
    gpu_machine.setenv("WORLD_SIZE", "two")
    for begin in (compile_helpers.start, compile_helpers.spawn):
        with pytest.raises(UserError, match="WORLD_SIZE='two' must be an integer"):
            begin(wanted(), "train_gpt.py", [])
    assert Popen.started == []


def test_the_private_functions_the_helpers_replace_keep_their_signatures():
    """The run's wait and the backward helper's shortcut replace two functions of AOTAutograd's, which torch may change
    in any release: here the arguments they are called with and, for the forward's, the (output strides, forward)
    pair the shortcut returns in its place. A change fails here, before a GPU run would find out."""
    fw, bw = (inspect.signature(getattr(graph_compile, name)) for name in compile_helpers.HOOKS)
    assert list(fw.parameters) == ["fw_module", "adjusted_flat_args", "maybe_subclass_meta", "fw_metadata",
                                   "num_fw_outs_saved_for_bw", "aot_config", "fw_compiler"]
    assert str(fw.return_annotation).startswith("tuple[list[tuple[int, ...] | None] | None")
    assert list(bw.parameters) == ["bw_module", "maybe_subclass_meta", "fw_metadata", "fwd_output_strides",
                                   "num_symints_saved_for_bw", "aot_config", "bw_compiler"]


@pytest.mark.parametrize("emulated", [False, True])
def test_helpers_run_the_same_settings_as_their_rank_of_an_emulated_world(emulated, gpu_machine):
    """Under torchrun a helper drops RANK and WORLD_SIZE (it joins no process group), keeps LOCAL_RANK (this rank's
    GPU) and runs the same flags plus --emulate_world_size and --emulate_rank, so that it traces the graphs this rank
    compiles (the optimizer's differ by rank); an emulated run's flags already say it."""
    gpu_machine.setenv("RANK", "0" if emulated else "3")
    gpu_machine.setenv("WORLD_SIZE", "1" if emulated else "8")
    gpu_machine.setenv("LOCAL_RANK", "3")
    gpu_machine.setenv("MASTER_ADDR", "localhost")
    gpu_machine.setenv("MASTER_PORT", "29500")
    flags = ["--seed", "1", "--emulate_world_size", "8", "--emulate_rank", "5"] if emulated else ["--seed", "1"]
    assert compile_helpers.start(wanted(emulate_world_size=8 if emulated else 0), "train_gpt.py", flags) is not None
    roles = [env[compile_helpers.ROLE] for _, env, _ in Popen.started]
    assert roles == [f"{role}:{os.getpid()}" for role in ("backward", "optimizer", "validation")]
    for cmd, env, kwargs in Popen.started:
        assert cmd[1:] == ["train_gpt.py", "--seed", "1", "--emulate_world_size", "8", "--emulate_rank",
                           "5" if emulated else "3"]
        assert "RANK" not in env and "WORLD_SIZE" not in env and env["LOCAL_RANK"] == "3"
        assert kwargs["start_new_session"]  # stop() ends each helper's whole process group


SLOW_OR_FAILING = textwrap.dedent("""
    import os, subprocess, sys, time
    sys.path.insert(0, {repo!r})
    from harness import compile_helpers
    if compile_helpers.role() == "optimizer":
        sys.exit("error: a helper's last words")
    child = subprocess.Popen(["sleep", "600"])  # e.g. a compile worker
    open({pid_file!r}, "w").write(str(child.pid))
    time.sleep(600)
""")


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] in "ZX"  # reaped by now, or about to be
    except FileNotFoundError:
        return True


def test_stop_ends_a_running_helper_with_its_children_and_reports_a_failed_one(tmp_path):
    script, pid_file = tmp_path / "helper.py", tmp_path / "child.pid"
    script.write_text(SLOW_OR_FAILING.format(repo=str(REPO), pid_file=str(pid_file)))
    hook = graph_compile._aot_stage2b_bw_compile
    helpers = compile_helpers.CompileHelpers(str(script), [], Launch(0, 1, 0), False)
    helpers.hook()
    assert graph_compile._aot_stage2b_bw_compile is not hook  # the run's backward waits
    deadline = time.time() + 60
    while not (pid_file.exists() and pid_file.read_text()) or helpers.procs["optimizer"].poll() is None:
        assert time.time() < deadline, "the helpers did not start"
        time.sleep(0.1)
    child = int(pid_file.read_text())
    line = helpers.stop()
    assert line.startswith("compile helpers: backward stopped, optimizer exited 1 (error: a helper's last words), "
                           "validation stopped; "), line
    assert graph_compile._aot_stage2b_bw_compile is hook
    deadline = time.time() + 10
    while not gone(child):
        assert time.time() < deadline, "the helper's child outlived stop()"
        time.sleep(0.1)
    assert helpers.stop() == ""  # again, at exit: nothing left to stop


TOY = textwrap.dedent("""
    import gc
    import os
    import sys
    import torch
    sys.path.insert(0, {repo!r})
    from harness import compile_helpers
    from harness.launch import Launch

    def toy(x, w):  # dynamic shapes: Inductor compiles the backward right after the forward, as for the model
        return ((x @ w).relu() * x.sum(1, keepdim=True)).sum()

    def evaluate(x, w):  # validation's own entry (train_gpt.Trainer.evaluate)
        return toy(x, w)

    compiled = torch.compile(toy, dynamic=True, fullgraph=True)
    compiled_evaluate = torch.compile(evaluate, dynamic=True, fullgraph=True)
    x, w = torch.randn(37, 8), torch.randn(8, 5, requires_grad=True)

    def note_gc():
        if compile_helpers.role():  # a helper compiles with the garbage collector off
            with open(os.environ["GC_STATES"], "a") as out:
                out.write(f"{{compile_helpers.role()}} {{gc.isenabled()}}\\n")

    def forward_backward(f):
        note_gc()
        loss = f(x, w)
        loss.backward()
        return loss

    def validate(f):
        note_gc()
        with torch.no_grad():
            return f(x[:29], w)

    if compile_helpers.role():  # the optimizer helper runs the model eagerly (train_gpt.Trainer.compile_ahead)
        work = dict(backward=lambda: forward_backward(compiled), optimizer=lambda: forward_backward(toy),
                    validation=lambda: validate(compiled_evaluate))[compile_helpers.role()]
        sys.exit(compile_helpers.serve(work))
    helpers = compile_helpers.CompileHelpers(__file__, [], Launch(0, 1, 0), False)
    helpers.hook()
    loss = forward_backward(compiled)
    helpers.wait("validation")
    val = validate(compiled_evaluate)
    w2 = w.detach().requires_grad_()
    expected = toy(x, w2)
    expected.backward()
    # fp32 sums of ~200 terms in another order: up to ~1e-4 apart where the terms cancel (the defaults failed 1 in ~60)
    tol = dict(rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(loss, expected, **tol)
    torch.testing.assert_close(w.grad, w2.grad, **tol)
    torch.testing.assert_close(val, toy(x[:29], w).detach(), **tol)
    print(helpers.stop())
""")


@pytest.mark.skipif(not shutil.which(os.environ.get("CXX", "g++")), reason="Inductor's CPU backend needs a C++ compiler")
def test_the_run_finds_the_backward_and_validation_the_helpers_compiled(tmp_path):
    script = tmp_path / "toy.py"
    script.write_text(TOY.format(repo=str(REPO)))
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TRITON_CACHE_DIR": str(tmp_path / "triton"), "GC_STATES": str(tmp_path / "gc_states")}
    env.pop(compile_helpers.ROLE, None)
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert set((tmp_path / "gc_states").read_text().splitlines()) == {"backward False", "optimizer False",
                                                                      "validation False"}
    line = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"compile helpers: backward exited 0, optimizer exited 0, validation exited 0; the run waited "
                        r"[0-9.]+s for the backward, [0-9.]+s for the validation; 2 graphs came from Inductor's cache, "
                        r"1 compiled here", line), line  # the backward and the validation; the forward


@pytest.mark.parametrize("role", list(compile_helpers.ROLES))
def test_train_gpt_as_a_helper_runs_its_first_steps_and_exits(role, tmp_path, synthetic_data):
    """train_gpt.py started as a helper (ROLE naming this process as its run) builds its trainer for the role and
    runs compile_ahead to the end (uncompiled here: nothing to hook), writing no log."""
    flags = [*TINY_FLAGS, "--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"],
             "--num_scheduled_steps", "6", "--log_dir", str(tmp_path / "logs")]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "train_gpt.py", *flags], cwd=REPO, capture_output=True, text=True,
                          env={**env, compile_helpers.ROLE: f"{role}:{os.getpid()}"}, timeout=300)
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr[-2000:]
    assert not (tmp_path / "logs").exists() or not list((tmp_path / "logs").iterdir())


@pytest.mark.skipif(not shutil.which(os.environ.get("CXX", "g++")), reason="Inductor's CPU backend needs a C++ compiler")
def test_the_optimizer_helper_compiles_the_graphs_the_first_steps_use(tmp_path, synthetic_data):
    """From zero gradients, before any micro-step, Trainer.compile_optimizer compiles every graph the first two steps'
    optimizer calls (NorMuon's, then Adam's) and an Adam step's once untied (the embedding's own at world 1): after
    it, those steps compile nothing, so its graphs are the ones the run will look up in the cache. It leaves the
    optimizer tied, as it was made."""
    hp = settings(TINY_FLAGS[:2] + TINY_FLAGS[4:] + ["--train_files", synthetic_data["train"], "--val_files",
                                                      synthetic_data["val"], "--num_scheduled_steps", "6",
                                                      "--log_dir", str(tmp_path)])
    trainer = cpu_trainer(hp, helper="optimizer")  # its model eager, its optimizer compiled
    graphs = torch._dynamo.utils.counters["stats"]
    before = graphs["unique_graphs"]
    trainer.compile_optimizer()
    compiled = graphs["unique_graphs"]
    assert compiled > before
    assert trainer.optimizer.tied
    for step in (0, 1, 3):
        if step == 3:
            trainer.optimizer.untie()
        data = trainer.next_batches(step)
        trainer.train_step(step, dataclasses.replace(data, micro_batches=data.micro_batches[:1]))
    assert graphs["unique_graphs"] == compiled


def recorded_compiles(monkeypatch) -> list[str]:
    """torch.compile with a backend that records each graph's code and runs it eagerly: the list of the codes."""
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm.code)
        return gm.forward
    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compile_(fn, **{**kw, "backend": record}))
    return graphs


def compiled_settings(tmp_path, data: dict, *flags: str):
    """The tiny settings on the synthetic shards, compiled (--compile True), with `flags`."""
    tiny = [f if f != "False" or TINY_FLAGS[i - 1] != "--compile" else "True" for i, f in enumerate(TINY_FLAGS)]
    return settings(tiny + ["--train_files", data["train"], "--val_files", data["val"], "--log_dir", str(tmp_path),
                            *flags])


def test_the_runs_validation_graph_is_the_one_the_validation_helper_traces(monkeypatch, tmp_path, synthetic_data):
    """The validation helper traces only the validation call; the run traces it after its training graphs. Both must
    trace the same graph, or the run misses the helper's cache entry: a retrace of the training forward's entry
    traced another one (a size symbol passed twice), hence Trainer.evaluate. Dynamo's graphs, compared with their
    size symbols renamed in order of appearance, under a backend that records them and runs them eagerly."""
    graphs = recorded_compiles(monkeypatch)
    hp = compiled_settings(tmp_path, synthetic_data, "--num_scheduled_steps", "6")

    def renamed(code: str) -> str:
        names = {}
        return re.sub(r"\bs\d+\b", lambda m: names.setdefault(m.group(), f"s{len(names)}"), code)
    traced = []
    for helper in ("validation", ""):
        torch._dynamo.reset()
        graphs.clear()
        trainer = cpu_trainer(hp, helper=helper)
        if not helper:  # the run: its first training step first
            data = trainer.next_batches(0)
            trainer.train_step(0, dataclasses.replace(data, micro_batches=data.micro_batches[:1]))
        trainer.val_loss_sum(trainer.schedule.total_steps, [trainer.val.batch(0)])
        traced.append(renamed(graphs[-1]))
    torch._dynamo.reset()
    assert traced[0] == traced[1]


def test_the_run_waits_for_the_validation_only_after_waiting_for_the_backward(gpu_machine):
    """A run that compiled no backward had warm caches: it does not wait for the helper to compile the validation."""
    helpers = compile_helpers.start(wanted(), "train_gpt.py", [])
    waits = []
    for name in ("backward", "validation"):
        helpers.procs[name].wait = lambda timeout, name=name: waits.append(name)
    helpers.wait("validation")
    assert waits == [] and helpers.waited == {}
    helpers.wait("backward")
    helpers.wait("validation")
    assert waits == ["backward", "validation"] and set(helpers.waited) == {"backward", "validation"}


@pytest.mark.parametrize("world_size, rank", [(1, 0), (2, 0), (8, 0), (8, 5)])  # emulated, as compile helpers run
def test_the_timed_steps_compile_no_graph_the_warmup_did_not(monkeypatch, tmp_path, synthetic_data, world_size, rank):
    """The warm-up runs every graph the timed steps and the validation use: the model's, and the optimizer's tied and
    untied (at world 1 the untied embedding's Adam update is a static graph of its own; missed, it compiled at the
    proxy's step 83, 0.5 s of train time: records/enwiki-124/2026-11-28_adam-table-graphs). Graphs counted by a backend
    that runs them eagerly, over the whole schedule after the warm-up."""
    graphs = recorded_compiles(monkeypatch)
    hp = compiled_settings(tmp_path, synthetic_data, "--num_scheduled_steps", "9", "--num_extension_steps", "2",
                           "--val_tokens", "2048")  # a whole validation micro-batch per rank at world 8
    torch._dynamo.reset()
    trainer = cpu_trainer(hp, world_size, rank=rank)
    trainer.warmup()
    warm = len(graphs)
    assert warm > 0
    for step in range(trainer.schedule.total_steps):
        trainer.train_step(step, trainer.next_batches(step))
    trainer.validate(trainer.schedule.total_steps, TrainClock([0, 1], lambda: None))
    torch._dynamo.reset()
    assert len(graphs) == warm, graphs[warm:]
