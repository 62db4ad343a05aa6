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


def project_log(seed, fp8_body, train_ms, loss, startup=20.0, total=8, world=1, peak=1000, scheduled=6):
    return (f"    # a line of the trainer's source: step:8/8 val_loss:9.9999 train_time:1ms\n"
            f"config: train_files='x', num_scheduled_steps={scheduled}, num_extension_steps={total - scheduled}, "
            "fp8_head=True, "
            f"fp8_body={fp8_body}, seed={seed}, run_id='r{seed}', emulate_world_size=0\n"
            f"world: {world} (gradient accumulation {8 // world})\n"
            f"startup: {startup}s from process start to the first timed step\n"
            f"step:1/{total} train_loss:9.1000 grad_norm:2.5000 train_time:100ms step_avg:100.00ms\n"
            "ms/step by stage: 1:80.0 2:160.0 3:240.0 4:320.0\n"
            f"step:{total}/{total} val_loss:{loss:.4f} train_time:{train_ms}ms step_avg:1.00ms\n"
            f"peak memory allocated: {peak} MiB reserved: 2000 MiB\n")


@pytest.fixture
def logs(tmp_path):
    files = {"ref.txt": REFERENCE, "p0.txt": project_log(0, True, 2000, 3.95, startup=55.0),
             "p1.txt": project_log(1, True, 2300, 3.80, peak=1200), "p2.txt": project_log(2, True, 2100, 3.85),
             "e0.txt": project_log(0, False, 2300, 3.84), "e1.txt": project_log(1, False, 2400, 3.82)}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def argv(d, fp8=("p0", "p1", "p2"), exact=("e0", "e1"), cold=("p0",), reference=("ref",), device="nvidia-h100-x1",
         proj_s=(), world=()):
    return (["--reference", *(str(d / f"{n}.txt") for n in reference), "--fp8", *(str(d / f"{n}.txt") for n in fp8),
             "--exact", *(str(d / f"{n}.txt") for n in exact), "--cold", *(str(d / f"{n}.txt") for n in cold),
             "--device", device, *(["--proj_s", proj_s] if proj_s else []), *(["--world", world] if world else [])])


def test_the_record_line(logs, capsys):
    """Medians of the seeds over the reference's last val line; the world and the highest peak of the --fp8 logs; the
    cold run's start-up; seeds counted per numerics; the means with their intervals (see test_the_means_intervals)."""
    assert vs_reference.main(argv(logs)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == ("ab: ratio=0.8400 world=1 reference_s=2.50 project_s=2.10 reference_loss=4.0000 "
                       "project_loss=3.8500 exact_loss=3.8300 seeds=2 device=nvidia-h100-x1 numerics=fp8-head-qkv-mlp "
                       "start_s=55.0 peak_mib=1200 proj_s=- reference_runs=1 loss_diff=+0.0367[-0.1419,+0.2153] "
                       "loss_p=0.25 loss_diff_paired=- loss_p_paired=- mean_ratio=0.8533[0.7143,1.0195] "
                       "exact_mean_ratio=0.9400[0.7173,1.2318]")
    assert "FP8 loss median - exact median: +0.0200" in out
    assert "FP8 loss - exact loss, seed by seed: not paired, the --fp8 and --exact runs' seeds differ" in out
    # the reference's stages from its step lines (100 / 200 / 300 / 400 ms), against the project's 80 / 160 / ...
    assert "| reference (ref.txt) | 4.0000 | 2.50 s | 100.0 / 200.0 / 300.0 / 400.0 |  |  |" in out
    assert "| project / reference | -0.1500 | 0.8400 | 0.800 / 0.800 / 0.800 / 0.800 | | |" in out
    assert not any(line.startswith("| cold start") for line in out)  # p0 is already a row
    assert vs_reference.main(argv(logs, proj_s="73.25")) == 0
    assert capsys.readouterr().out.splitlines()[-1].split()[13] == "proj_s=73.2"


def test_world_and_peak_from_the_project_logs(tmp_path, capsys):
    """world= is the logs' world size; peak_mib= the highest peak of the --fp8 runs (not of the --exact ones)."""
    (tmp_path / "ref.txt").write_text(REFERENCE)
    for name, fp8_body, peak in (("p0", True, 900), ("p1", True, 950), ("e0", False, 990), ("e1", False, 980)):
        (tmp_path / f"{name}.txt").write_text(project_log(int(name[1]), fp8_body, 300, 3.9, world=8, peak=peak))
    assert vs_reference.main(argv(tmp_path, fp8=("p0", "p1"))) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert " world=8 " in line and " peak_mib=950 " in line


def test_world_of_logs_older_than_their_world_line(tmp_path, capsys):
    """--world gives the world of logs without a `world:` line; a log that has one must agree with it."""
    (tmp_path / "ref.txt").write_text(REFERENCE)
    for name, fp8_body in (("p0", True), ("p1", True), ("e0", False), ("e1", False)):
        old = project_log(int(name[1]), fp8_body, 300, 3.9, world=2).replace("world: 2 (", "attention: x (")
        (tmp_path / f"{name}.txt").write_text(old)
    assert vs_reference.main(argv(tmp_path, fp8=("p0", "p1"), world="2")) == 0
    assert " world=2 " in capsys.readouterr().out.splitlines()[-1]
    (tmp_path / "p1.txt").write_text(project_log(1, True, 300, 3.9, world=4))
    with pytest.raises(SystemExit):
        vs_reference.main(argv(tmp_path, fp8=("p0", "p1"), world="2"))
    assert "p1.txt: its `world:` line says 4, not --world 2" in capsys.readouterr().err


def test_the_means_intervals(logs, capsys):
    """Welch over the seeds (values from an independent mpmath computation): FP8 losses 3.95, 3.80, 3.85 against the
    exact math's 3.84, 3.82: +0.0367, df 2.2, one-sided p 0.248; train times 2.0, 2.3, 2.1 s (exact 2.3, 2.4 s) over
    the reference's one run of 2.5 s, taken as exact: 0.8533 with df 2 (0.9400 with df 1)."""
    assert vs_reference.main(argv(logs)) == 0
    out = capsys.readouterr().out.splitlines()
    exact = "the reference's one run taken as exact: the project's spread alone"
    assert ("FP8 loss mean - exact mean: +0.0367, 95% interval [-0.1419, +0.2153] (Welch, df 2.2); one-sided p for a "
            "higher FP8 mean: 0.25") in out
    assert f"train time, project mean / reference mean: 0.8533, 95% interval [0.7143, 1.0195] ({exact}, df 2.0)" in out
    assert (f"train time, exact math mean / reference mean: 0.9400, 95% interval [0.7173, 1.2318] ({exact}, df 1.0)"
            in out)


def test_several_reference_runs(logs, capsys):
    """Two reference runs (2.5 and 2.6 s, losses 4.0000 and 3.9800): their medians on the line and a row of their own,
    and Welch's interval over both sides' spreads: 2.1333 / 2.55 = 0.8366, [0.7170, 0.9762], df 2.7 (mpmath)."""
    (logs / "ref2.txt").write_text(REFERENCE.replace("val_loss:4.0000 train_time:2500ms",
                                                     "val_loss:3.9800 train_time:2600ms"))
    assert vs_reference.main(argv(logs, reference=("ref", "ref2"))) == 0
    out = capsys.readouterr().out.splitlines()
    assert "| reference (ref2.txt) | 3.9800 | 2.60 s | 100.0 / 200.0 / 300.0 / 400.0 |  |  |" in out
    assert "| reference, medians of 2 | 3.9900 | 2.55 s | 100.0 / 200.0 / 300.0 / 400.0 |  |  |" in out
    assert ("train time, project mean / reference mean: 0.8366, 95% interval [0.7170, 0.9762] (Welch on the logs of "
            "the means, df 2.7)") in out
    assert ("train time, exact math mean / reference mean: 0.9216, 95% interval [0.8130, 1.0446] (Welch on the "
            "logs of the means, df 2.0)") in out
    assert " ratio=0.8235 world=1 reference_s=2.55 " in out[-1] and out[-1].endswith(
        " reference_runs=2 loss_diff=+0.0367[-0.1419,+0.2153] loss_p=0.25 loss_diff_paired=- loss_p_paired=- "
        "mean_ratio=0.8366[0.7170,0.9762] "
        "exact_mean_ratio=0.9216[0.8130,1.0446]")


def test_one_run_a_side_leaves_the_loss_interval_undefined(logs, capsys):
    """One --exact run: no spread to measure on that side; said in words, `[-,-]` and `-` on the line, no NaN."""
    assert vs_reference.main(argv(logs, exact=("e0",))) == 0
    out = capsys.readouterr().out
    assert ("FP8 loss mean - exact mean: +0.0267; 95% interval not defined: fewer than 2 runs a side (1 and 3)\n"
            in out)
    assert (" loss_diff=+0.0267[-,-] loss_p=- loss_diff_paired=- loss_p_paired=- mean_ratio=0.8533[0.7143,1.0195] "
            "exact_mean_ratio=0.9200[-,-]") in out
    assert "nan" not in out.lower()
    assert vs_reference.main(argv(logs, fp8=("p0",), exact=("e0",))) == 0  # one pair: no spread of differences
    out = capsys.readouterr().out
    assert " loss_diff_paired=+0.1100[-,-] loss_p_paired=- " in out
    assert "seed by seed: +0.1100; 95% interval not defined: fewer than 2 pairs (1)\n" in out
    assert "nan" not in out.lower()


def test_cold_starts_median(logs, capsys):
    """start_s is the median of the --cold runs' start-ups; a cold start stopped after its first timed step counts,
    with a row of its own."""
    stopped = project_log(0, True, 2000, 3.95, startup=71.0).split("step:1/")[0]  # config and start-up, no steps
    (logs / "c1.txt").write_text(stopped)
    (logs / "c2.txt").write_text(stopped.replace("startup: 71.0s", "startup: 47.5s"))
    assert vs_reference.main(argv(logs, cold=("p0", "c1", "c2"))) == 0
    out = capsys.readouterr().out.splitlines()
    assert " start_s=55.0 " in out[-1] and "cold starts: 55.0, 71.0, 47.5 s; median 55.0 s" in out
    assert "| cold start (c1.txt) | | | | 71.0 s | |" in out


def test_a_stalled_step_is_named(logs, capsys):
    """A step over twice its stage's median, in any run, is named with what it cost; none in the fixture's logs."""
    assert vs_reference.main(argv(logs)) == 0
    assert "stalls (steps over twice their stage's median): none" in capsys.readouterr().out.splitlines()
    # 9 scheduled steps and 2 more (stages of 3); the reference's every step 100 ms, but its step 2 took 500
    for name, text in {"p0": project_log(0, True, 900, 3.9, total=11, scheduled=9),
                       "e0": project_log(0, False, 1000, 3.9, total=11, scheduled=9)}.items():
        (logs / f"{name}.txt").write_text(text)
    ms = {n: 100 * n + (400 if n >= 2 else 0) for n in range(12)}
    (logs / "ref.txt").write_text("".join(f"step:{n}/11 train_time:{t}ms step_avg:1.00ms\n" for n, t in ms.items())
                                  + "step:11/11 val_loss:4.0000 train_time:1500ms step_avg:1.00ms\n")
    assert vs_reference.main(argv(logs, fp8=("p0",), exact=("e0",))) == 0
    assert ("stalls (steps over twice their stage's median): ref.txt step 2 500 ms (its stage's median 100, +0.40 s)"
            in capsys.readouterr().out.splitlines())


@pytest.mark.parametrize("case,words", [
    (dict(fp8=("p0", "e1")), ["e1.txt", "fp8_body=False", "--fp8 takes runs with --fp8_body True"]),
    (dict(exact=("e0", "p1")), ["p1.txt", "fp8_body=True", "--exact"]),
    (dict(cold=("e0",)), ["e0.txt", "fp8_body=False", "--fp8_body True"]),
    (dict(cold=("p0", "nostart")), ["nostart.txt", "no `startup:` line"]),
    (dict(cold=("other",)), ["other.txt", "num_scheduled_steps=5", "same schedule"]),
    (dict(fp8=("p0", "p0")), ["--fp8", "seeds [0, 0] repeat"]),
    (dict(exact=("e0", "short")), ["short.txt", "other steps", "one schedule"]),
    (dict(reference=("ref", "cut")), ["cut.txt", "not at step 8"]),
    (dict(fp8=("p0", "emulated")), ["emulated.txt", "--emulate_world_size 8", "tools/project_8gpu.py"]),
    (dict(exact=("e0", "noworld")), ["noworld.txt", "no `world: N (...)` line", "--world N"]),
    (dict(exact=("e0", "world2")), ["world2.txt", "world size", "one schedule and world"]),
    (dict(fp8=("p0", "nopeak")), ["nopeak.txt", "`peak memory allocated:`", "finish on a GPU"]),
    (dict(fp8=("p0", "ref")), ["ref.txt", "no `config:` line"]),
    (dict(device="H100 x1"), ["--device", "lower case"]),
    (dict(proj_s="nan"), ["--proj_s", "not a finite number > 0"]),
])
def test_refusals(logs, capfd, case, words):
    """One `error:` line naming the file and the fix; nothing printed to stdout."""
    (logs / "short.txt").write_text(project_log(3, False, 2000, 3.9, total=7))
    (logs / "nostart.txt").write_text(project_log(0, True, 2000, 3.9).replace("startup:", "start:"))
    (logs / "other.txt").write_text(project_log(0, True, 2000, 3.9).replace("scheduled_steps=6", "scheduled_steps=5"))
    (logs / "cut.txt").write_text(REFERENCE.replace("step:8/8 val_loss:4.0000 train_time:2500ms step_avg:1.00ms\n", ""))
    (logs / "emulated.txt").write_text(project_log(5, True, 300, 5.7).replace("emulate_world_size=0",
                                                                              "emulate_world_size=8"))
    (logs / "noworld.txt").write_text(project_log(5, False, 2000, 3.9).replace("world: 1 (", "attention: x ("))
    (logs / "world2.txt").write_text(project_log(5, False, 1000, 3.9, world=2))
    (logs / "nopeak.txt").write_text(project_log(5, True, 2000, 3.9).replace("peak memory allocated", "peak memory"))
    with pytest.raises(SystemExit) as e:
        vs_reference.main(argv(logs, **case))
    captured = capfd.readouterr()
    assert e.value.code in (1, 2) and captured.out == ""
    one_error_line(captured.err, *words)


def test_runs_of_the_same_seeds_pair_up(logs, capsys):
    """Seeds 0 and 1 on both sides: FP8 - exact = +0.11 and -0.02, mean +0.045, se 0.065, df 1; the interval
    +0.045 +- 12.7062 * 0.065 and the one-sided p 1/2 - atan(0.045 / 0.065) / pi = 0.307 (Cauchy at df 1)."""
    assert vs_reference.main(argv(logs, fp8=("p1", "p0"))) == 0
    out = capsys.readouterr().out.splitlines()
    assert "loss_diff_paired=+0.0450[-0.7809,+0.8709] loss_p_paired=0.31" in out[-1]
    assert ("FP8 loss - exact loss, seed by seed: +0.0450, 95% interval [-0.7809, +0.8709] (paired t over 2 seeds, "
            "df 1.0); one-sided p for a higher FP8 loss: 0.31") in out
