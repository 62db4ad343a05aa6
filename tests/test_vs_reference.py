"""tools/vs_reference.py: the `ab:` line and table from the project's and the reference's logs, and its refusals.

    python3 -m pytest -q tests/test_vs_reference.py
"""
import importlib

import pytest

from tests.utils import one_error_line

vs_reference = importlib.import_module("tools.vs_reference")

# The reference's format (no config or ms/step line): 6 scheduled steps and 2 more, so its stages end at steps
# 2, 4, 6 and 8; 100, 200, 300 and 400 ms a step, its last val line at 2.5 s.
REFERENCE = "\n".join(["step:0/8 val_loss:10.9000 train_time:0ms step_avg:0.01ms"]
                      + [f"step:{s}/8 train_time:{ms}ms step_avg:1.00ms"
                         for s, ms in {2: 200, 4: 600, 6: 1200, 8: 2000}.items()]
                      + ["step:8/8 val_loss:4.0000 train_time:2500ms step_avg:1.00ms"]) + "\n"


def project_log(seed, fp8_body, train_ms, loss, startup=20.0, total=8):
    return (f"    # a line of the trainer's source: step:8/8 val_loss:9.9999 train_time:1ms\n"
            f"config: train_files='x', num_scheduled_steps=6, num_extension_steps={total - 6}, fp8_head=True, "
            f"fp8_body={fp8_body}, seed={seed}, run_id='r{seed}'\n"
            f"startup: {startup}s from process start to the first timed step\n"
            f"step:1/{total} train_loss:9.1000 grad_norm:2.5000 train_time:100ms step_avg:100.00ms\n"
            "ms/step by stage: 1:80.0 2:160.0 3:240.0 4:320.0\n"
            f"step:{total}/{total} val_loss:{loss:.4f} train_time:{train_ms}ms step_avg:1.00ms\n"
            "peak memory allocated: 1000 MiB reserved: 2000 MiB\n")


@pytest.fixture
def logs(tmp_path):
    files = {"ref.txt": REFERENCE, "p0.txt": project_log(0, True, 2000, 3.95, startup=55.0),
             "p1.txt": project_log(1, True, 2300, 3.80), "p2.txt": project_log(2, True, 2100, 3.85),
             "e0.txt": project_log(0, False, 2300, 3.84), "e1.txt": project_log(1, False, 2400, 3.82)}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def argv(d, fp8=("p0", "p1", "p2"), exact=("e0", "e1"), cold=("p0",), reference="ref", device="nvidia-h100-x1"):
    return (["--reference", str(d / f"{reference}.txt"), "--fp8", *(str(d / f"{n}.txt") for n in fp8),
             "--exact", *(str(d / f"{n}.txt") for n in exact), "--cold", *(str(d / f"{n}.txt") for n in cold),
             "--device", device])


def test_the_record_line(logs, capsys):
    """Medians of the seeds over the reference's last val line; the cold run's start-up; seeds counted per numerics."""
    assert vs_reference.main(argv(logs)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == ("ab: ratio=0.8400 reference_s=2.50 project_s=2.10 reference_loss=4.0000 project_loss=3.8500 "
                       "exact_loss=3.8300 seeds=2 device=nvidia-h100-x1 numerics=fp8-head-qkv-mlp start_s=55.0")
    assert "FP8 loss median - exact median: +0.0200" in out
    # the reference's stages from its step lines (100 / 200 / 300 / 400 ms), against the project's 80 / 160 / ...
    assert "| reference (ref.txt) | 4.0000 | 2.50 s | 100.0 / 200.0 / 300.0 / 400.0 |  |  |" in out
    assert "| project / reference | -0.1500 | 0.8400 | 0.800 / 0.800 / 0.800 / 0.800 | | |" in out
    assert not any(line.startswith("| cold start") for line in out)  # p0 is already a row


def test_cold_starts_median(logs, capsys):
    """start_s is the median of the --cold runs' start-ups; a cold start stopped after its first timed step counts,
    with a row of its own."""
    stopped = project_log(0, True, 2000, 3.95, startup=71.0).split("step:1/")[0]  # config and start-up, no steps
    (logs / "c1.txt").write_text(stopped)
    (logs / "c2.txt").write_text(stopped.replace("startup: 71.0s", "startup: 47.5s"))
    assert vs_reference.main(argv(logs, cold=("p0", "c1", "c2"))) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].endswith(" start_s=55.0") and "cold starts: 55.0, 71.0, 47.5 s; median 55.0 s" in out
    assert "| cold start (c1.txt) | | | | 71.0 s | |" in out


@pytest.mark.parametrize("case,words", [
    (dict(fp8=("p0", "e1")), ["e1.txt", "fp8_body=False", "--fp8 takes runs with --fp8_body True"]),
    (dict(exact=("e0", "p1")), ["p1.txt", "fp8_body=True", "--exact"]),
    (dict(cold=("e0",)), ["e0.txt", "fp8_body=False", "--fp8_body True"]),
    (dict(cold=("p0", "nostart")), ["nostart.txt", "no `startup:` line"]),
    (dict(cold=("other",)), ["other.txt", "num_scheduled_steps=5", "same schedule"]),
    (dict(fp8=("p0", "p0")), ["--fp8", "seeds [0, 0] repeat"]),
    (dict(exact=("e0", "short")), ["short.txt", "other steps", "one schedule"]),
    (dict(reference="cut"), ["cut.txt", "not at step 8"]),
    (dict(fp8=("p0", "ref")), ["ref.txt", "no `config:` line"]),
    (dict(device="H100 x1"), ["--device", "lower case"]),
])
def test_refusals(logs, capfd, case, words):
    """One `error:` line naming the file and the fix; nothing printed to stdout."""
    (logs / "short.txt").write_text(project_log(3, False, 2000, 3.9, total=7))
    (logs / "nostart.txt").write_text(project_log(0, True, 2000, 3.9).replace("startup:", "start:"))
    (logs / "other.txt").write_text(project_log(0, True, 2000, 3.9).replace("scheduled_steps=6", "scheduled_steps=5"))
    (logs / "cut.txt").write_text(REFERENCE.replace("step:8/8 val_loss:4.0000 train_time:2500ms step_avg:1.00ms\n", ""))
    with pytest.raises(SystemExit) as e:
        vs_reference.main(argv(logs, **case))
    captured = capfd.readouterr()
    assert e.value.code in (1, 2) and captured.out == ""
    one_error_line(captured.err, *words)
