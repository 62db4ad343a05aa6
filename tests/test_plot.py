"""tools/plot.py: exact parsing of both log formats (ours and modded-nanogpt's), the CLI's PNG and its errors.

    python3 -m pytest -q tests/test_plot.py
"""
import importlib
import os
import subprocess
import sys

import pytest

from tests.utils import REPO

plot = importlib.import_module("tools.plot")

PLOT_PY = REPO / "tools" / "plot.py"

# Our format: the source code comes first (its lines that merely contain a log line must be ignored),
# then the config, step lines and the trainer's own ms/step by stage.
OURS = """\
# train_gpt.py
    # logs e.g. "step:3/8 val_loss:9.9999 train_time:9ms step_avg:3.00ms"
    # and "ms/step by stage: 1:9.0 2:9.0 3:9.0 4:9.0"
config: train_files='x', num_scheduled_steps=6, num_extension_steps=2, seed=0
step:0/8 val_loss:10.8000 train_time:0ms step_avg:0.04ms
step:1/8 train_loss:9.1000 grad_norm:2.5000 train_time:100ms step_avg:100.00ms
step:4/8 train_loss:7.0000 grad_norm:1.2500 train_time:1400ms step_avg:350.00ms
step:4/8 val_loss:6.5000 train_time:1500ms step_avg:375.00ms
step:8/8 train_time:2400ms step_avg:300.00ms
ms/step by stage: 1:100.0 2:200.0 3:300.0 4:400.0
step:8/8 val_loss:4.2500 train_time:2500ms step_avg:312.50ms
"""

# modded-nanogpt's format: no ms/step or config line. With S = 7 scheduled steps the bounds are
# 0, round(7/3) = 2, round(14/3) = 5, 7 and the extension to 9; per-step times are 10 ms in stage 1,
# 20 in stage 2, 40 in stage 3 and 50 in the extension. The final val line's train_time is 2 ms more
# than the step line's, so using it instead would show.
REFERENCE_STEP_MS = {1: 10, 2: 20, 3: 40, 4: 60, 5: 80, 6: 120, 7: 160, 8: 210, 9: 260}


def reference_log(total=9):
    return "\n".join(
        [f"step:0/{total} val_loss:10.9000 train_time:0ms step_avg:0.01ms"]
        + [f"step:{s}/{total} train_time:{ms}ms step_avg:{ms / s:.2f}ms"
           for s, ms in REFERENCE_STEP_MS.items() if s <= total]
        + [f"step:{total}/{total} val_loss:4.0000 train_time:{REFERENCE_STEP_MS[total] + 2}ms step_avg:1.00ms"]) + "\n"


@pytest.fixture
def logs(tmp_path):
    (tmp_path / "ours.txt").write_text(OURS)
    (tmp_path / "reference.txt").write_text(reference_log())
    return tmp_path / "ours.txt", tmp_path / "reference.txt"


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, str(PLOT_PY), *map(str, args)], capture_output=True, text=True, env=env)


def test_parse_ours(logs):
    run = plot.parse_log(logs[0])
    assert run.val == [(0, 0.0, 10.8), (4, 1.5, 6.5), (8, 2.5, 4.25)]
    assert run.train == [(0.1, 9.1), (1.4, 7.0)]  # the step lines with a training loss
    assert run.stage_ms == [100.0, 200.0, 300.0, 400.0]


def test_parse_reference_stages_from_step_lines(logs):
    run = plot.parse_log(logs[1], scheduled_steps=7)
    assert run.val == [(0, 0.0, 10.9), (9, 0.262, 4.0)] and run.train == []
    assert run.stage_ms == [10.0, 20.0, 40.0, 50.0]


def test_reference_without_extension(tmp_path):
    path = tmp_path / "no_extension.txt"
    path.write_text(reference_log(total=7))
    assert plot.parse_log(path, scheduled_steps=7).stage_ms == [10.0, 20.0, 40.0]


def test_config_line_gives_scheduled_steps(logs, tmp_path):
    """Our log without its ms/step line (a crashed run): the stages come from the config's S = 6."""
    lines = [line for line in OURS.splitlines() if not line.startswith("ms/step")]
    lines += ["step:2/8 train_time:200ms step_avg:100.00ms", "step:6/8 train_time:2000ms step_avg:333.33ms"]
    path = tmp_path / "crashed.txt"
    path.write_text("\n".join(lines) + "\n")
    # bounds 0, 2, 4, 6, 8: (200 - 0) / 2, (1400 - 200) / 2, (2000 - 1400) / 2, (2400 - 2000) / 2
    assert plot.parse_log(path, scheduled_steps=999).stage_ms == [100.0, 600.0, 300.0, 200.0]


def test_log_cut_short_keeps_finished_stages(tmp_path):
    path = tmp_path / "cut.txt"
    path.write_text("".join(line + "\n" for line in reference_log().splitlines()[:7]))  # step lines up to 6
    assert plot.parse_log(path, scheduled_steps=7).stage_ms == [10.0, 20.0]


def test_cli_writes_png(logs, tmp_path):
    out = tmp_path / "plot.png"
    result = run_cli(*logs, "--out", out, "--labels", "ours,reference", "--scheduled_steps", "7")
    assert result.returncode == 0, result.stderr
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000


@pytest.mark.parametrize("extra, words", [
    ((), "--scheduled_steps"),  # the reference log has neither ms/step nor config line
    (("--scheduled_steps", "7", "--labels", "only_one"), "--labels"),
])
def test_cli_errors(logs, tmp_path, extra, words):
    out = tmp_path / "plot.png"
    result = run_cli(*logs, "--out", out, *extra)
    assert result.returncode != 0
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not out.exists()


def test_cli_without_matplotlib(logs, tmp_path):
    """A matplotlib package that fails to import stands in for a missing one."""
    (tmp_path / "matplotlib").mkdir()
    (tmp_path / "matplotlib" / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    result = run_cli(logs[0], "--out", tmp_path / "plot.png", env=env)
    assert result.returncode != 0
    assert result.stderr == "error: tools/plot.py needs matplotlib: python3 -m pip install matplotlib\n"


def test_stalls_by_stage():
    """Each step's time against its own stage's median (stages end at thirds of the scheduled steps, then the
    extension); steps whose predecessor has no line are not timed; over `factor` times the median counts."""
    # 9 scheduled steps and 2 more: stages end at 3, 6, 9, 11; 10 ms a step in stage 1, 40 in stage 2, ...
    step_ms = [10, 10, 10, 40, 70, 40, 30, 30, 30, 25, 20]
    train_ms = {n: float(sum(step_ms[:n])) for n in range(12)}
    assert plot.stalls(train_ms, 9) == []  # stage 2's 70 ms is not over twice its median (40)
    assert plot.stalls(train_ms, 9, factor=1.5) == [(5, 70.0, 40.0)]
    late = {n: t + (100 if n >= 8 else 0) for n, t in train_ms.items()}  # step 8 takes 130 ms
    assert plot.stalls(late, 9) == [(8, 130.0, 30.0)]
    assert plot.stalls({0: 0.0, 2: 50.0, 4: 900.0}, 9) == []  # no two consecutive step lines: nothing timed
