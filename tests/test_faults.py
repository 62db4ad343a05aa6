"""Faults and bad input around a run of train_gpt.py: the launch environment, waiting for peers that never come or
die, files that are not what they claim (resume and replay), and writes that fail.

    python3 -m pytest -q tests/test_faults.py

On a machine with two GPUs the NCCL cases run too: a SIGTERM to a world-2 torchrun stops both ranks at one step
with a checkpoint that resumes, and a rank killed mid-step makes the other exit with one line.
"""
import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

import train_gpt as tg
from data.shards import fingerprint, read_tokens, write_shard
from harness import files
from harness.cli import UserError, program
from harness.checkpoint import FORMAT, Checkpoints, load_checkpoint, read_file, save_atomically
from harness.guard import NonFiniteError, Stopped, run_ending
from harness.launch import Watchdog, difference, read_launch
from harness.log import Logger
from tests.utils import (REPO, TINY_FLAGS, FullDisk, cpu_trainer, one_error_line, run_script, settings,
                         tiny_model, val_losses)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- a run that stops moving ---------------------------------------------------------------------

@pytest.mark.parametrize("peers, cause", [(True, "a peer process died or hangs"),
                                          (False, "a compile, kernel or read hangs")])
def test_the_watchdog_ends_a_run_that_makes_no_progress(monkeypatch, capsys, peers, cause):
    """At any world size (one process too: a compile or kernel that hangs after the last step was once unwatched),
    no beat for timeout_s ends the process with one line and a line in the log; beats keep it alive; before the
    first beat and after disarm() nothing is watched."""
    ended, logged = [], []
    monkeypatch.setattr(os, "_exit", ended.append)  # the watch thread's exit, recorded
    dog = Watchdog(0.4, 3, lambda line, console=True: logged.append(line), peers=peers)
    time.sleep(0.6)
    assert not ended, "not armed before the first beat (the warm-up compiles for minutes)"
    for step in range(6):
        dog.beat(step)
        time.sleep(0.1)
    assert not ended
    deadline = time.monotonic() + 5
    while not ended and time.monotonic() < deadline:
        time.sleep(0.05)
    dog.disarm()
    assert ended[:1] == [1]
    one_error_line(capsys.readouterr().err, "rank 3: no progress for --dist_timeout 0.4 s after step 5", cause)
    assert logged[:1] == [f"stopped: rank 3: no progress for --dist_timeout 0.4 s after step 5: {cause}; stopping"]


def test_a_one_process_run_is_watched(tmp_path, synthetic_data):
    hp = settings(TINY_FLAGS + ["--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"],
                                "--num_scheduled_steps", "6", "--log_dir", str(tmp_path)])
    watchdog = cpu_trainer(hp).watch.watchdog
    assert isinstance(watchdog, Watchdog) and not watchdog.peers and watchdog.timeout_s == hp.dist_timeout


# --- the launch environment ---------------------------------------------------------------------

@pytest.mark.parametrize("env, message", [
    ({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc' must be an integer of at least 1"),
    ({"WORLD_SIZE": "0"}, "WORLD_SIZE='0' must be an integer of at least 1"),
    ({"WORLD_SIZE": "-8"}, "WORLD_SIZE='-8' must be an integer of at least 1"),
    ({"RANK": "1", "WORLD_SIZE": "1"}, "RANK=1 must be below WORLD_SIZE=1"),
    ({"RANK": "-1", "WORLD_SIZE": "2"}, "RANK='-1' must be an integer of at least 0"),
    ({"LOCAL_RANK": "one"}, "LOCAL_RANK='one' must be an integer"),
    ({"RANK": "0", "WORLD_SIZE": "2"}, "WORLD_SIZE=2 needs MASTER_ADDR and MASTER_PORT"),
])
def test_launch_environment_is_checked(env, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_launch(env)
    assert read_launch({}) == read_launch({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"})


def test_bad_launch_environment_is_one_line():
    one_error_line(run_script(["--device", "cpu"], env_extra={"WORLD_SIZE": "abc"}).stderr, "WORLD_SIZE='abc'")


def test_a_rank_whose_peers_never_come_gives_up_within_the_timeout(synthetic_data, tmp_path):
    start = time.time()
    r = run_script(TINY_FLAGS + ["--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"],
                                 "--dist_timeout", "2", "--log_dir", str(tmp_path)],
                   env_extra={"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())},
                   timeout=120)
    assert r.returncode != 0 and time.time() - start < 60
    one_error_line(r.stderr, "rank 0 of 2 could not join the others", "--dist_timeout 2 s")


def test_a_rank_that_dies_mid_run_stops_the_other_with_one_line(synthetic_data, tmp_path):
    """Two processes launched by hand (no torchrun agent to clean up): rank 1 is killed mid-run, and rank 0 leaves
    with one line well within --dist_timeout, instead of waiting forever in a collective."""
    env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, "WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1"}
    flags = TINY_FLAGS + ["--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"], "--val_tokens",
                          "2048", "--num_scheduled_steps", "60", "--num_extension_steps", "0", "--val_every", "0", "--guard_every", "1",
                          "--dist_timeout", "60", "--log_dir", str(tmp_path), "--run_id", "dies"]
    ranks = [subprocess.Popen([sys.executable, "train_gpt.py", *flags], cwd=REPO, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    for line in ranks[0].stdout:  # steps are under way once their lines are printed
        if line.startswith("step:2/"):
            break
    ranks[1].kill()
    killed = time.time()
    _, err = ranks[0].communicate(timeout=120)
    assert ranks[0].returncode != 0 and time.time() - killed < 60, err[-2000:]
    one_error_line(err, "rank 0")




def start_ranks(flags: list[str], extra: dict[int, list[str]], tmp_path: Path) -> list[subprocess.Popen]:
    """Two gloo ranks of train_gpt.py launched by hand, rank r with extra[r] after `flags` (as a per-rank wrapper
    script that appends arguments would give them)."""
    env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, "WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1"}
    return [subprocess.Popen([sys.executable, "train_gpt.py", *flags, *extra.get(r, [])], cwd=REPO, text=True,
                             env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE) for r in range(2)]


@pytest.mark.parametrize("case", ["train_files", "setting"])
def test_ranks_that_disagree_all_stop_before_the_first_step_naming_the_difference(synthetic_data, tmp_path, case):
    """Rank 1 with other --train_files (the same shards, one edited, in another folder) trained on, with another
    final val loss and no word; rank 1 with another setting alike. Now every rank stops at start-up with the same
    line, within seconds (not --dist_timeout), and no log is written."""
    other = tmp_path / "other"
    shutil.copytree(Path(synthetic_data["train"]).parent, other)
    flags = TINY_FLAGS + ["--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"],
                          "--num_scheduled_steps", "6", "--num_extension_steps", "0", "--warmup", "False",
                          "--dist_timeout", "120", "--log_dir", str(tmp_path), "--run_id", "agree"]
    extra, words = {"train_files": (["--train_files", str(other / "synthetic_train_*.bin")],
                                    f"rank 1 has --train_files '{other}/synthetic_train_*.bin' where rank 0 has "
                                    f"'{synthetic_data['train']}'"),
                    "setting": (["--muon_lr", "0.02"], "rank 1 has --muon_lr 0.02 where rank 0 has 0.023")}[case]
    start = time.time()
    ranks = start_ranks(flags, {1: extra}, tmp_path)
    for rank in ranks:
        _, err = rank.communicate(timeout=120)
        assert rank.returncode == 1, err[-2000:]
        one_error_line(err, "the ranks disagree: " + words)
    assert time.time() - start < 60 and not (tmp_path / "agree.txt").exists()


def test_the_first_difference_between_ranks_is_named():
    settings_0, shards_0 = {"seed": 0, "train_files": "a"}, ["a_0.bin (10 bytes, CRC-32 1)", "v.bin (5 bytes, CRC-32 2)"]
    assert difference((settings_0, shards_0), (dict(settings_0), list(shards_0))) is None
    assert difference((settings_0, shards_0), ({"seed": 1, "train_files": "b"}, shards_0)) == \
        "--seed 1 where rank 0 has 0"
    edited = ["a_0.bin (10 bytes, CRC-32 3)", shards_0[1]]
    assert difference((settings_0, shards_0), (settings_0, edited)) == \
        "read a_0.bin (10 bytes, CRC-32 3) where rank 0 read a_0.bin (10 bytes, CRC-32 1)"
    assert difference((settings_0, shards_0), (settings_0, shards_0[:1])) == \
        "read no shard where rank 0 read v.bin (5 bytes, CRC-32 2)"

# --- how a run ends -------------------------------------------------------------------------------------

PEER_LOST = "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:29400"


@pytest.mark.parametrize("raised, line", [
    (NonFiniteError("non-finite loss or gradient at step 5"), "error: non-finite loss or gradient at step 5"),
    (Stopped("stopped by SIGTERM before step 7; resume with: x"), "stopped by SIGTERM before step 7; resume with: x"),
    (KeyboardInterrupt("SIGTERM"), "interrupted by SIGTERM: stopped at once, nothing saved"),
    (KeyboardInterrupt(), "interrupted by SIGINT: stopped at once, nothing saved"),
    (KeyboardInterrupt("SIGINT; nothing saved; the newest checkpoint is c.pt (of step 4), resume with: x"),
     "interrupted by SIGINT: stopped at once, nothing saved; the newest checkpoint is c.pt (of step 4), resume with: x"),
    (RuntimeError(PEER_LOST), "error: rank 3: a collective with the other processes failed, most likely because one "
                              f"of them died or hangs (see its log): {PEER_LOST}"),
    (UserError("no train shards match 'x_*.bin'"), "error: no train shards match 'x_*.bin'"),
    (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "logs/r.txt"),
     "error: logs/r.txt: No space left on device; free space on that disk or write elsewhere"),
])
def test_a_run_ends_with_one_line_and_status_1(capfd, monkeypatch, raised, line):
    """train_gpt.py's entry point: its own outcomes (harness/guard.run_ending) and the programs' (harness/cli.py)."""
    monkeypatch.setenv("RANK", "3")

    def main(argv):
        raise raised
    with pytest.raises(SystemExit) as e:
        program(main, ending=run_ending)()
    assert e.value.code == 1 and capfd.readouterr().err == line + "\n"


def test_a_bug_in_a_run_keeps_its_traceback(capfd):
    def main(argv):
        raise RuntimeError("a bug")
    with pytest.raises(RuntimeError, match="a bug"):
        program(main, ending=run_ending)()
    assert capfd.readouterr().err == ""


# --- files that are not what they claim -------------------------------------------------------------

@pytest.fixture
def checkpoint(tmp_path):
    """A one-process checkpoint of the tiny model at step 3, as Checkpoints.save writes it."""
    hp = settings(TINY_FLAGS + ["--log_dir", str(tmp_path), "--run_id", "run", "--num_scheduled_steps", "6",
                                "--num_extension_steps", "2"])
    model = tiny_model()
    state = dict(step=3, loader=(0, 0), model=model.state_dict(), optimizer={}, carried=None)
    path = Checkpoints(hp, 0, 1, "data-id").save(state, dict(train_ms=1.0, stage_ms={}, stage_start_ms=0.0))
    return hp, Path(path)


def load(hp, path, given=(), rank=0, world=1):
    resume = settings(TINY_FLAGS + ["--resume", str(path), "--num_scheduled_steps", "6"])
    for name in given:
        setattr(resume, name, getattr(hp, name))
    return load_checkpoint(resume, {"resume", *given}, rank, world, lambda s: tg.Schedule(s).total_steps,
                           tg.weight_shapes, tg.validate)


def rewrite(path, **changes):
    obj = torch.load(path, weights_only=True)
    obj.update(changes)
    torch.save(obj, path)


def test_a_checkpoint_loads_with_its_settings(checkpoint):
    hp, path = checkpoint
    saved, ck = load(hp, path)
    assert saved.run_id == "run" and ck["state"]["step"] == 3 and ck["data"] == "data-id"


@pytest.mark.parametrize("case, message", [
    ("empty", "is not a readable checkpoint of train_gpt.py"),
    ("truncated", "is not a readable checkpoint of train_gpt.py"),
    ("capture", "is a capture, not a checkpoint"),
    ("other_format", "is a checkpoint of format 0, from another version of train_gpt.py"),
    ("other_version", "was written with other settings (no_such_setting) by another version"),
    ("renamed", "holds rank 1 of a 2-process run; this is rank 0 of 1"),
    ("weights_changed", "its weights do not fit its settings (attn_bank: (3, 256, 64) saved, (10, 256, 64) expected)"),
    ("setting_equal_to_default", "--adam_lr 0.008 differs from the resumed run's 0.01"),
    ("setting_of_another_type", "its saved setting --model_dim expects an int, got '64'"),
    ("setting_out_of_range", "its settings break a rule: --model_dim 60 must be a multiple of 8"),
    ("setting_out_of_range_with_the_command_line", "--profile_steps '7:9' must look like 100:103"),
    ("step_below_0", "its state.step -3 is not a step in 0..8"),
    ("step_past_the_end", "its state.step 9 is not a step in 0..8"),
    ("step_not_a_number", "its state.step 3.0 is not a step in 0..8"),
    ("data_position", "its state.loader (0, -1) is not (shard, document): two whole numbers >= 0"),
    ("no_state", "holds no trainer state"),
    ("train_time", "its train_ms -5.0 is not a time in ms >= 0"),
    ("stage_times", "its stage_ms {0: 'x'} is not {stage: ms per step >= 0}"),
])
def test_resume_refuses_what_was_not_saved_for_it(checkpoint, case, message):
    hp, path = checkpoint
    given = ()
    if case == "empty":
        path.write_bytes(b"")
    elif case == "truncated":
        path.write_bytes(path.read_bytes()[:1000])
    elif case == "capture":
        rewrite(path, kind="capture")
    elif case == "other_format":
        rewrite(path, format=0)
    elif case == "other_version":
        obj = torch.load(path, weights_only=True)
        rewrite(path, config={**obj["config"], "no_such_setting": 1})
    elif case == "renamed":
        rewrite(path, rank=1, world_size=2)
    elif case == "weights_changed":
        obj = torch.load(path, weights_only=True)
        obj["state"]["model"]["attn_bank"] = obj["state"]["model"]["attn_bank"][:3]
        torch.save(obj, path)
    elif case.startswith("setting_of") or case == "setting_out_of_range":
        obj = torch.load(path, weights_only=True)
        rewrite(path, config={**obj["config"], "model_dim": "64" if case == "setting_of_another_type" else 60})
    elif case == "setting_out_of_range_with_the_command_line":  # a runtime setting given, past the saved run's end
        hp.profile_steps, given = "7:9", ("profile_steps",)
    elif case.startswith("step_"):
        obj = torch.load(path, weights_only=True)
        obj["state"]["step"] = {"step_below_0": -3, "step_past_the_end": 9, "step_not_a_number": 3.0}[case]
        torch.save(obj, path)
    elif case == "data_position":
        obj = torch.load(path, weights_only=True)
        obj["state"]["loader"] = (0, -1)
        torch.save(obj, path)
    elif case == "no_state":
        rewrite(path, state={"model": {}})
    elif case == "train_time":
        rewrite(path, train_ms=-5.0)
    elif case == "stage_times":
        rewrite(path, stage_ms={0: "x"})
    else:  # given on the command line equal to its default: still given, so still compared
        obj = torch.load(path, weights_only=True)
        rewrite(path, config={**obj["config"], "adam_lr": 0.01})
        hp.adam_lr, given = 0.008, ("adam_lr",)
    with pytest.raises(UserError) as e:
        load(hp, path, given)
    assert message in str(e.value), str(e.value)
    assert str(path) in str(e.value) or case == "setting_equal_to_default", "a fault of the file names it"


def test_a_checkpoint_of_the_last_step_resumes_to_the_final_validation(checkpoint):
    hp, path = checkpoint
    obj = torch.load(path, weights_only=True)
    obj["state"]["step"] = 8  # of 8: a run stopped before its final validation
    torch.save(obj, path)
    assert load(hp, path)[1]["state"]["step"] == 8


def test_replay_refuses_a_checkpoint(checkpoint):
    with pytest.raises(UserError, match="is a checkpoint, not a capture"):
        read_file(str(checkpoint[1]), "capture")
    r = run_script([str(checkpoint[1]), "--device", "cpu"], script="tools/replay.py")
    one_error_line(r.stderr, "is a checkpoint, not a capture")


def test_replay_checks_a_captures_contents_as_resume_does(checkpoint):
    """tools/replay.py reads a capture's settings and state by the same rules as a resume."""
    hp, path = checkpoint
    obj = torch.load(path, weights_only=True)
    obj["state"]["step"] = -3
    rewrite(path, kind="capture", state=obj["state"])
    one_error_line(run_script([str(path), "--device", "cpu"], script="tools/replay.py").stderr,
                   f"{path}: its state.step -3 is not a step in 0..8")
    obj["state"]["step"] = 3
    rewrite(path, state=obj["state"])
    one_error_line(run_script([str(path), "--device", "cpu"], script="tools/replay.py").stderr,
                   f"{path} holds no batches, forward, grad_accum_steps, reproduced: not a whole capture")
    rewrite(path, config={**obj["config"], "model_dim": "64"})
    one_error_line(run_script([str(path), "--device", "cpu"], script="tools/replay.py").stderr,
                   f"{path}: its saved setting --model_dim expects an int, got '64'")
    rewrite(path, config={k: v for k, v in obj["config"].items() if k != "seed"})  # not silently the default
    one_error_line(run_script([str(path), "--device", "cpu"], script="tools/replay.py").stderr,
                   f"{path} was written with other settings (seed) by another version of train_gpt.py; replay it")
    obj["state"]["model"]["attn_bank"] = obj["state"]["model"]["attn_bank"][:3]
    rewrite(path, config=obj["config"], state=obj["state"])
    one_error_line(run_script([str(path), "--device", "cpu"], script="tools/replay.py").stderr,
                   f"{path}: its weights do not fit its settings (attn_bank: (3, 256, 64) saved, (10, 256, 64)")


def data_fingerprint(train: str, val: str) -> str:
    """The fingerprint check_data gives these shards (what checkpoints store and a resume compares)."""
    hp = settings(TINY_FLAGS + ["--train_files", train, "--val_files", val, "--num_scheduled_steps", "6",
                                "--num_extension_steps", "0"])
    return fingerprint(tg.check_data(hp, tg.Schedule(hp), world_size=1).shards)


def test_data_fingerprint_changes_with_the_tokens_not_the_folder(tmp_path, synthetic_data):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        shutil.copytree(Path(synthetic_data["train"]).parent, folder)
    first = data_fingerprint(str(a / "synthetic_train_*.bin"), str(a / "synthetic_val_*.bin"))
    assert first == data_fingerprint(str(b / "synthetic_train_*.bin"), str(b / "synthetic_val_*.bin"))
    assert first != data_fingerprint(str(a / "synthetic_train_000000.bin"), str(a / "synthetic_val_*.bin"))


@pytest.mark.parametrize("shard, edited", [("synthetic_train_000000.bin", slice(6_400, 12_400)),
                                           ("synthetic_val_000000.bin", slice(100, 1_000))])
def test_data_fingerprint_sees_an_edit_that_keeps_sizes_and_headers(tmp_path, synthetic_data, shard, edited):
    """Each token id + 1 (mod 255, every BOS kept) over a stretch of a shard: sizes, headers and the documents'
    places stay, and 16 samples of 64 tokens (the fingerprint before its checksums) missed it."""
    data = tmp_path / "data"
    shutil.copytree(Path(synthetic_data["train"]).parent, data)
    train, val = str(data / "synthetic_train_*.bin"), str(data / "synthetic_val_*.bin")
    before = data_fingerprint(train, val)
    tokens = read_tokens(data / shard)
    part = tokens[edited]
    part[part != 255] = (part[part != 255] + 1) % 255
    write_shard(data / shard, tokens)
    assert data_fingerprint(train, val) != before


@pytest.mark.parametrize("val", ["the_file", "a_glob", "a_link", "a_copy"])
def test_a_train_shard_is_no_validation_shard(tmp_path, synthetic_data, val):
    """--val_files that names a train shard, by path (a glob, a symlink in another folder) or by content (its bytes
    under another name), is refused in one line naming both files: the val loss would be of trained-on tokens."""
    folder = Path(synthetic_data["train"]).parent
    train = folder / "synthetic_train_000000.bin"
    if val in ("a_link", "a_copy"):
        (tmp_path / "v").mkdir()
        other = tmp_path / "v" / "mine_val_000000.bin"
        other.symlink_to(train) if val == "a_link" else shutil.copy(train, other)
    pattern = {"the_file": str(train), "a_glob": str(folder / "*.bin")}.get(val) or str(tmp_path / "v" / "*.bin")
    named = other if val in ("a_link", "a_copy") else train
    with pytest.raises(UserError, match="validation shard .* the train shard .*: a val loss of trained-on tokens"):
        data_fingerprint(synthetic_data["train"], pattern)
    flags = TINY_FLAGS + ["--train_files", synthetic_data["train"], "--val_files", pattern, "--log_dir", str(tmp_path)]
    check = run_script(flags + ["--check"])  # by path before any run; by content once the shards are read
    if val == "a_copy":
        assert check.returncode == 0, check.stderr
        check = run_script(flags + ["--num_scheduled_steps", "6", "--num_extension_steps", "0"])
    line = one_error_line(check.stderr, f"validation shard {named} is ", f"the train shard {train}")
    assert ("a copy of" in line) == (val == "a_copy") and not list(tmp_path.glob("*.txt"))


def test_resume_refuses_shards_written_anew_under_the_same_names(tmp_path, synthetic_data):
    data = tmp_path / "data"
    shutil.copytree(Path(synthetic_data["train"]).parent, data)
    flags = TINY_FLAGS + ["--train_files", str(data / "synthetic_train_*.bin"), "--val_files",
                          str(data / "synthetic_val_*.bin"), "--num_scheduled_steps", "6", "--num_extension_steps", "0",
                          "--warmup", "False",
                          "--checkpoint_every", "2", "--log_dir", str(tmp_path), "--run_id", "r"]
    r = run_script(flags)
    assert r.returncode == 0, r.stderr[-2000:]
    first = sorted(data.glob("synthetic_train_*.bin"))[0]
    tokens = torch.from_numpy(__import__("numpy").fromfile(first, dtype="<u2", offset=1024).astype("int64"))
    write_shard(first, torch.roll(tokens, 1).numpy())  # same name, size and header; other tokens
    checkpoint = tmp_path / "r_checkpoint_rank0.pt"
    obj = torch.load(checkpoint, weights_only=True)
    obj["state"]["step"] = 4  # a run stopped mid-way
    torch.save(obj, checkpoint)
    log_before = (tmp_path / "r.txt").read_text()
    r = run_script(["--resume", str(checkpoint)])
    one_error_line(r.stderr, "the shards are not those the checkpoint was cut from")
    assert (tmp_path / "r.txt").read_text() == log_before, "nothing may be written to the run's log"


# --- writes that fail ----------------------------------------------------------------------------------

def test_a_failed_checkpoint_write_keeps_the_previous_file_and_names_the_cause(tmp_path, monkeypatch):
    path = tmp_path / "c.pt"
    save_atomically({"kind": "checkpoint", "format": FORMAT, "n": 1}, str(path))
    good = path.read_bytes()

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(files.os, "fsync", full)
    with pytest.raises(UserError, match=f"cannot write {path}: No space left on device; free space .*; the previous file"):
        save_atomically({"n": 2}, str(path))
    assert path.read_bytes() == good and not list(tmp_path.glob("*.tmp"))


def test_a_checkpoint_write_that_fails_midway_leaves_the_previous_one_and_nothing_else(checkpoint, monkeypatch):
    """The disk fills up halfway through the checkpoint: one line naming the path and the cause, no temporary file
    left, the previous checkpoint as it was."""
    hp, path = checkpoint
    good = path.read_bytes()
    opened = []

    def full_halfway(name, mode):
        opened.append(FullDisk(open(name, mode), room=len(good) // 2))
        return opened[-1]
    monkeypatch.setattr(files, "open", full_halfway, raising=False)
    state = dict(step=4, loader=(0, 0), model=tiny_model().state_dict(), optimizer={}, carried=None)
    with pytest.raises(UserError) as e:
        Checkpoints(hp, 0, 1, "data-id").save(state, dict(train_ms=2.0, stage_ms={}, stage_start_ms=0.0))
    assert str(e.value) == (f"cannot write {path}: No space left on device; free space on that disk or write elsewhere; "
                            "the previous file, if any, is unchanged")
    assert len(opened) == 1 and opened[0].room == 0, "the write failed midway"
    assert path.read_bytes() == good and list(path.parent.iterdir()) == [path]


def test_a_log_that_cannot_be_written_is_one_line(tmp_path, monkeypatch):
    log = Logger(str(tmp_path), "run", is_master=True)
    (tmp_path / "run.txt").unlink()
    (tmp_path / "run.txt").mkdir()  # writing it now fails (as a full or read-only disk would)
    with pytest.raises(UserError, match=f"cannot write the log {tmp_path / 'run.txt'}"):
        log("hello", console=False)


@pytest.mark.parametrize("log_dir, message", [("a_file/logs", "--log_dir {}: {} is a file; name a folder"),
                                               ("a_file", "--log_dir {} is a file; name a folder")])
def test_a_log_dir_that_cannot_hold_the_files_is_refused_before_start_up(tmp_path, synthetic_data, log_dir, message):
    (tmp_path / "a_file").write_text("not a folder")
    r = run_script(TINY_FLAGS + ["--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"],
                                 "--num_scheduled_steps", "6", "--log_dir", str(tmp_path / log_dir)])
    one_error_line(r.stderr, message.format(tmp_path / log_dir, tmp_path / "a_file"))


# --- one writer per run, and where a resumed run writes --------------------------------------------

HOLD = "import sys, time; from harness.files import hold_lock; hold_lock(sys.argv[1]); print('held', flush=True); time.sleep(60)"


def test_a_lock_has_one_holder_who_is_named_and_a_killed_one_leaves_nothing_stale(tmp_path):
    lock = tmp_path / "run.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    with pytest.raises(files.LockHeld, match=f"process {holder.pid} on host "):
        files.hold_lock(lock)
    holder.kill()  # SIGKILL: no clean-up of its own; its file stays, with its pid
    holder.wait()
    assert lock.exists()
    release = files.hold_lock(lock)  # the kernel released the lock: taken over at once
    assert lock.read_text().split()[0] == str(os.getpid())
    release()
    assert not lock.exists()


def test_of_two_that_take_a_lock_at_once_one_wins(tmp_path, monkeypatch):
    """Taking the lock is one step, not a check and then a create: two takers run side by side, and a taker that
    got as far as writing its name waits there for the other (0.3 s of grace), which ends as the winner's rival,
    refused and naming it (it waits for the name), never as a second holder."""
    lock, both_writing = tmp_path / "run.lock", threading.Barrier(2)

    class WaitingWrites:
        def __init__(self, f):
            self.f = f

        def __getattr__(self, name):
            return getattr(self.f, name)

        def write(self, text):
            try:
                both_writing.wait(timeout=0.3)
            except threading.BrokenBarrierError:  # the other one never got here
                pass
            return self.f.write(text)
    monkeypatch.setattr(files, "open", lambda *args: WaitingWrites(open(*args)), raising=False)
    outcomes = []

    def take():
        try:
            outcomes.append(files.hold_lock(lock))
        except files.LockHeld as e:
            outcomes.append(str(e))
    takers = [threading.Thread(target=take) for _ in range(2)]
    for t in takers:
        t.start()
    for t in takers:
        t.join()
    held = [o for o in outcomes if callable(o)]
    assert len(held) == 1 and outcomes.count(f"process {os.getpid()} on host {socket.gethostname()}") == 1, outcomes
    held[0]()


def stop(proc: subprocess.Popen):
    """SIGSTOP, returning once the process has stopped: a signal is delivered asynchronously, and until then the
    process runs on (writing its log, or taking a signal sent after this one first)."""
    proc.send_signal(signal.SIGSTOP)
    os.waitpid(proc.pid, os.WUNTRACED)


def md5(path) -> str:
    import hashlib
    return hashlib.md5(Path(path).read_bytes()).hexdigest()


def test_a_live_run_is_neither_started_again_nor_resumed_until_it_dies(tmp_path, synthetic_data):
    """A run holds its run id while it lives: a second start of the same --run_id (even with --overwrite) and a
    --resume of its checkpoint are refused in one line naming its process, its log and checkpoint untouched by them;
    once it is killed (SIGKILL: nothing of its own clean-up runs), its checkpoint resumes."""
    flags = TINY_FLAGS + ["--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"], "--warmup",
                          "False", "--val_every", "0", "--num_scheduled_steps", "60", "--num_extension_steps", "0",
                          "--log_dir", str(tmp_path), "--run_id", "RWA"]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    live = subprocess.Popen([sys.executable, "train_gpt.py", *flags, "--checkpoint_every", "2"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        checkpoint = tmp_path / "RWA_checkpoint_rank0.pt"
        for line in live.stdout:
            if line.startswith("checkpoint of step 2"):
                break
        stop(live)  # it stays alive, and writes nothing while the others try
        log_before, checkpoint_before = md5(tmp_path / "RWA.txt"), md5(checkpoint)
        for args in (flags, flags + ["--overwrite", "True"], ["--resume", str(checkpoint), "--device", "cpu"]):
            r = run_script(args)
            one_error_line(r.stderr, f"the run 'RWA' is live: process {live.pid} on host",
                           f"it holds {tmp_path / 'RWA.lock'}")
        assert (md5(tmp_path / "RWA.txt"), md5(checkpoint)) == (log_before, checkpoint_before)
    finally:
        live.kill()
        live.wait()
    resumed = subprocess.Popen([sys.executable, "train_gpt.py", "--resume", str(checkpoint), "--device", "cpu"],
                               cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in resumed.stdout:
        if line.startswith("step:"):  # training on
            break
    resumed.send_signal(signal.SIGINT)
    resumed.communicate(timeout=120)
    assert "resumed at step" in (tmp_path / "RWA.txt").read_text()


def test_every_rank_gets_rank_0s_refusal_of_a_live_run(tmp_path, synthetic_data):
    """Rank 0 alone holds the lock: with two gloo ranks, both end at once with its line, neither waits for the
    other until --dist_timeout."""
    release = files.hold_lock(tmp_path / "RWA.lock")  # as a live run of that id holds it
    try:
        start = time.time()
        r = run_script(TINY_FLAGS + ["--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"],
                                     "--log_dir", str(tmp_path), "--run_id", "RWA", "--dist_timeout", "120"], nproc=2)
        assert r.returncode != 0 and time.time() - start < 100, r.stderr[-2000:]
        assert r.stderr.count(f"error: the run 'RWA' is live: process {os.getpid()} on host") == 2, r.stderr[-3000:]
    finally:
        release()
    assert not (tmp_path / "RWA.txt").exists()


@pytest.fixture
def stopped_run(tmp_path, synthetic_data):
    """A run of 6 steps whose newest checkpoint is of step 4: (its log, its checkpoint)."""
    flags = TINY_FLAGS + ["--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"], "--warmup",
                          "False", "--val_every", "0", "--num_scheduled_steps", "6", "--num_extension_steps", "0",
                          "--checkpoint_every", "4", "--log_dir", str(tmp_path / "logs"), "--run_id", "r"]
    r = run_script(flags)
    assert r.returncode == 0, r.stderr[-2000:]
    return tmp_path / "logs" / "r.txt", tmp_path / "logs" / "r_checkpoint_rank0.pt"


def test_a_resume_writes_beside_the_checkpoint_it_was_given(tmp_path, stopped_run):
    """A checkpoint copied elsewhere resumes there: its log and checkpoints go beside the copy, and the original run's
    files keep their bytes; a copy under another name beside the original is refused rather than replace the
    original checkpoint; --log_dir puts them where it says."""
    log, checkpoint = stopped_run
    before = md5(log), md5(checkpoint)
    (tmp_path / "moved").mkdir()
    moved = tmp_path / "moved" / checkpoint.name
    moved.write_bytes(checkpoint.read_bytes())
    r = run_script(["--resume", str(moved), "--device", "cpu", "--checkpoint_every", "1"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert (md5(log), md5(checkpoint)) == before, "the original run's files are as they were"
    assert "resumed at step 4" in (tmp_path / "moved" / "r.txt").read_text()
    assert torch.load(moved, weights_only=True)["state"]["step"] == 6
    renamed = checkpoint.with_name("r_step4.pt")
    renamed.write_bytes(checkpoint.read_bytes())
    r = run_script(["--resume", str(renamed), "--device", "cpu"])
    one_error_line(r.stderr, f"resuming {renamed} would replace {checkpoint}")
    assert (md5(log), md5(checkpoint)) == before
    r = run_script(["--resume", str(renamed), "--device", "cpu", "--log_dir", str(tmp_path / "elsewhere")])
    assert r.returncode == 0, r.stderr[-2000:]
    assert (md5(log), md5(checkpoint)) == before
    assert "resumed at step 4" in (tmp_path / "elsewhere" / "r.txt").read_text()


def test_a_run_stopped_at_its_last_step_resumes_to_its_final_validation(tmp_path, synthetic_data):
    """A checkpoint of step N of N (a run stopped before its final validation, or one that ended) resumes: the
    final validation, the same val loss, and the summary."""
    flags = TINY_FLAGS + ["--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"], "--warmup",
                          "False", "--val_every", "0", "--num_scheduled_steps", "3", "--num_extension_steps", "0",
                          "--save_checkpoint", "True", "--log_dir", str(tmp_path), "--run_id", "end"]
    whole = run_script(flags)
    assert whole.returncode == 0, whole.stderr[-2000:]
    resumed = run_script(["--resume", str(tmp_path / "end_checkpoint_rank0.pt"), "--device", "cpu"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed at step 3" in resumed.stdout and "summary: val loss" in resumed.stdout
    assert val_losses(resumed.stdout) == val_losses(whole.stdout)[-1:]


def test_a_second_signal_names_the_newest_checkpoint(tmp_path, synthetic_data):
    """A second signal (as timeout, schedulers and torchrun's forwarding send them) stops at once: the line names the
    newest checkpoint that exists and how to resume from it."""
    flags = TINY_FLAGS + ["--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"], "--warmup",
                          "False", "--val_every", "0", "--num_scheduled_steps", "60", "--num_extension_steps", "0",
                          "--checkpoint_every", "2", "--log_dir", str(tmp_path), "--run_id", "twice"]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.Popen([sys.executable, "train_gpt.py", *flags], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("checkpoint of step 2"):
            break
    # two signals pending while it is stopped (two of one kind would be one) are handled one after the other, the
    # second before any step boundary; which comes first is the kernel's choice (each may go to another thread)
    stop(proc)
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGCONT)
    _, err = proc.communicate(timeout=120)
    checkpoint = tmp_path / "twice_checkpoint_rank0.pt"
    step = torch.load(checkpoint, weights_only=True)["state"]["step"]
    first, second = ("SIGINT", "SIGTERM") if "interrupted by SIGTERM" in err else ("SIGTERM", "SIGINT")
    assert err.splitlines()[-2:] == [
        f"{first}: stopping at a step boundary to save the run (send it again to stop at once)",
        f"interrupted by {second}: stopped at once, nothing saved; the newest checkpoint is {checkpoint} (of step "
        f"{step}), resume with: python3 train_gpt.py --resume {checkpoint}"], err[-2000:]


def test_help_says_where_a_resume_writes(capsys):
    with pytest.raises(SystemExit):
        settings(["--help"])
    text = capsys.readouterr().out
    assert "a --resume's: its checkpoint's folder unless given" in text and "appending to <run_id>.txt" in text


# --- long and unreadable paths ---------------------------------------------------------------------------

def test_long_paths_are_one_short_line(tmp_path, synthetic_data):
    """A 10,000-character --run_id, --log_dir or --resume, and a 300-character --run_id: one `error:` line naming
    the option, the value shown by its ends and length, never a traceback."""
    data = ["--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"]]
    for option, value, words in [("--run_id", "r" * 10_000, ["must be a plain file name (up to 200", "(10,000 characters)"]),
                                 ("--run_id", "r" * 300, ["must be a plain file name (up to 200", "(300 characters)"]),
                                 ("--log_dir", str(tmp_path / ("d" * 10_000)), ["cannot hold the run's files: File name too long; choose"]),
                                 ("--resume", "c" * 10_000 + ".pt", ["File name too long; choose a shorter name"])]:
        r = run_script(TINY_FLAGS + data + [option, value])
        assert len(one_error_line(r.stderr, option, *words)) < 400


def test_a_folder_given_to_resume_says_it_is_one_and_names_a_checkpoint_in_it(checkpoint):
    hp, path = checkpoint
    with pytest.raises(UserError, match=f"--resume '{path.parent}' is a folder; name a file in it, e.g. {path}$"):
        load(hp, path.parent)
    with pytest.raises(UserError, match=f"^--resume '{path.parent / 'none.pt'}': no such file$"):
        load(hp, path.parent / "none.pt")
    with pytest.raises(UserError, match=f"the capture '{path.parent}' is a folder; name a file in it$"):
        read_file(str(path.parent), "capture")


def test_an_unreadable_checkpoint_is_one_line(checkpoint, monkeypatch):
    """Tests may run as root, who may read anything: the permission check is os.access's answer, replaced here."""
    hp, path = checkpoint
    monkeypatch.setattr(files.os, "access", lambda p, mode: Path(p) != path)
    for read in (lambda: load(hp, path), lambda: read_file(str(path), "checkpoint")):
        with pytest.raises(UserError, match="no permission to read it; give yourself permission or use another path"):
            read()


SETPRIV = ["setpriv", "--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search"]


@pytest.mark.skipif(os.geteuid() == 0 and shutil.which("setpriv") is None, reason="root without setpriv reads anything")
def test_a_folder_the_process_may_not_read_is_one_line(tmp_path, synthetic_data):
    """chmod 000 on the folder of --log_dir or --resume; root runs without the capabilities that bypass it."""
    noperm = tmp_path / "noperm"
    (noperm / "logs").mkdir(parents=True)
    noperm.chmod(0)
    try:
        as_user = SETPRIV if os.geteuid() == 0 else []
        data = ["--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"]]
        for option, value, words in [("--log_dir", noperm / "logs", ["cannot hold the run's files: Permission denied; give"]),
                                     ("--resume", noperm / "logs" / "r_checkpoint_rank0.pt", ["Permission denied"])]:
            env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
            r = subprocess.run(as_user + [sys.executable, "train_gpt.py", *TINY_FLAGS, *data, option, str(value)],
                               cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
            one_error_line(r.stderr, f"{option} '{value}'", *words)
    finally:
        noperm.chmod(0o755)


# --- the last settings ------------------------------------------------------------------------------

def test_a_diverged_run_without_the_guard_does_not_exit_0(tmp_path, synthetic_data):
    r = run_script(TINY_FLAGS + ["--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"],
                                 "--num_scheduled_steps", "3", "--num_extension_steps", "0", "--guard_every", "0",
                                 "--inject_fault_step", "1", "--log_dir", str(tmp_path), "--run_id", "nan"])
    one_error_line(r.stderr, "the final val loss is nan")
    assert "stopped: the final val loss is nan" in (tmp_path / "nan.txt").read_text()


def test_the_log_names_the_shards_and_a_literal_bracket_folder_is_taken_as_written(tmp_path):
    for folder in ("run1", "run[1]"):
        (tmp_path / folder).mkdir()
        write_shard(tmp_path / folder / "t_train_000000.bin", [255, 1, 2])
    from data.shards import find_shards
    assert find_shards(str(tmp_path / "run[1]" / "t_train_*.bin"), "train") == [tmp_path / "run[1]" / "t_train_000000.bin"]


# --- real NCCL, on two GPUs ----------------------------------------------------------------------------

TWO_GPUS = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
NCCL_FLAGS = ["--device", "cuda", "--compile", "False", "--vocab_size", "256", "--bos_id", "255", "--model_dim", "64",
              "--num_heads", "2", "--head_dim", "32", "--micro_batch_tokens", "(64, 128, 192)",
              "--val_micro_batch_tokens", "256", "--stage_seq_lens", "(32, 64, 64)", "--window_block", "8",
              "--val_tokens", "2048", "--guard_every", "2", "--val_every", "0", "--num_scheduled_steps", "45",
              "--num_extension_steps", "0", "--cuda_graphs", "False"]


def nccl_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return {**env, "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", **extra}


@TWO_GPUS
def test_nccl_sigterm_stops_both_ranks_at_one_step_with_a_checkpoint_that_resumes(tmp_path, synthetic_data):
    flags = NCCL_FLAGS + ["--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"],
                          "--save_checkpoint", "True", "--log_dir", str(tmp_path), "--run_id", "term"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train_gpt.py"]
    proc = subprocess.Popen(torchrun + flags, cwd=REPO, env=nccl_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    for line in proc.stdout:  # as soon as the timed steps start: they are quick on a GPU
        if line.startswith("startup:"):
            proc.send_signal(signal.SIGTERM)
            break
    out, err = proc.communicate(timeout=300)
    (tmp_path / "term_console.txt").write_text(out + err)
    saved = [torch.load(tmp_path / f"term_checkpoint_rank{r}.pt", weights_only=True) for r in range(2)]
    assert saved[0]["state"]["step"] == saved[1]["state"]["step"] > 0, err[-3000:]
    assert "stopped by SIGTERM before step" in (tmp_path / "term.txt").read_text()
    resumed = subprocess.run(torchrun + ["--resume", str(tmp_path / "term_checkpoint_rank0.pt")], cwd=REPO,
                             env=nccl_env(), capture_output=True, text=True, timeout=600)
    (tmp_path / "resume_console.txt").write_text(resumed.stdout + resumed.stderr)
    assert resumed.returncode == 0 and f"resumed at step {saved[0]['state']['step']}" in resumed.stdout, \
        resumed.stderr[-3000:]


@TWO_GPUS
def test_nccl_rank_killed_mid_step_makes_the_other_exit_with_one_line(tmp_path, synthetic_data):
    flags = NCCL_FLAGS + ["--train_files", synthetic_data["train"], "--val_files", synthetic_data["val"],
                          "--dist_timeout", "60", "--log_dir", str(tmp_path), "--run_id", "kill"]
    env = nccl_env(WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    ranks = [subprocess.Popen([sys.executable, "train_gpt.py", *flags], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)})
             for r in range(2)]
    for line in ranks[0].stdout:
        if line.startswith("startup:"):
            break
    ranks[1].kill()
    killed = time.time()
    _, err = ranks[0].communicate(timeout=180)
    (tmp_path / "kill_console.txt").write_text(err)
    assert ranks[0].returncode != 0 and time.time() - killed < 70, err[-3000:]
    one_error_line(err, "rank 0")


@pytest.mark.parametrize("pattern, hint", [
    ("data/fineweb10B/fineweb_train_*.bin", "download them with `python3 data/download.py`"),
    ("{tmp}/nowhere/mine_train_*.bin", "the folder '{tmp}/nowhere' does not exist"),
    ("{tmp}/mine_train_*.bin", "check the file names and the glob's quotes"),
])
def test_no_shards_hint_fits_the_case(tmp_path, pattern, hint):
    """The download hint only for the FineWeb default: a custom glob that matches nothing gets a hint about it."""
    from data.shards import find_shards
    if "fineweb10B" in pattern and list(Path(REPO, "data", "fineweb10B").glob("fineweb_train_*.bin")):
        pytest.skip("FineWeb shards are present here")
    with pytest.raises(UserError) as e:
        find_shards(pattern.format(tmp=tmp_path), "train")
    assert hint.format(tmp=tmp_path) in str(e.value) and ("download" in str(e.value)) == ("fineweb10B" in pattern)


def test_a_missing_resume_is_refused_before_the_runtime_is_set_up(monkeypatch, tmp_path):
    """A run checks --resume first: the process group and the attention kernel (up to --fa3_hub_wait) come after."""
    monkeypatch.setattr(tg, "setup_runtime", lambda *args: pytest.fail("the runtime was set up before --resume's check"))
    with pytest.raises(UserError, match=f"^--resume '{tmp_path / 'none.pt'}': no such file$"):
        tg.main([*TINY_FLAGS, "--resume", str(tmp_path / "none.pt"), "--log_dir", str(tmp_path)])
