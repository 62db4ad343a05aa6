"""tools/ab.py: the order of the runs, their caches and environment, stopping cold starts, the table of medians, and
its refusals, with two stub checkouts whose train_gpt.py writes the lines a real run logs (no training).

    python3 -m pytest -q tests/test_ab.py
"""
import importlib
import sys
import textwrap
from pathlib import Path

import pytest

from tests.utils import one_error_line

ab = importlib.import_module("tools.ab")

# A stand-in for train_gpt.py: a cold start (from new caches) logs `startup:` and waits to be stopped
# as the trainer does on SIGTERM; a warm one runs to its final validation. STEP_MS sets the side's speed.
STUB = """
import os, signal, sys, time
from pathlib import Path
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
STEP_MS, FAIL = {step_ms}, {fail}
cold = args["--run_id"].endswith("_cold")
cache = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
assert not (cold and cache.exists()), "a cold start gets new caches"
cache.mkdir(parents=True, exist_ok=True)
log = open(Path(args["--log_dir"]) / (args["--run_id"] + ".txt"), "w", buffering=1)
log.write(f"env: {{os.environ['PYTHONPYCACHEPREFIX']}} {{'PYTHONDONTWRITEBYTECODE' in os.environ}} {{args['--data']}}\\n")
if FAIL:
    sys.exit("error: the stub was told to fail")
log.write(f"startup: {{90.0 if cold else 20.0}}s from process start to the first timed step\\n")
if cold:
    signal.signal(signal.SIGTERM, lambda *_: (log.write("stopped by SIGTERM\\n"), sys.exit(1)))
    time.sleep(60)
    sys.exit("the cold start was not stopped")
seed = int(args["--seed"])
ms = [STEP_MS + seed, 2 * STEP_MS + seed, 3 * STEP_MS + seed, 3 * STEP_MS + seed]
log.write(f"step:12/12 val_loss:{{3.86 + seed / 100:.4f}} train_time:{{sum(ms) * 3}}ms step_avg:1ms\\n")
log.write("ms/step by stage: " + " ".join(f"{{i + 1}}:{{m:.1f}}" for i, m in enumerate(ms)) + "\\n")
log.write("peak memory allocated: 33723 MiB reserved: 55208 MiB\\n")
"""


def checkout(root: Path, step_ms: float, fail: bool = False) -> Path:
    root.mkdir()
    (root / "train_gpt.py").write_text(textwrap.dedent(STUB.format(step_ms=step_ms, fail=fail)))
    return root


def test_alternates_stops_cold_starts_and_tabulates_medians(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    a, b, out = checkout(tmp_path / "a", 200), checkout(tmp_path / "b", 190), tmp_path / "out"
    assert ab.main(["--a", str(a), "--b", str(b), "--out", str(out), "--cold", "2", "--seeds", "0,1",
                    "--", "--data", "x"]) == 0
    names = ["1_A_cold", "2_B_cold", "3_A_cold", "4_B_cold", "5_A_seed0", "6_B_seed0", "7_B_seed1", "8_A_seed1"]
    logs = {n: (out / f"{n}.txt").read_text() for n in names}
    for n, text in logs.items():  # one bytecode cache, written; the flags after -- reach the trainer
        assert f"env: {out / 'pycache'} False x" in text, n
    assert all("stopped by SIGTERM" in logs[n] for n in names[:4])
    caches = sorted(p.name for p in (out / "caches").iterdir())
    assert caches == names[:4], "full runs reuse their side's last cold-start caches"
    report = (out / "ab.md").read_text()
    assert capsys.readouterr().out.endswith("  start-up 20.0 s, train time 5.41 s, val loss 3.8700\n" + report)
    assert "| 5_A_seed0 | A | 0 | warm | 20.0 s | 200.0 / 400.0 / 600.0 / 600.0 | 5.40 s | 3.8600 | 33,723 MiB |" in report
    assert "| A | 90.0 s | 5.41 s | 3.8650 | 200.5 / 400.5 / 600.5 / 600.5 |" in report
    assert "| B | 90.0 s | 5.14 s | 3.8650 | 190.5 / 380.5 / 570.5 / 570.5 |" in report
    assert report.endswith("train time B/A 0.9501; cold start B-A +0.0 s; val loss B-A +0.0000\n")


def test_dry_run_prints_the_order_and_runs_nothing(tmp_path, capsys):
    a, b, out = checkout(tmp_path / "a", 200), checkout(tmp_path / "b", 190), tmp_path / "out"
    assert ab.main(["--a", str(a), "--b", str(b), "--out", str(out), "--cold", "1", "--seeds", "3", "--nproc", "2",
                    "--dry_run", "--", "--val_tokens", "8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["1_A_cold", "2_B_cold", "3_B_seed3", "4_A_seed3"]
    assert f"torchrun --standalone --nproc_per_node=2 {b / 'train_gpt.py'} --val_tokens 8 --seed 3" in lines[2]
    assert f"TORCHINDUCTOR_CACHE_DIR={out / 'caches' / '2_B_cold'} " in lines[2]
    assert not out.exists()


@pytest.mark.parametrize("extra,words", [
    (["--cold", "0", "--seeds", ""], ["nothing to run"]),
    (["--seeds", "0,x"], ["--seeds", "comma-separated"]),
    (["--cold", "-1"], ["--cold", "whole number"]),
    (["--", "--seed", "4"], ["--seed", "leave them out"]),
    (["--", "--log_dir=elsewhere"], ["--log_dir", "leave them out"]),
])
def test_refuses_bad_arguments(tmp_path, capfd, extra, words):
    a, b = checkout(tmp_path / "a", 200), checkout(tmp_path / "b", 190)
    with pytest.raises(SystemExit) as e:
        ab.main(["--a", str(a), "--b", str(b), "--out", str(tmp_path / "out"), *extra])
    assert e.value.code == 2
    one_error_line(capfd.readouterr().err, *words)
    assert not (tmp_path / "out").exists()


def test_refuses_a_folder_without_the_script_and_a_used_out(tmp_path, capfd):
    a, b, out = checkout(tmp_path / "a", 200), tmp_path / "b", tmp_path / "out"
    b.mkdir()
    for argv, words in [(["--a", str(a), "--b", str(b), "--out", str(out)], [str(b), "no train_gpt.py"]),
                        (["--a", str(a), "--b", str(a), "--out", str(a)], ["--out", "not an empty folder"])]:
        with pytest.raises(SystemExit) as e:
            ab.main(argv)
        assert e.value.code == 1
        one_error_line(capfd.readouterr().err, *words)
    assert not out.exists()


def test_a_failed_run_is_one_line_naming_its_output(tmp_path, capfd):
    a, b, out = checkout(tmp_path / "a", 200), checkout(tmp_path / "b", 190, fail=True), tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        ab.main(["--a", str(a), "--b", str(b), "--out", str(out), "--cold", "0", "--seeds", "0", "--", "--data", "x"])
    assert e.value.code == 1
    one_error_line(capfd.readouterr().err, "2_B_seed0 failed", str(out / "2_B_seed0.console"))
    assert "the stub was told to fail" in (out / "2_B_seed0.console").read_text()


def test_a_run_past_its_timeout_is_stopped(tmp_path, capfd):
    a, out = checkout(tmp_path / "a", 200), tmp_path / "out"
    (a / "train_gpt.py").write_text("import time\ntime.sleep(30)\n")
    with pytest.raises(SystemExit):
        ab.main(["--a", str(a), "--b", str(a), "--out", str(out), "--cold", "1", "--seeds", "", "--timeout", "1"])
    one_error_line(capfd.readouterr().err, "1_A_cold", "--timeout 1")


def test_runs_as_a_script(tmp_path):
    import subprocess
    proc = subprocess.run([sys.executable, str(Path(ab.__file__)), "--a", str(tmp_path)], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1
