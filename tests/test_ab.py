"""tools/ab.py: the order of the runs, their caches and environment, stopping cold starts, the table of medians, and
its refusals, with two stub checkouts whose train_gpt.py writes the lines a real run logs (no training).

    python3 -m pytest -q tests/test_ab.py
"""
import importlib
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.utils import one_error_line

ab = importlib.import_module("tools.ab")

# A stand-in for train_gpt.py: a cold start logs `startup:` and waits to be stopped as the trainer does on SIGTERM;
# a full run goes to its final validation. STEP_MS, START_S and LOSS set the side's numbers; BODY replaces the rest.
STUB = """
import os, signal, sys, time
from pathlib import Path
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
STEP_MS, START_S, LOSS = {step_ms}, {start_s}, {loss}
STALL_MS = 0  # added to step 2 of seed 1's run
{body}
cold = args["--run_id"].endswith("_cold")
cache = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
assert not (cold and cache.exists()), "a cold start gets new caches"
cache.mkdir(parents=True, exist_ok=True)
log = open(Path(args["--log_dir"]) / (args["--run_id"] + ".txt"), "w", buffering=1)
env = [os.environ.get(k, "-") for k in ("PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE", "TRITON_CACHE_DIR")]
log.write(f"env: {{cache.name}} {{' '.join(env)}} {{args.get('--data')}}\\n")
log.write(f"startup: {{START_S if cold else 20.0}}s from process start to the first timed step\\n")
if cold:
    signal.signal(signal.SIGTERM, lambda *_: (log.write("stopped by SIGTERM\\n"), sys.exit(1)))
    time.sleep(60)
    sys.exit("the cold start was not stopped")
seed = int(args["--seed"])
ms = [STEP_MS + seed, 2 * STEP_MS + seed, 3 * STEP_MS + seed, 3 * STEP_MS + seed]
log.write("config: num_scheduled_steps=9\\n")  # stages of 3 steps
step_ms = [ms[(n - 1) // 3] + (STALL_MS if n == 2 and seed == 1 else 0) for n in range(1, 13)]
for n in range(1, 13):
    log.write(f"step:{{n}}/12 train_time:{{sum(step_ms[:n])}}ms step_avg:1ms\\n")
log.write(f"step:12/12 val_loss:{{LOSS + seed / 100:.4f}} train_time:{{sum(step_ms)}}ms step_avg:1ms\\n")
log.write("ms/step by stage: " + " ".join(f"{{i + 1}}:{{m:.1f}}" for i, m in enumerate(ms)) + "\\n")
log.write("peak memory allocated: 33723 MiB reserved: 55208 MiB\\n")
"""


def checkout(root: Path, step_ms=200, start_s=90.0, loss=3.86, body="") -> Path:
    root.mkdir()
    (root / "train_gpt.py").write_text(textwrap.dedent(STUB.format(step_ms=step_ms, start_s=start_s, loss=loss,
                                                                   body=body)))
    return root


@pytest.fixture(autouse=True)
def no_prefill(monkeypatch):
    """Importing torch's compiler in each test's prefill costs seconds: one test below runs a failing one."""
    monkeypatch.setattr(ab, "PREFILL", "pass")


def test_alternates_stops_cold_starts_and_tabulates_medians(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    a, b = checkout(tmp_path / "a"), checkout(tmp_path / "b", step_ms=190, start_s=80.0, loss=3.85)
    out = tmp_path / "out"
    assert ab.main(["--a", str(a), "--b", str(b), "--out", str(out), "--cold", "2", "--seeds", "0,2",
                    "--", "--data", "x"]) == 0
    order = {"1_A_cold": "1_A_cold", "2_B_cold": "2_B_cold", "3_B_cold": "3_B_cold", "4_A_cold": "4_A_cold",
             "5_A_seed0": "1_A_cold", "6_B_seed0": "2_B_cold", "7_B_seed2": "3_B_cold", "8_A_seed2": "4_A_cold"}
    for name, caches in order.items():  # its side's k-th cold caches, one bytecode cache, the flags after --
        text = (out / f"{name}.txt").read_text()
        assert f"env: {caches} {out / 'pycache'} - {out / 'caches' / caches / 'triton'} x" in text, (name, text)
        assert ("stopped by SIGTERM" in text) == name.endswith("_cold"), name
    report = (out / "ab.md").read_text()
    assert capsys.readouterr().out.endswith("  start-up 20.0 s, train time 5.42 s, val loss 3.8800\n" + report)
    assert "| 5_A_seed0 | A | 0 | warm | 20.0 s | 200.0 / 400.0 / 600.0 / 600.0 | 5.40 s | 3.8600 | 33,723 MiB |" in report
    assert "| A | 90.0 s | 5.41 s | 3.8700 | 201.0 / 401.0 / 601.0 / 601.0 |" in report
    assert "| B | 80.0 s | 5.14 s | 3.8600 | 191.0 / 381.0 / 571.0 / 571.0 |" in report
    # the means beside the medians: train times 5.400, 5.424 s against 5.130, 5.154 s (Welch on the logs of the
    # means), val losses 3.86, 3.88 against 3.85, 3.87 (df 2, p = 2 * 0.5 (1 - t / sqrt(2 + t^2)) at t = 1/sqrt(2));
    # every cold start of a side took the same time here, and each seed's B run is 0.01 below its A run: no spread
    assert report.endswith("train time B/A 0.9501; cold start B-A -10.0 s; val loss B-A -0.0100\n"
                           "stalls (steps over twice their stage's median): none\n\n"
                           "| B against A, means | estimate | 95% interval | df | p, either way |\n"
                           "| --- | --- | --- | --- | --- |\n"
                           "| train time B/A | 0.9501 | [0.9370, 0.9634] | 2.0 | 0.004 |\n"
                           "| cold start B/A | 0.8889 | not defined: no spread: every run of a side gave the same "
                           "value |  |  |\n"
                           "| val loss B-A | -0.0100 | [-0.0708, +0.0508] | 2.0 | 0.55 |\n"
                           "| val loss B-A, seed by seed (paired t) | -0.0100 | not defined: no spread: every pair "
                           "differed by the same value |  |  |\n")


def test_a_stalled_step_is_named(tmp_path):
    """A full run's step over twice its stage's median is named under the medians, with what it cost."""
    a, b = checkout(tmp_path / "a"), checkout(tmp_path / "b", body="STALL_MS = 500")
    assert ab.main(["--a", str(a), "--b", str(b), "--out", str(tmp_path / "out"), "--cold", "0", "--seeds", "0,1"]) == 0
    assert ("stalls (steps over twice their stage's median): 3_B_seed1 step 2 701 ms (its stage's median 201, "
            "+0.50 s)\n") in (tmp_path / "out" / "ab.md").read_text()


def test_the_means_with_their_intervals():
    """B's means against A's beside the medians (values from an independent mpmath computation): train times 5.40,
    5.42, 5.45 s against 5.13, 5.16 s: 0.9487 [0.9354, 0.9622], df 2.5 (Welch on the logs of the means); val losses
    3.86, 3.87, 3.88 against 3.85, 3.86: -0.0150 [-0.0399, +0.0099], df 49/17; one B cold start: no interval, said
    in words."""
    def run(side, cold, startup_s, train_s=None, val_loss=None):
        return ab.Run(f"{side}_{'cold' if cold else 'seed'}", side, cold, 0, Path("c"), cold, startup_s, (1.0,) * 4,
                      train_s, val_loss)
    runs = ([run("A", True, s) for s in (90, 96, 93)] + [run("B", True, 80)]
            + [run("A", False, 20, t, v) for t, v in ((5.40, 3.86), (5.42, 3.87), (5.45, 3.88))]
            + [run("B", False, 20, t, v) for t, v in ((5.13, 3.85), (5.16, 3.86))])
    report = ab.table(runs, Path("a"), Path("b"))
    assert "| train time B/A | 0.9487 | [0.9354, 0.9622] | 2.5 | 0.0022 |" in report
    assert "| cold start B/A | 0.8602 | not defined: fewer than 2 runs a side (3 and 1) |  |  |" in report
    assert "| val loss B-A | -0.0150 | [-0.0399, +0.0099] | 2.9 | 0.15 |" in report


def test_runs_of_the_same_seeds_compare_seed_by_seed():
    """Seeds 0-2 on both sides, B - A = -0.01, 0, -0.02: mean -0.01, se 0.01 / sqrt(3), df 2, the interval
    -0.01 +- 4.302653 se = [-0.0348, +0.0148], two-sided p = 1 - |t| / sqrt(2 + t^2) at t = -sqrt(3): 0.2254. Runs
    that do not pair up one to one (a seed twice on a side, or a seed on one side only) get no paired row."""
    def run(side, seed, val_loss):
        return ab.Run(f"{side}_seed{seed}", side, False, seed, Path("c"), False, 20, (1.0,) * 4, 5.0, val_loss)
    a = [run("A", s, v) for s, v in ((0, 3.86), (1, 3.87), (2, 3.89))]
    b = [run("B", s, v) for s, v in ((2, 3.87), (0, 3.85), (1, 3.87))]
    report = ab.table(a + b, Path("a"), Path("b"))
    assert "| val loss B-A, seed by seed (paired t) | -0.0100 | [-0.0348, +0.0148] | 2.0 | 0.23 |" in report
    assert "seed by seed" not in ab.table(a + b[:2], Path("a"), Path("b"))
    assert "seed by seed" not in ab.table(a + b + [run("B", 0, 3.84)], Path("a"), Path("b"))


def test_without_cold_starts_the_first_full_runs_have_empty_caches(tmp_path, capsys):
    a, b, out = checkout(tmp_path / "a"), checkout(tmp_path / "b"), tmp_path / "out"
    assert ab.main(["--a", str(a), "--b", str(b), "--out", str(out), "--cold", "0", "--seeds", "0,1",
                    "--", "--data", "x"]) == 0
    report = (out / "ab.md").read_text()
    assert "| 1_A_seed0 | A | 0 | empty |" in report and "| 4_A_seed1 | A | 1 | warm |" in report
    assert "cold start B-A: no cold starts" in report and "| cold start B/A |" not in report


def test_full_runs_spread_over_their_sides_cold_starts():
    """A side's k-th full run reuses its k-th cold start's caches, cycling when there are more seeds than cold
    starts: each compile's timed launch configs reach the runs' spread."""
    runs = ab.plan(2, [0, 1, 2], Path("c"))
    full = {r.name: r.caches.name for r in runs if not r.cold}
    assert full == {"5_A_seed0": "1_A_cold", "6_B_seed0": "2_B_cold", "7_B_seed1": "3_B_cold",
                    "8_A_seed1": "4_A_cold", "9_A_seed2": "1_A_cold", "10_B_seed2": "2_B_cold"}
    assert not any(r.empty_caches for r in runs if not r.cold)


def test_dry_run_prints_the_order_and_runs_nothing(tmp_path, capsys):
    a, b, out = checkout(tmp_path / "a"), checkout(tmp_path / "b"), tmp_path / "out"
    assert ab.main(["--a", str(a), "--b", str(b), "--out", str(out), "--cold", "1", "--seeds", "3", "--nproc", "2",
                    "--dry_run", "--", "--val_tokens", "8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["prefill", "1_A_cold", "2_B_cold", "3_B_seed3", "4_A_seed3"]
    assert lines[3].startswith(f"3_B_seed3: env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX={out / 'pycache'} "
                               f"TORCHINDUCTOR_CACHE_DIR={out / 'caches' / '2_B_cold'} ")
    assert f"torchrun --standalone --nproc_per_node=2 {b / 'train_gpt.py'} --val_tokens 8 --seed 3" in lines[3]
    assert not out.exists()


@pytest.mark.parametrize("extra,words", [
    (["--cold", "0", "--seeds", ""], ["nothing to run"]),
    (["--seeds", "0,x"], ["--seeds", "comma-separated"]),
    (["--seeds", "-1"], ["--seeds", "comma-separated"]),
    (["--cold", "-1"], ["--cold", "whole number"]),
    (["--", "--seed", "4"], ["--seed", "leave them out"]),
    (["--", "--log_dir=elsewhere"], ["--log_dir", "leave them out"]),
])
def test_refuses_bad_arguments(tmp_path, capfd, extra, words):
    a, b = checkout(tmp_path / "a"), checkout(tmp_path / "b")
    with pytest.raises(SystemExit) as e:
        ab.main(["--a", str(a), "--b", str(b), "--out", str(tmp_path / "out"), *extra])
    assert e.value.code == 2
    one_error_line(capfd.readouterr().err, *words)
    assert not (tmp_path / "out").exists()


def test_refuses_a_folder_without_the_script_and_a_used_out(tmp_path, capfd):
    a, b, out = checkout(tmp_path / "a"), tmp_path / "b", tmp_path / "out"
    b.mkdir()
    for argv, words in [(["--a", str(a), "--b", str(b), "--out", str(out)], [str(b), "no train_gpt.py"]),
                        (["--a", str(a), "--b", str(a), "--out", str(a)], ["--out", "not an empty folder"])]:
        with pytest.raises(SystemExit) as e:
            ab.main(argv)
        assert e.value.code == 1
        one_error_line(capfd.readouterr().err, *words)
    assert not out.exists()


@pytest.mark.parametrize("body,cold,words", [
    ("sys.exit('error: the stub was told to fail')", "0", ["2_B_seed0 failed", "2_B_seed0.console"]),
    ("sys.exit(0)", "1", ["2_B_cold ended without a `startup:` line", "2_B_cold.console"]),
])
def test_a_failed_run_is_one_line_naming_its_output(tmp_path, capfd, body, cold, words):
    a, b, out = checkout(tmp_path / "a"), checkout(tmp_path / "b", body=body), tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        ab.main(["--a", str(a), "--b", str(b), "--out", str(out), "--cold", cold, "--seeds", "0", "--", "--data", "x"])
    assert e.value.code == 1
    one_error_line(capfd.readouterr().err, *words)
    assert (out / words[1]).exists(), "the console the line names"


def test_a_failed_prefill_is_one_line(tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(ab, "PREFILL", "raise SystemExit(3)")
    a, out = checkout(tmp_path / "a"), tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        ab.main(["--a", str(a), "--b", str(a), "--out", str(out), "--cold", "1", "--seeds", ""])
    assert e.value.code == 1
    one_error_line(capfd.readouterr().err, "bytecode cache failed", "exit status 3", "prefill.console")
    assert (out / "prefill.console").exists()


def test_a_run_past_its_timeout_is_stopped_with_its_children(tmp_path, capfd):
    pid_file = tmp_path / "child.pid"
    body = (f"import subprocess; child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"Path({str(pid_file)!r}).write_text(str(child.pid)); time.sleep(60)")  # as torchrun's workers
    a, out = checkout(tmp_path / "a", body=body), tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        ab.main(["--a", str(a), "--b", str(a), "--out", str(out), "--cold", "1", "--seeds", "", "--timeout", "2"])
    assert e.value.code == 1
    one_error_line(capfd.readouterr().err, "1_A_cold", "--timeout 2")
    child, deadline = int(pid_file.read_text()), time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{child}").exists() and \
            Path(f"/proc/{child}/stat").read_text().split()[2] != "Z":  # gone, or a zombie awaiting its reaper
        time.sleep(0.1)
    assert not Path(f"/proc/{child}").exists() or Path(f"/proc/{child}/stat").read_text().split()[2] == "Z"


def test_runs_as_a_script(tmp_path):
    proc = subprocess.run([sys.executable, str(Path(ab.__file__)), "--a", str(tmp_path)], capture_output=True,
                          text=True, env={**os.environ})
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1
