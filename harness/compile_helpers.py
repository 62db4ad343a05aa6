"""A cold start's compile helpers. The first warm-up step compiles, one after another, the model's forward and
backward graphs (Inductor compiles the backward as soon as the forward is compiled: the shapes are dynamic) and then
the optimizer's graphs, each from scratch when the caches are empty; the warm-up's last call compiles the validation
graph (no gradients, the evaluation head). Three helper processes, the same script and settings run again with ROLE in
their environment, fill the shared Inductor and Triton caches meanwhile; what each runs is the trainer's
(train_gpt.Trainer.compile_ahead), given to serve() as one callable:

- "backward" traces the model as the run does, skips the forward's Inductor compile, compiles the backward and
  exits (backward_only). The run, which compiled its forward meanwhile, waits for it at its own backward compile
  and then finds that graph in Inductor's cache (the same graph, so the same key).
- "optimizer" compiles the optimizer's graphs from zero gradients, then runs the first two steps, one micro-batch
  each, with the model uncompiled: that builds the project's own Triton kernels.
- "validation" compiles the validation graph and exits; the run waits for it before its own validation call.

Each rank has its own: Inductor's cache keys hold the GPU's index, so a graph compiled for one GPU is not found by a
process on another. The validation helper took 10-12 s off a cold start at world 1, 2 and 4, against the run
compiling that graph itself or the backward helper compiling it after the backward
(records/enwiki-124/2026-11-28_validation-helper-cold-start). Nothing a helper makes is trusted beyond Inductor's
and Triton's own cache keys: a helper that fails or is slow costs the run at most the bounded wait, and it compiles
what it does not find. All are stopped before the first timed step, and when the run exits. The run's wait and the
backward helper's shortcut replace two private functions of AOTAutograd's (HOOKS, torch 2.11-2.13): where they are
missing no helper starts, and tests/test_compile_helpers.py fails when their signatures change or the mechanism
stops working end to end.
"""
import atexit
import contextlib
import ctypes
import gc
import os
import signal
import subprocess
import sys
import tempfile
import time

from harness.launch import Launch, read_launch

ROLE = "TRAIN_GPT_COMPILE_HELPER"  # in a helper's environment: "<role>:<the run's pid>"
WAIT_S = 180.0  # the run waits this long at most for a helper it needs (a cold backward: 20-30 s)
# the optimizer's few graphs need no pool of 16-32 compile workers beside the run's and the others'
ROLES = dict(backward={}, optimizer={"TORCHINDUCTOR_COMPILE_THREADS": "2"}, validation={})
HOOKS = ("_aot_stage2b_fw_compile", "_aot_stage2b_bw_compile")
DRIVER = "/dev/nvidiactl"  # present where an NVIDIA driver is loaded: spawn()'s guess, before torch can say


def role() -> str:
    return os.environ.get(ROLE, "").split(":")[0]


def wanted(settings) -> bool:
    """Where helpers can help: a compiled GPU run with a warm-up, not resumed (its settings may come from the
    checkpoint), not itself a helper."""
    return (not role() and settings.compile_helpers and settings.compile and settings.warmup and not settings.resume
            and settings.device != "cpu")


_spawned: "CompileHelpers | None" = None  # spawn()'s helpers, until start() keeps or stops them


def spawn(settings, script: str, argv: list[str]):
    """The helpers started before the run imports torch (train_gpt.py's __main__ path), where they are wanted and an
    NVIDIA driver is present: their own imports (~4 s) then overlap the run's instead of following them, and the
    backward helper, the cold start's critical path, ends as much earlier. start() keeps them, or stops them where
    CUDA or the hooks turn out to be missing."""
    global _spawned
    if wanted(settings) and os.path.exists(DRIVER):
        _spawned = CompileHelpers(script, argv, read_launch(), bool(settings.emulate_world_size))


def start(settings, script: str, argv: list[str]) -> "CompileHelpers | None":
    """The helpers of this run (spawn()'s, else started now), hooked to its backward compile; None where they cannot
    help (not wanted, no CUDA, no hooks)."""
    global _spawned
    import torch
    from torch._functorch._aot_autograd import graph_compile
    helpers, _spawned = _spawned, None
    if not (wanted(settings) and torch.cuda.is_available() and all(hasattr(graph_compile, h) for h in HOOKS)):
        if helpers:
            helpers.stop()
        return None
    helpers = helpers or CompileHelpers(script, argv, read_launch(), bool(settings.emulate_world_size))
    helpers.hook()
    return helpers


def die_with_run() -> bool:
    """A helper dies with the run that started it (whose stops may not reach it: it has its own session); False if
    the run has already gone."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG (Linux)
    return os.getppid() == int(os.environ[ROLE].split(":")[1])


class CompileHelpers:
    """Starts the helpers on this process's GPU (LOCAL_RANK stays; RANK and WORLD_SIZE go, so a helper joins no
    process group and runs this rank's share of an emulated world of the same size: the optimizer's graphs differ by
    rank, as its shards are views at other offsets, and a rank 1 whose helpers ran rank 0's compiled its own
    NorMuon graphs after the backward, ~3-4 s that rank 0 waited at a world-2 cold start); hook() makes the run's
    backward compile wait for the backward helper."""

    def __init__(self, script: str, argv: list[str], launch: Launch, emulated: bool):
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
        emulate = (["--emulate_world_size", str(launch.world_size), "--emulate_rank", str(launch.rank)]
                   if launch.world_size > 1 and not emulated else [])
        self.errors = {name: tempfile.TemporaryFile() for name in ROLES}  # nameless: read by stop() if one fails
        self.procs = {name: subprocess.Popen([sys.executable, script, *argv, *emulate],
                                             env={**env, **more, ROLE: f"{name}:{os.getpid()}"},
                                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                             stderr=self.errors[name], start_new_session=True)
                      for name, more in ROLES.items()}
        atexit.register(self.stop)
        self.waited: dict[str, float] = {}  # seconds the run waited for a helper, by role
        self.compile_backward = None  # AOTAutograd's function the hook replaces

    def wait(self, name: str):
        """Until helper `name` has exited, at most WAIT_S (then the run compiles what is not in the cache itself). A run
        that compiled no backward found warm caches: it does not wait for the validation helper (3 s at world 4)."""
        if name not in self.procs or name in self.waited or (name == "validation" and "backward" not in self.waited):
            return
        t = time.time()
        try:
            self.procs[name].wait(WAIT_S)
        except subprocess.TimeoutExpired:
            pass
        self.waited[name] = time.time() - t

    def hook(self):
        from torch._functorch._aot_autograd import graph_compile
        if self.compile_backward is not None:  # hooked already
            return
        self.compile_backward = graph_compile._aot_stage2b_bw_compile

        def wait_then_compile(*args, **kwargs):  # the run's first backward compile is the model's
            graph_compile._aot_stage2b_bw_compile = self.compile_backward
            self.wait("backward")
            return self.compile_backward(*args, **kwargs)
        graph_compile._aot_stage2b_bw_compile = wait_then_compile

    def stop(self) -> str:
        """Ends the helpers still running, with whatever they started (compile workers), and the hook; a line for
        the log; "" once they are stopped (atexit calls it again)."""
        if not self.procs:
            return ""
        hooked = self.compile_backward is not None  # else the run ended before its imports did
        if hooked:
            import torch
            from torch._functorch._aot_autograd import graph_compile
            graph_compile._aot_stage2b_bw_compile = self.compile_backward  # unused if the caches were warm
        states = []
        for name, proc in self.procs.items():
            code = proc.poll()  # a helper that exited is reaped: its pid, and group, may be another's by now
            if code is None:
                os.killpg(proc.pid, signal.SIGKILL)  # the group: a live helper's pid is its group's id
                proc.wait()
            states.append(f"{name} {'stopped' if code is None else f'exited {code}'}{self._last_error(name, code)}")
        self.procs = {}
        if not hooked:
            return ""
        counts = torch._dynamo.utils.counters["inductor"]
        waited = ", ".join(f"{s:.1f}s for the {name}" for name, s in self.waited.items())
        waited = f"; the run waited {waited}" if waited else ""
        # a cold start compiles its forward here (and the FP8 weight copies'); more were missed by the helpers
        return (f"compile helpers: {', '.join(states)}{waited}; {counts['fxgraph_cache_hit']} graphs came from "
                f"Inductor's cache, {counts['fxgraph_cache_miss']} compiled here")

    def _last_error(self, name: str, code: int | None) -> str:
        if code in (0, None):
            return ""
        self.errors[name].seek(0)
        lines = [line for line in self.errors[name].read().decode(errors="replace").splitlines() if line.strip()]
        return f" ({lines[-1].strip()})" if lines else ""


@contextlib.contextmanager
def collector_off():
    """Python's garbage collector off while compiling: a compile makes millions of objects, and every full collection
    walks them all (records/enwiki-124/2026-11-27_gc-off-while-compiling). After it, those objects, and the compile's
    garbage with them, are frozen out of every later collection, which would otherwise walk them during timed steps."""
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def serve(work) -> int:
    """A helper's process (ROLE set): work(), the run's first steps as far as its role needs; it ends at once if the
    run has already gone."""
    if not die_with_run():
        return 1
    gc.disable()  # as collector_off() in the run's warm-up; a helper only compiles, then exits
    if role() == "backward":
        backward_only()
    else:
        os.nice(10)  # behind the run and the backward helper, which are on the start-up's critical path
    work()
    return 0


def backward_only():
    """The backward helper's compile: the forward's Inductor compile skipped, the process ended once the backward is
    compiled into the cache (nothing here runs the model). With warm caches nothing compiles and work() runs on."""
    from torch._functorch._aot_autograd import graph_compile
    compile_backward = graph_compile._aot_stage2b_bw_compile

    def compile_and_exit(*args, **kwargs):
        compile_backward(*args, **kwargs)
        os._exit(0)
    graph_compile._aot_stage2b_fw_compile = lambda *args, **kwargs: (None, None)  # (output strides, forward)
    graph_compile._aot_stage2b_bw_compile = compile_and_exit
