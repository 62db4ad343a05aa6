"""harness/: the step lines' deferred values, the training clock, the step profiler, each rank's compiled graphs and
the host threads of a GPU run.

    python3 -m pytest -q tests/test_harness.py
"""
import json

import pytest
import torch

import harness.report as report
import kernels.attention
import train_gpt as tg
from harness.launch import setup_runtime
from harness.report import StepLines, TrainClock


def test_step_lines_wait_for_their_values_then_print_in_order():
    """On a GPU (here: with at_once off) a step's line waits until a check has copied its values to the host: the
    values published at one check are printed at the next, and flush() prints everything at once."""
    printed = []
    clock = TrainClock([0, 4, 8], sync=lambda: None)
    clock.start()
    metrics = torch.tensor([[2.0, 16.0, 7.0], [1.5, 9.0, 7.0], [1.0, 4.0, 7.0], [0.5, 1.0, 7.0], [0.25, 0.25, 7.0]])
    lines = StepLines(metrics, clock, total=5, log=printed.append, distributed=False)
    lines.at_once = False
    for done in (1, 2, 3):
        lines.step_done(done)
    assert printed == []
    lines.publish(3)  # a check after 3 steps: the copy starts...
    lines.step_done(4)
    assert printed == []
    lines.print_published()  # ...and the next check prints what it copied
    assert [line.split(" train_time")[0] for line in printed] == [
        "step:1/5 train_loss:2.0000 grad_norm:4.0000", "step:2/5 train_loss:1.5000 grad_norm:3.0000",
        "step:3/5 train_loss:1.0000 grad_norm:2.0000"]
    lines.step_done(5)
    lines.flush(5)
    assert [line.split(" ")[0] for line in printed] == [f"step:{n}/5" for n in range(1, 6)]
    assert "train_loss:0.2500 grad_norm:0.5000 train_time:" in printed[-1]


def test_each_ranks_compiled_graphs_are_gathered_in_rank_order(monkeypatch):
    """A rank whose compile helpers' graphs were missed compiled more than the others: the gathered line shows it
    (rank 0's own `compile helpers:` line cannot). Gathered by a stand-in for three ranks, this process being rank 1."""
    def all_gather_object(out, mine):
        out[:] = [2, mine, 2]
    monkeypatch.setattr(report.dist, "all_gather_object", all_gather_object)
    monkeypatch.setitem(torch._dynamo.utils.counters["inductor"], "fxgraph_cache_miss", 4)
    assert report.compiled_by_rank(3) == "graphs each rank compiled itself: 2, 4, 2"


def test_clock_pauses_and_times_each_stage(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(report.time, "perf_counter", lambda: now[0])
    clock = TrainClock([0, 2, 4], sync=lambda: None)
    clock.start()
    now[0] = 0.2  # two steps of 100 ms
    clock.at_step(2)
    clock.pause()  # a validation: 5 s untimed
    now[0] = 5.2
    clock.start()
    now[0] = 5.8  # two steps of 300 ms
    clock.at_step(4)
    assert {k: round(v, 6) for k, v in clock.stage_ms.items()} == {0: 100.0, 1: 300.0} and round(clock.now_ms()) == 800


@pytest.mark.parametrize("first", [0, 2, 3])
def test_profiler_traces_the_named_steps_after_a_warm_up_step(tmp_path, first, recwarn):
    """--profile_steps 3:5 traces steps 3 and 4, of a fresh run or one resumed at step 2 or 3 (its ProfilerStep#N
    count from there); the step before them, where there is one, is the profiler's warm-up and is not in the trace."""
    from harness.profiling import StepProfiler
    lines = []
    profiler = StepProfiler("3:5", first, str(tmp_path), "p", torch.device("cpu"), True, lines.append)
    for step in range(first, 7):
        with torch.profiler.record_function(f"work_{step}"):
            torch.ones(4).add_(step)
        profiler.step()
    trace = json.loads((tmp_path / "p_trace.json").read_text())["traceEvents"]
    names = {e.get("name") for e in trace}
    assert {n for n in names if n.startswith(("ProfilerStep#", "work_"))} == {
        f"ProfilerStep#{3 - first}", f"ProfilerStep#{4 - first}", "work_3", "work_4"}
    assert lines == [f"profiler trace of steps 3..4: {tmp_path}/p_trace.json"]
    no_warmup = [w for w in recwarn if "won't be using warmup" in str(w.message)]  # torch's word for the skew
    assert len(no_warmup) == (first == 3), no_warmup  # a warm-up step wherever one precedes the traced steps


def test_profiler_says_why_a_resumed_run_has_no_trace(tmp_path):
    from harness.profiling import StepProfiler
    lines = []
    profiler = StepProfiler("3:5", 4, str(tmp_path), "p", torch.device("cpu"), True, lines.append)
    for _ in range(4, 7):
        profiler.step()
    assert lines == ["no profiler trace: --profile_steps 3:5 starts before step 4, where this run resumed"]
    assert not (tmp_path / "p_trace.json").exists()


@pytest.mark.parametrize("gpu", [True, False])
def test_a_gpu_process_runs_its_host_work_on_one_thread(monkeypatch, gpu):
    """torchrun gives each of several processes one OpenMP thread; a lone GPU process (world 1, an emulated rank) gets
    the same, while a CPU run keeps its threads for the model's math."""
    threads = torch.get_num_threads()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(kernels.attention, "select_attention", lambda *args, **kwargs: "route")
    try:
        torch.set_num_threads(2)
        rt = setup_runtime(tg.Hyperparameters(), tg.MICRO_BATCHES)
        assert rt.device.type == ("cuda" if gpu else "cpu")
        assert torch.get_num_threads() == (1 if gpu else 2)
    finally:
        torch.set_num_threads(threads)
