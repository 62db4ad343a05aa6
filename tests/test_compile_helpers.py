"""harness/compile_helpers.py: where helpers start, and the mechanism end to end on the CPU: a helper process
compiles a function's backward (its forward compile skipped) into Inductor's cache, and the run, waiting for it at
its own backward compile, finds it there and computes what the uncompiled function does.

    python3 -m pytest -q tests/test_compile_helpers.py
"""
import os
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
def gpu_machine(monkeypatch, tmp_path):
    """A machine where helpers can start: an NVIDIA device file, CUDA, helpers recorded by Popen, none spawned yet."""
    (tmp_path / "nvidiactl").touch()
    monkeypatch.setattr(compile_helpers, "NVIDIA_DEVICE", str(tmp_path / "nvidiactl"))
    monkeypatch.setattr(compile_helpers, "_spawned", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(compile_helpers.subprocess, "Popen", Popen)
    monkeypatch.setattr(compile_helpers.atexit, "register", lambda fn: None)
    monkeypatch.setattr(graph_compile, "_aot_stage2b_bw_compile", graph_compile._aot_stage2b_bw_compile)  # restored
    Popen.started = []
    return monkeypatch


@pytest.mark.parametrize("changes", [dict(compile_helpers=False), dict(compile=False), dict(warmup=False),
                                     dict(resume="run_checkpoint_rank0.pt"), dict(device="cpu")])
def test_no_helpers_where_they_cannot_help(changes, gpu_machine):
    compile_helpers.spawn(wanted(**changes), "train_gpt.py", [])
    assert compile_helpers.attach(wanted(**changes), "train_gpt.py", []) is None and Popen.started == []


def test_no_helpers_without_a_gpu_or_inside_a_helper(gpu_machine, tmp_path):
    gpu_machine.setattr(compile_helpers, "NVIDIA_DEVICE", str(tmp_path / "absent"))
    compile_helpers.spawn(wanted(), "train_gpt.py", [])
    gpu_machine.setattr(torch.cuda, "is_available", lambda: False)
    assert compile_helpers.attach(wanted(), "train_gpt.py", []) is None and Popen.started == []
    gpu_machine.setattr(torch.cuda, "is_available", lambda: True)
    gpu_machine.setenv(compile_helpers.ROLE, "backward:1")
    ties = []
    gpu_machine.setattr(compile_helpers, "die_with_run", lambda: ties.append(True) or True)
    compile_helpers.spawn(wanted(), "train_gpt.py", [])
    assert compile_helpers.attach(wanted(), "train_gpt.py", []) is None and Popen.started == []
    assert ties == [True]  # a helper ties its life to the run's first thing
    gpu_machine.setattr(compile_helpers, "die_with_run", lambda: False)  # the run has gone already
    with pytest.raises(SystemExit):
        compile_helpers.spawn(wanted(), "train_gpt.py", [])


def test_attach_hooks_the_spawned_helpers_or_stops_them_without_cuda(gpu_machine):
    hook = graph_compile._aot_stage2b_bw_compile
    compile_helpers.spawn(wanted(), "train_gpt.py", [])
    assert len(Popen.started) == 2 and graph_compile._aot_stage2b_bw_compile is hook  # not hooked before torch
    compile_helpers.spawn(wanted(), "train_gpt.py", [])  # once
    helpers = compile_helpers.attach(wanted(), "train_gpt.py", [])
    assert helpers is not None and len(Popen.started) == 2 and graph_compile._aot_stage2b_bw_compile is not hook
    hooked = graph_compile._aot_stage2b_bw_compile
    helpers.hook()  # once
    assert graph_compile._aot_stage2b_bw_compile is hooked and compile_helpers._spawned is None
    compile_helpers.spawn(wanted(), "train_gpt.py", [])
    spawned = compile_helpers._spawned
    gpu_machine.setattr(torch.cuda, "is_available", lambda: False)  # a device file, but no CUDA for torch
    assert compile_helpers.attach(wanted(), "train_gpt.py", []) is None
    assert spawned.procs == {} and compile_helpers._spawned is None  # stopped
    gpu_machine.setattr(torch.cuda, "is_available", lambda: True)
    assert compile_helpers.attach(wanted(), "train_gpt.py", []) is not None and len(Popen.started) == 6  # no spawn


def test_a_bad_launch_environment_is_refused_by_the_run_not_the_spawn(gpu_machine):
    """spawn() starts nothing on a bad RANK / WORLD_SIZE and leaves the refusal to main(), whose one-line errors
    are written whole (ranks print theirs at once); attach() then refuses it."""
    gpu_machine.setenv("WORLD_SIZE", "two")
    compile_helpers.spawn(wanted(), "train_gpt.py", [])
    assert Popen.started == []
    with pytest.raises(UserError, match="WORLD_SIZE='two' must be an integer"):
        compile_helpers.attach(wanted(), "train_gpt.py", [])


def test_spawning_imports_no_torch():
    """The run spawns its helpers before it imports torch, so that their imports overlap its own."""
    code = textwrap.dedent("""
        import atexit, subprocess, sys
        from types import SimpleNamespace
        from harness import compile_helpers
        class Popen:
            def __init__(self, *args, **kwargs):
                self.pid = 0
        subprocess.Popen, atexit.register, compile_helpers.NVIDIA_DEVICE = Popen, lambda fn: None, "/"
        compile_helpers.spawn(SimpleNamespace(compile_helpers=True, compile=True, warmup=True, resume="",
                                              device="auto", emulate_world_size=0), "train_gpt.py", [])
        assert compile_helpers._spawned is not None
        print(sorted(m for m in sys.modules if "torch" in m))
    """)
    env = {k: v for k, v in os.environ.items() if k not in (compile_helpers.ROLE, "RANK", "WORLD_SIZE")}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


@pytest.mark.parametrize("entry", ["spawn", "attach"])
@pytest.mark.parametrize("emulated", [False, True])
def test_helpers_run_the_same_settings_as_rank_0_of_an_emulated_world(emulated, entry, gpu_machine, tmp_path):
    """Under torchrun a helper drops RANK and WORLD_SIZE (it joins no process group), keeps LOCAL_RANK (this rank's
    GPU) and runs the same flags plus --emulate_world_size, so that it traces the graphs this rank compiles (an
    emulated run's flags already say it); the same whether spawn() starts them or, where it could not tell a GPU
    machine, attach()."""
    gpu_machine.setenv("RANK", "0" if emulated else "3")
    gpu_machine.setenv("WORLD_SIZE", "1" if emulated else "8")
    gpu_machine.setenv("LOCAL_RANK", "3")
    gpu_machine.setenv("MASTER_ADDR", "localhost")
    gpu_machine.setenv("MASTER_PORT", "29500")
    flags = ["--seed", "1", "--emulate_world_size", "8"] if emulated else ["--seed", "1"]
    settings = wanted(emulate_world_size=8 if emulated else 0)
    if entry == "attach":
        gpu_machine.setattr(compile_helpers, "NVIDIA_DEVICE", str(tmp_path / "absent"))
    compile_helpers.spawn(settings, "train_gpt.py", flags)
    assert len(Popen.started) == (2 if entry == "spawn" else 0)
    assert compile_helpers.attach(settings, "train_gpt.py", flags) is not None
    roles = [env[compile_helpers.ROLE] for _, env, _ in Popen.started]
    assert roles == [f"backward:{os.getpid()}", f"optimizer:{os.getpid()}"]
    for cmd, env, kwargs in Popen.started:
        assert cmd[1:] == ["train_gpt.py", "--seed", "1", "--emulate_world_size", "8"]
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
    helpers = compile_helpers.CompileHelpers(str(script), [], 1, False)
    helpers.hook()
    assert graph_compile._aot_stage2b_bw_compile is not hook  # the run's backward waits
    deadline = time.time() + 60
    while not (pid_file.exists() and pid_file.read_text()) or helpers.procs["optimizer"].poll() is None:
        assert time.time() < deadline, "the helpers did not start"
        time.sleep(0.1)
    child = int(pid_file.read_text())
    line = helpers.stop()
    assert line.startswith("compile helpers: backward stopped, optimizer exited 1 (error: a helper's last words); "), line
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
    from types import SimpleNamespace
    import torch
    sys.path.insert(0, {repo!r})
    from harness import compile_helpers

    def toy(x, w):  # dynamic shapes: Inductor compiles the backward right after the forward, as for the model
        return ((x @ w).relu() * x.sum(1, keepdim=True)).sum()

    class Model:  # what compile_helpers.serve uses of train_gpt.GPT
        def __call__(self, x, w):
            return toy(x, w)

        def gradients(self):
            return {{}}

        def named_parameters(self):
            return iter(())

    class Trainer:  # what compile_helpers.serve uses of train_gpt.Trainer
        def __init__(self):
            self.model = Model()
            self.optimizer = SimpleNamespace(step=lambda: None)
            self.forward = torch.compile(toy, dynamic=True, fullgraph=True)
            self.micro_step = self.forward_backward
            self.x, self.w = torch.randn(37, 8), torch.randn(8, 5, requires_grad=True)

        def next_batches(self, step):
            return compile_helpers.dataclasses.make_dataclass("StepData", ["micro_batches"])([None, None])

        def forward_backward(self, mb, sched):
            if compile_helpers.role():  # a helper compiles with the garbage collector off
                with open(os.environ["GC_STATES"], "a") as f:
                    f.write(f"{{compile_helpers.role()}} {{gc.isenabled()}}\\n")
            loss = self.forward(self.x, self.w)
            loss.backward()
            return loss

        def train_step(self, step, data):
            for mb in data.micro_batches:
                self.micro_step(mb, None)

        def copy_fp8_weights(self):  # a helper's remake_w8
            pass

        def optimizer_args(self, step):
            return ()

        def sync(self):
            pass

    if compile_helpers.role():
        sys.exit(compile_helpers.serve(Trainer()))
    helpers = compile_helpers.CompileHelpers(__file__, [], 1, False)
    helpers.hook()
    trainer = Trainer()
    loss = trainer.forward_backward(None, None)
    w = trainer.w.detach().requires_grad_()
    expected = toy(trainer.x, w)
    expected.backward()
    # fp32 sums of ~200 terms in another order: up to ~1e-4 apart where the terms cancel (the defaults failed 1 in ~60)
    tol = dict(rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(loss, expected, **tol)
    torch.testing.assert_close(trainer.w.grad, w.grad, **tol)
    print(helpers.stop())
""")


@pytest.mark.skipif(not shutil.which(os.environ.get("CXX", "g++")), reason="Inductor's CPU backend needs a C++ compiler")
def test_the_run_finds_the_backward_the_helper_compiled(tmp_path):
    script = tmp_path / "toy.py"
    script.write_text(TOY.format(repo=str(REPO)))
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TRITON_CACHE_DIR": str(tmp_path / "triton"), "GC_STATES": str(tmp_path / "gc_states")}
    env.pop(compile_helpers.ROLE, None)
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert set((tmp_path / "gc_states").read_text().splitlines()) == {"backward False", "optimizer False"}
    line = done.stdout.strip().splitlines()[-1]
    assert line.startswith("compile helpers: backward exited 0, optimizer exited 0; the run waited"), line
    assert line.endswith("; 1 graphs came from Inductor's cache, 1 compiled here"), line  # the backward; the forward


SCRIPT_RUN = textwrap.dedent("""
    import os, runpy, subprocess, sys
    sys.path.insert(0, os.path.dirname({script!r}))  # as `python3 train_gpt.py` has it
    from harness import compile_helpers
    exists = os.path.exists
    os.path.exists = lambda path: path == "/dev/nvidiactl" or exists(path)  # a GPU machine, as far as spawn() can tell
    started = []

    class Popen(subprocess.Popen):  # the helpers, for the test
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self)
    subprocess.Popen = Popen
    attach = compile_helpers.attach

    def attach_and_report(*args, **kwargs):  # the helpers' states once main() has attached them; then the end
        helpers = attach(*args, **kwargs)
        with open({states!r}, "w") as f:
            f.write(f"{{len(started)}} {{helpers}} {{[p.poll() for p in started]}}")
        os._exit(0)
    compile_helpers.attach = attach_and_report
    sys.argv = [{script!r}, *sys.argv[1:]]
    runpy.run_path({script!r}, run_name="__main__")
""")


@pytest.mark.skipif(not shutil.which(os.environ.get("CXX", "g++")), reason="the helpers compile with Inductor's CPU "
                    "backend, which needs a C++ compiler (without one they fail before the run stops them)")
def test_a_script_run_spawns_its_helpers_first_and_stops_them_where_torch_has_no_cuda(tmp_path, synthetic_data):
    """train_gpt.py run as a script spawns the helpers before its imports (attach() would start none without CUDA,
    so both come from spawn()); after them, with no CUDA, attach() stops them: killed, while they were still busy
    with the run's settings and data (building their CPU trainers)."""
    wrapper, states = tmp_path / "run.py", tmp_path / "states"
    wrapper.write_text(SCRIPT_RUN.format(states=str(states), script=str(REPO / "train_gpt.py")))
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", compile_helpers.ROLE)}
    flags = [*TINY_FLAGS[4:], "--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"],
             "--num_scheduled_steps", "9", "--log_dir", str(tmp_path)]  # no --device cpu, --compile False: helpers
    done = subprocess.run([sys.executable, str(wrapper), *flags], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    kill = -compile_helpers.signal.SIGKILL
    assert states.read_text() == f"2 None [{kill}, {kill}]", states.read_text()


@pytest.mark.skipif(not shutil.which(os.environ.get("CXX", "g++")), reason="Inductor's CPU backend needs a C++ compiler")
def test_the_optimizer_helper_compiles_the_graphs_the_first_steps_use(tmp_path, synthetic_data):
    """From zero gradients, before any micro-step, compile_optimizer compiles every graph the first two steps'
    optimizer calls (NorMuon's, then Adam's): after it, those steps compile nothing, so its graphs are the ones the
    run will look up in the cache."""
    hp = settings(TINY_FLAGS[:2] + TINY_FLAGS[4:] + ["--train_files", synthetic_data["train"], "--val_files",
                                                      synthetic_data["val"], "--num_scheduled_steps", "6",
                                                      "--log_dir", str(tmp_path)])
    trainer = cpu_trainer(hp)
    trainer.forward, trainer.micro_step = trainer.model, trainer.forward_backward  # as the optimizer helper runs
    graphs = torch._dynamo.utils.counters["stats"]
    before = graphs["unique_graphs"]
    compile_helpers.compile_optimizer(trainer)
    compiled = graphs["unique_graphs"]
    assert compiled > before
    for step in (0, 1):
        data = trainer.next_batches(step)
        trainer.train_step(step, compile_helpers.dataclasses.replace(data, micro_batches=data.micro_batches[:1]))
    assert graphs["unique_graphs"] == compiled
