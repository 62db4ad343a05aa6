"""harness/: the step lines' deferred values and the training clock.

    python3 -m pytest -q tests/test_harness.py
"""
import torch

import harness.report as report
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
