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

from harness import compile_helpers
from tests.utils import REPO


def wanted(**changes) -> SimpleNamespace:
    """Settings under which helpers start on a machine with CUDA."""
    return SimpleNamespace(**{**dict(compile_helpers=True, compile=True, warmup=True, resume="", device="auto",
                                     emulate_world_size=0), **changes})


@pytest.mark.parametrize("changes", [dict(compile_helpers=False), dict(compile=False), dict(warmup=False),
                                     dict(resume="run_checkpoint_rank0.pt"), dict(device="cpu")])
def test_no_helpers_where_they_cannot_help(changes, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(compile_helpers, "CompileHelpers", lambda *args: pytest.fail("a helper started"))
    assert compile_helpers.start(wanted(**changes), "train_gpt.py", []) is None


def test_no_helpers_without_cuda_or_inside_a_helper(monkeypatch):
    monkeypatch.setattr(compile_helpers, "CompileHelpers", lambda *args: pytest.fail("a helper started"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert compile_helpers.start(wanted(), "train_gpt.py", []) is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv(compile_helpers.ROLE, "backward")
    assert compile_helpers.start(wanted(), "train_gpt.py", []) is None


@pytest.mark.parametrize("emulated", [False, True])
def test_helpers_run_the_same_settings_as_rank_0_of_an_emulated_world(emulated, monkeypatch):
    """Under torchrun a helper drops RANK and WORLD_SIZE (it joins no process group), keeps LOCAL_RANK (this rank's
    GPU) and runs the same flags plus --emulate_world_size, so that it traces the graphs this rank compiles (an
    emulated run's flags already say it)."""
    started = []

    class Popen:
        def __init__(self, cmd, env, **kwargs):
            started.append((cmd, env, kwargs))
            self.pid = 0
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(compile_helpers.subprocess, "Popen", Popen)
    monkeypatch.setattr(compile_helpers.atexit, "register", lambda fn: None)
    monkeypatch.setattr(compile_helpers.graph_compile, "_aot_stage2b_bw_compile",
                        compile_helpers.graph_compile._aot_stage2b_bw_compile)  # restored after the test
    monkeypatch.setenv("RANK", "0" if emulated else "3")
    monkeypatch.setenv("WORLD_SIZE", "1" if emulated else "8")
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setenv("MASTER_ADDR", "localhost")
    monkeypatch.setenv("MASTER_PORT", "29500")
    flags = ["--seed", "1", "--emulate_world_size", "8"] if emulated else ["--seed", "1"]
    helpers = compile_helpers.start(wanted(emulate_world_size=8 if emulated else 0), "train_gpt.py", flags)
    roles = [env[compile_helpers.ROLE] for _, env, _ in started]
    assert helpers is not None and roles == [f"backward:{os.getpid()}", f"optimizer:{os.getpid()}"]
    for cmd, env, kwargs in started:
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
    hook = compile_helpers.graph_compile._aot_stage2b_bw_compile
    helpers = compile_helpers.CompileHelpers(str(script), [], 1, False)
    assert compile_helpers.graph_compile._aot_stage2b_bw_compile is not hook  # the run's backward waits
    deadline = time.time() + 60
    while not (pid_file.exists() and pid_file.read_text()) or helpers.procs["optimizer"].poll() is None:
        assert time.time() < deadline, "the helpers did not start"
        time.sleep(0.1)
    child = int(pid_file.read_text())
    line = helpers.stop()
    assert line.startswith("compile helpers: backward stopped, optimizer exited 1 (error: a helper's last words); "), line
    assert compile_helpers.graph_compile._aot_stage2b_bw_compile is hook
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

    def toy(x, w):  # dynamic shapes: Inductor compiles the backward right after the forward, as for the model
        return ((x @ w).relu() * x.sum(1, keepdim=True)).sum()

    class Trainer:  # what compile_helpers.serve uses of train_gpt.Trainer
        def __init__(self):
            self.model = toy
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

        def sync(self):
            pass

    if compile_helpers.role():
        sys.exit(compile_helpers.serve(Trainer()))
    helpers = compile_helpers.CompileHelpers(__file__, [], 1, False)
    trainer = Trainer()
    loss = trainer.forward_backward(None, None)
    w = trainer.w.detach().requires_grad_()
    expected = toy(trainer.x, w)
    expected.backward()
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(trainer.w.grad, w.grad)
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
    assert line.endswith("; 1 graphs came from Inductor's cache"), line  # the backward (the forward compiled here)
