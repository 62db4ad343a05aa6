"""Every program under data/ and tools/*.py on bad input and faults, by the one convention of harness/cli.py: ONE
line on stderr that starts with `error:` and names the file (and line) and the fix, a non-zero exit status, no
traceback; the inputs unchanged and nothing written; a failed write (full disk, read-only folder, a parent that is a
file, a name too long) leaves no partial or temporary file and keeps the previous one; Ctrl-C: one line, status 130,
after the clean-up. The programs' main(argv) run in this process; a subprocess only where the real process matters.

    python3 -m pytest -q tests/test_cli.py
"""
import contextlib
import errno
import importlib
import json
import lzma
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import data.shards
from data.shards import read_header, write_shard
from harness import cli, files
from tests.utils import REPO, FullDisk, one_error_line

download = importlib.import_module("data.download")
synthetic = importlib.import_module("data.synthetic")
tokenize_text = importlib.import_module("data.tokenize_text")
comm_ledger = importlib.import_module("tools.comm_ledger")
gpu_clocks = importlib.import_module("tools.gpu_clocks")
host_overhead = importlib.import_module("tools.host_overhead")
plot = importlib.import_module("tools.plot")
polar_express_rounding = importlib.import_module("tools.polar_express_rounding")
project = importlib.import_module("tools.project_8gpu")
replay = importlib.import_module("tools.replay")
trace_summary = importlib.import_module("tools.trace_summary")


def tree(root: Path) -> dict:
    """Every file and folder under root, files with their bytes: equal before and after when nothing changed."""
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else p.is_dir() for p in sorted(root.rglob("*"))}


def refused(capfd, main, argv, root: Path, words=(), status=None):
    """main(argv) ends with one `error:` line holding `words`, a non-zero status, and nothing under root changed;
    returns the line."""
    before = tree(root)
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capfd.readouterr().err
    line = one_error_line(err, *words)
    assert e.value.code not in (0, None) and (status is None or e.value.code == status), (e.value.code, err)
    assert tree(root) == before, "the inputs are unchanged and nothing was written"
    return line


# -----------------------------------------------------------------------------
# Bad arguments and malformed inputs, program by program: (setup(folder) -> argv, words the error line holds)

def text_file(d: Path, name: str, *lines: str) -> str:
    (d / name).write_text("".join(line + "\n" for line in lines))
    return str(d / name)


def tok(d: Path, *args, out="out"):
    return [*map(str, args), "--out", str(d / out), "--prefix", "p", "--workers", "1"]


def fifo(d: Path) -> str:
    os.mkfifo(d / "pipe.txt")
    return str(d / "pipe.txt")


def binary(d: Path, name: str, content: bytes) -> str:
    (d / name).write_bytes(content)
    return str(d / name)


def folder(d: Path, *files: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for name in files:
        (d / name).write_bytes(b"x")
    return d


def jsonl(d: Path, *lines: str) -> str:
    return text_file(d, "c.jsonl", *lines)


TOKENIZE = {
    "text_number": lambda d: (tok(d, jsonl(d, '{"text": "ok"}', '{"text": 5}')), ["c.jsonl:2:", "5, not a string"]),
    "text_null": lambda d: (tok(d, jsonl(d, '{"text": null}')), ["c.jsonl:1:", "null, not a string"]),
    "text_list": lambda d: (tok(d, jsonl(d, '{"text": ["a"]}')), ["c.jsonl:1:", "not a string"]),
    "not_json": lambda d: (tok(d, jsonl(d, '{"text": "ok"}', "", '{"text": "cut')), ["c.jsonl:3:", "not a JSON"]),
    "json_list": lambda d: (tok(d, jsonl(d, '["text"]')), ["c.jsonl:1:", "--text_field"]),
    "no_field": lambda d: (tok(d, jsonl(d, '{"body": "x"}')), ["c.jsonl:1:", "'text' field"]),
    "deep_json": lambda d: (tok(d, jsonl(d, "[" * 100_000)), ["c.jsonl:1:"]),
    "huge_int": lambda d: (tok(d, jsonl(d, '{"text": ' + "9" * 5000 + "}")), ["c.jsonl:1:"]),
    "all_empty": lambda d: (tok(d, jsonl(d, '{"text": ""}', '{"text": ""}')), ["no text", "2 documents"]),
    "blank_lines": lambda d: (tok(d, jsonl(d, "", "  ")), ["no text", "0 documents"]),
    "empty_txt": lambda d: (tok(d, text_file(d, "e.txt")), ["no text"]),
    "missing_input": lambda d: (tok(d, d / "nope.txt"), ["nope.txt does not exist"]),
    "no_text_files": lambda d: (tok(d, folder(d / "src", "a.bin")), ["no .jsonl/.txt files in"]),
    "fifo_input": lambda d: (tok(d, fifo(d)), ["pipe.txt is neither a file nor a folder"]),
    "line_docs_on_jsonl": lambda d: (tok(d, jsonl(d, '{"text": "a"}'), "--line_docs"),
                                     ["--line_docs", "--max_doc_tokens"]),
    "val_above_corpus": lambda d: (tok(d, text_file(d, "a.txt", "abc"), "--val_tokens", "1000"),
                                   ["fewer than --val_tokens 1,000"]),
    "prefix_up": lambda d: ([text_file(d, "a.txt", "abc"), "--out", str(d / "out"), "--prefix", "../x"],
                            ["--prefix '../x'"]),
    "prefix_slash": lambda d: ([text_file(d, "a.txt", "abc"), "--out", str(d / "out"), "--prefix", "a/b"],
                               ["--prefix 'a/b'"]),
    "out_is_file": lambda d: (tok(d, text_file(d, "a.txt", "abc"), out="a.txt"), ["a.txt is a file"]),
    "out_under_file": lambda d: (tok(d, text_file(d, "a.txt", "abc"), out="a.txt/sub"),
                                 [f"a.txt/sub: {d / 'a.txt'} is a file"]),
    "old_shards": lambda d: (tok(d, text_file(d, "a.txt", "abc"), out=folder(d / "old", "p_train_000001.bin").name),
                             ["already holds p_*.bin"]),
    "shard_tokens_zero": lambda d: (tok(d, "a.txt", "--shard_tokens", "0"), ["--shard_tokens", "'0'"]),
    "shard_tokens_int32": lambda d: (tok(d, "a.txt", "--shard_tokens", str(2**31)), ["2,147,483,647"]),
    "shard_tokens_text": lambda d: (tok(d, "a.txt", "--shard_tokens", "many"), ["--shard_tokens", "'many'"]),
    "val_tokens_negative": lambda d: (tok(d, "a.txt", "--val_tokens", "-1"), ["--val_tokens"]),
    "workers_zero": lambda d: ([*tok(d, "a.txt"), "--workers", "0"], ["--workers"]),
    "workers_past_cores": lambda d: ([*tok(d, "a.txt"), "--workers", "100000"], ["--workers"]),
    "max_doc_tokens_one": lambda d: (tok(d, "a.txt", "--max_doc_tokens", "1"), ["--max_doc_tokens"]),
    "unknown_option": lambda d: (tok(d, "a.txt", "--line_doc"), ["unrecognized arguments: --line_doc"]),
    "no_out": lambda d: (["a.txt", "--prefix", "p"], ["--out"]),
}


@pytest.mark.parametrize("case", TOKENIZE)
def test_tokenize_refuses(tmp_path, capfd, monkeypatch, tiny, case):
    monkeypatch.setattr(tokenize_text, "load_gpt2", lambda: tiny)
    monkeypatch.chdir(tmp_path)
    argv, words = TOKENIZE[case](tmp_path)
    refused(capfd, tokenize_text.main, argv, tmp_path, words)


def test_tokenize_text_number_is_one_line_with_worker_processes(tmp_path, capfd, monkeypatch, tiny):
    """The review's case: three malformed documents and two workers gave a TypeError traceback per worker."""
    monkeypatch.setattr(tokenize_text, "load_gpt2", lambda: tiny)
    corpus = text_file(tmp_path, "c.jsonl", *[json.dumps({"text": f"doc {i}"}) for i in range(50)],
                       '{"text": 5}', '{"text": null}', '{"text": [1]}')
    refused(capfd, tokenize_text.main, [corpus, "--out", str(tmp_path / "out"), "--prefix", "p", "--workers", "2"],
            tmp_path, ["c.jsonl:51:"])


DOWNLOAD = {
    "zero_shards": lambda d: (["0"], ["num_train_shards", "1..103"]),
    "more_than_the_dataset": lambda d: (["104"], ["num_train_shards", "1..103"]),
    "shards_text": lambda d: (["all"], ["num_train_shards"]),
    "out_is_file": lambda d: (["1", "--out", text_file(d, "f", "x")], ["--out", "is a file"]),
    "shard_is_folder": lambda d: (["1", "--out", str(folder(d / "out" / "fineweb_val_000000.bin").parent)],
                                  ["fineweb_val_000000.bin is a folder"]),
    "unknown_option": lambda d: (["1", "--outt", "x"], ["unrecognized arguments"]),
}


def no_hub(**kwargs):
    raise AssertionError("the hub was called")


@pytest.mark.parametrize("case", DOWNLOAD)
def test_download_refuses(tmp_path, capfd, monkeypatch, case):
    monkeypatch.setattr(download, "hf_hub_download", no_hub)
    monkeypatch.chdir(tmp_path)
    argv, words = DOWNLOAD[case](tmp_path)
    refused(capfd, download.main, argv if "--out" in argv else [*argv, "--out", str(tmp_path / "out")], tmp_path,
            words)


def test_download_refuses_when_the_disk_cannot_hold_the_shards(tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(download, "hf_hub_download", no_hub)
    monkeypatch.setattr(download.shutil, "disk_usage", lambda path: SimpleNamespace(free=500_000_000))
    write_shard(tmp_path / "fineweb_val_000000.bin", np.arange(3))
    refused(capfd, download.main, ["3", "--out", str(tmp_path)], tmp_path,
            [f"{tmp_path}: 0.5 GB free, but the 3 missing shards need about 0.6 GB"])


SYNTHETIC = {
    "vocab_small": (["--vocab_size", "2"], ["--vocab_size 2"]),
    "vocab_past_uint16": (["--vocab_size", "70000"], ["--vocab_size 70000"]),
    "branching_zero": (["--branching", "0"], ["--branching 0"]),
    "branching_vocab": (["--branching", "256"], ["--branching 256"]),
    "no_train_shards": (["--train_shards", "0"], ["--train_shards"]),
    "train_tokens_below_shards": (["--train_tokens", "1"], ["--train_tokens"]),
    "no_val_tokens": (["--val_tokens", "0"], ["--val_tokens"]),
    "shard_past_int32": (["--train_tokens", str(2**32), "--train_shards", "1"], ["at most 2,147,483,647 tokens"]),
    "seed_negative": (["--seed", "-1"], ["--seed -1"]),
    "seed_text": (["--seed", "x"], ["--seed"]),
    "unknown_option": (["--tokens", "5"], ["unrecognized arguments"]),
}


@pytest.mark.parametrize("case", SYNTHETIC)
def test_synthetic_refuses(tmp_path, capfd, case):
    args, words = SYNTHETIC[case]
    refused(capfd, synthetic.main, [*args, "--out", str(tmp_path / "out")], tmp_path, words)


@pytest.mark.parametrize("out, words", [("f", ["f is a file"]), ("f/sub", ["f/sub: ", "/f is a file"]),
                                        ("stale", ["synthetic_train_000007.bin", "delete them first"])])
def test_synthetic_refuses_its_folder(tmp_path, capfd, out, words):
    text_file(tmp_path, "f", "x")
    folder(tmp_path / "stale", "synthetic_train_000007.bin")
    refused(capfd, synthetic.main, ["--out", str(tmp_path / out)], tmp_path, words)


OURS = """\
config: run_id='fine', num_scheduled_steps=6, seed=0
step:0/8 val_loss:10.8000 train_time:0ms step_avg:0.04ms
step:2/8 train_loss:9.1000 grad_norm:2.5000 train_time:200ms step_avg:100.00ms
step:4/8 train_time:600ms step_avg:150.00ms
step:6/8 train_time:1200ms step_avg:200.00ms
step:8/8 train_time:2000ms step_avg:250.00ms
step:8/8 val_loss:4.2500 train_time:2000ms step_avg:250.00ms
"""


STARTUP = """\
warm-up (untimed): compiling on steps [0, 1], up to 2 micro-batches each, then back to step 0; starts at 5.7s
warm-up 1/2: step 0 (stage 1, 16384 tokens per micro-batch, windows (1, 3)) done at 50.2s
warm-up 2/2: step 1 (stage 1, 16384 tokens per micro-batch, windows (1, 3)) done at 52s
warm-up: validation done at 55.0s
startup: 55.5s from process start to the first timed step
"""


def log(d: Path, text: str = OURS, name: str = "run.txt") -> str:
    (d / name).write_text(text)
    return str(d / name)


PLOT = {
    "missing_log": lambda d: ([str(d / "nope.txt")], ["nope.txt: No such file or directory"]),
    "log_is_folder": lambda d: ([str(folder(d / "logs"))], ["logs: Is a directory"]),
    "no_step_lines": lambda d: ([log(d, "config: num_scheduled_steps=6\nhello\n")], ["no `step:` lines"]),
    "binary_log": lambda d: ([binary(d, "b.txt", bytes(range(256)) * 4)], ["no `step:` lines"]),
    "val_loss_text": lambda d: ([log(d, OURS.replace("val_loss:4.2500", "val_loss:abc"))], ["run.txt:7:", "'abc'"]),
    "train_loss_text": lambda d: ([log(d, OURS.replace("train_loss:9.1000", "train_loss:x"))], ["run.txt:3:"]),
    "stages_garbage": lambda d: ([log(d, OURS + "ms/step by stage: fast\n")], ["run.txt:8:", "ms/step by stage"]),
    "stage_nan": lambda d: ([log(d, OURS + "ms/step by stage: 1:nan 2:3\n")], ["run.txt:8:", "'nan'"]),
    "stage_zero": lambda d: ([log(d, OURS + "ms/step by stage: 1:0.0\n")], ["run.txt:8:", "'0.0'"]),
    "stage_negative": lambda d: ([log(d, OURS + "ms/step by stage: 1:-5\n")], ["run.txt:8:"]),
    "stage_inf": lambda d: ([log(d, OURS + "ms/step by stage: 1:inf\n")], ["run.txt:8:"]),
    "scheduled_zero_in_log": lambda d: ([log(d, OURS.replace("num_scheduled_steps=6", "num_scheduled_steps=0"))],
                                        ["run.txt:1:", "num_scheduled_steps=0"]),
    "time_runs_backwards": lambda d: ([log(d, OURS.replace("train_time:1200ms", "train_time:100ms"))],
                                      ["run.txt", "train_time does not grow"]),
    "nothing_to_plot": lambda d: ([log(d, "config: num_scheduled_steps=6\nstep:1/8 train_time:5ms\n")],
                                  ["no validation, training loss or whole stage"]),
    "reference_without_S": lambda d: ([log(d, "step:1/8 train_time:5ms\nstep:1/8 val_loss:3.0 train_time:5ms\n")],
                                      ["--scheduled_steps"]),
    "scheduled_steps_two": lambda d: ([log(d), "--scheduled_steps", "2"], ["--scheduled_steps", "'2'"]),
    "labels_count": lambda d: ([log(d), "--labels", "a,b"], ["--labels names 2 logs, but 1 were given"]),
    "startup_of_a_log_without_it": lambda d: ([log(d), "--startup"],
                                              ["run.txt: no `warm-up (untimed): ... starts at` line", "--startup"]),
    "startup_cut_short": lambda d: ([log(d, STARTUP.replace("startup: 55.5s", "")), "--startup"],
                                    ["run.txt: no `startup:` line"]),
    "startup_times_shrink": lambda d: ([log(d, STARTUP.replace("done at 52s", "done at 40.0s")), "--startup"],
                                       ["run.txt: the start-up lines' times do not grow"]),
    "out_jpg": lambda d: ([log(d)], ["--out", "plot.jpg", ".png"], "plot.jpg"),
    "out_no_suffix": lambda d: ([log(d)], ["--out", ".png"], "plot"),
    "out_is_the_log": lambda d: ([log(d, name="run.png")], ["run.png is the input"], "run.png"),
    "out_is_folder": lambda d: ([log(d)], ["x.png is a folder"], str(folder(d / "x.png"))),
    "out_folder_missing": lambda d: ([log(d)], ["nowhere: No such file or directory"], "nowhere/plot.png"),
    "out_under_file": lambda d: ([log(d)], ["run.txt/plot.png: Not a directory"], "run.txt/plot.png"),
    "out_name_too_long": lambda d: ([log(d)], ["File name too long"], "x" * 300 + ".png"),
}


@pytest.mark.parametrize("case", PLOT)
def test_plot_refuses(tmp_path, capfd, monkeypatch, case):
    monkeypatch.chdir(tmp_path)
    logs, words, *out = PLOT[case](tmp_path)
    refused(capfd, plot.main, [*logs, "--out", str(tmp_path / (out[0] if out else "plot.png"))], tmp_path, words)


def test_plot_labels_runs_by_their_run_id():
    """The config's run_id, else the file name, train_gpt.py's default uuid shortened to its first 8 characters."""
    uuid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    default = plot.Run([], [], [], run_id=uuid)
    assert plot.label("logs/a.txt", plot.Run([], [], [], run_id="fine")) == "fine"
    assert plot.label(f"logs/{uuid}.txt", default) == uuid[:8]
    assert plot.label("records/seed0.txt", default) == "seed0"
    assert plot.label(f"logs/{uuid}.txt", plot.Run([], [], [])) == uuid[:8]  # a modded-nanogpt log: no config line


def test_plot_writes_exactly_the_named_file(tmp_path, capsys):
    """The review's case: --out X printed `wrote X` but wrote X.png."""
    plot.main([log(tmp_path), "--out", str(tmp_path / "X.png")])
    assert capsys.readouterr().out == f"wrote {tmp_path / 'X.png'}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["X.png", "run.txt"]
    assert (tmp_path / "X.png").read_bytes().startswith(b"\x89PNG")


LEDGER_ROW = dict(param="mlp_bank", op="reduce_scatter", dtype="bfloat16", elements=10, tensor_bytes=20, wire_bytes=2e9)
LEDGER = dict(world_size=8, stages={f"stage {s}": {k: [LEDGER_ROW] for k in project.STEP_KINDS} for s in (1, 2, 3)})


def ledger(d: Path) -> str:
    (d / "ledger.json").write_text(json.dumps(LEDGER))
    return str(d / "ledger.json")


def with_row(**row) -> dict:
    return {**LEDGER, "stages": {**LEDGER["stages"], "stage 2": {**LEDGER["stages"]["stage 2"],
                                                                 "adam_tied": [{**LEDGER_ROW, **row}]}}}


PROJECT = {  # id: (arguments after valid ones, which they override; the --ledger file: JSON, text or bytes; words)
    "zero_timing": (["--project_1gpu", "0,428,637"], LEDGER, ["--project_1gpu", "'0'"]),
    "nan_timing": (["--project_emulated8", "nan,56,82"], LEDGER, ["--project_emulated8", "'nan'"]),
    "inf_timing": (["--project_1gpu", "224,inf,637"], LEDGER, ["'inf'"]),
    "negative_timing": (["--project_1gpu", "224,-428,637"], LEDGER, ["'-428'"]),
    "two_stages": (["--project_1gpu", "224,428"], LEDGER, ["expected 3"]),
    "text_timing": (["--project_1gpu", "a,b,c"], LEDGER, ["'a'"]),
    "zero_bandwidth": (["--bus_gbps", "0"], LEDGER, ["--bus_gbps"]),
    "nan_bandwidth": (["--bus_gbps", "nan"], LEDGER, ["--bus_gbps"]),
    "negative_optimizer": (["--ref_opt8_ms", "-1"], LEDGER, ["--ref_opt8_ms"]),
    "optimizer_above_step": (["--ref_opt1_ms", "300"], LEDGER, ["--ref_opt1_ms 300 must be below"]),
    "ledger_missing": (["--ledger", "{d}/none.json"], LEDGER, ["none.json: No such file or directory"]),
    "ledger_not_json": ([], '{"world_size": 8,\n"stages": ', ["ledger.json:2:", "not JSON"]),
    "ledger_binary": ([], b"\xff\xfe\x00", ["ledger.json", "not JSON"]),
    "ledger_list": ([], [1, 2], ["not a ledger"]),
    "ledger_world_3": ([], {**LEDGER, "world_size": 3}, ["world size 3", "needs 8"]),
    "ledger_no_stage": ([], {**LEDGER, "stages": {}}, ["stage 1, normuon"]),
    "ledger_row_nan": ([], with_row(wire_bytes=float("nan")), ["stage 2, adam_tied", "nan is not a finite number"]),
    "ledger_row_negative": ([], with_row(elements=-1), ["stage 2, adam_tied"]),
    "ledger_row_no_op": ([], with_row(op=None), ["stage 2, adam_tied", "op"]),
    "ledger_no_bytes": ([], with_row(wire_bytes=0), ["stage 2, adam_tied steps send no bytes"]),
    "json_is_ledger": (["--json", "{d}/ledger.json"], LEDGER, ["is the input"]),
    "json_folder_missing": (["--json", "{d}/no/r.json"], LEDGER, ["no: No such file"]),
}


@pytest.mark.parametrize("case", PROJECT)
def test_project_refuses(tmp_path, capfd, case):
    args, content, words = PROJECT[case]
    ledger_file = tmp_path / "ledger.json"
    ledger_file.write_bytes(content if isinstance(content, bytes) else
                            (content if isinstance(content, str) else json.dumps(content)).encode())
    valid = ["--project_1gpu", "224,428,637", "--project_emulated8", "31,56,82", "--ledger", str(ledger_file)]
    refused(capfd, project.main, valid + [a.format(d=tmp_path) for a in args], tmp_path, words)


@pytest.mark.parametrize("args, words", [
    (["--world_size", "3"], ["--world_size 3", "1, 2, 4 or 8"]),
    (["--world_size", "16"], ["--world_size 16"]),
    (["--world_size", "0"], ["--world_size", "'0'"]),
    (["--world_size", "eight"], ["--world_size"]),
    (["--json", "{d}/no/ledger.json"], ["no: No such file or directory"]),
    (["--json", "{d}"], ["is a folder"]),
], ids=["3", "16", "0", "text", "json_folder_missing", "json_is_folder"])
def test_comm_ledger_refuses(tmp_path, capfd, monkeypatch, args, words):
    monkeypatch.setattr(comm_ledger, "ledgers", lambda world_size: pytest.fail("refused after the work"))
    refused(capfd, comm_ledger.main, [a.format(d=tmp_path) for a in args], tmp_path, words)


KERNEL = {"cat": "kernel", "name": "nvjet_gemm", "ts": 0, "dur": 100}
STEP = {"cat": "user_annotation", "name": "ProfilerStep#3", "ts": 0, "dur": 700}


def trace(d: Path, events=None, text=None, name="t.json") -> str:
    (d / name).write_text(text if text is not None else json.dumps({"traceEvents": events}))
    return str(d / name)


TRACE = {
    "missing": lambda d: ([str(d / "none.json")], ["none.json: No such file or directory"]),
    "not_json": lambda d: ([trace(d, text="[")], ["t.json: not a Chrome trace"]),
    "no_events": lambda d: ([trace(d, text='{"a": 1}')], ["t.json: not a Chrome trace"]),
    "events_not_list": lambda d: ([trace(d, text='{"traceEvents": 5}')], ["traceEvents is not a list"]),
    "dur_text": lambda d: ([trace(d, [STEP, {**KERNEL, "dur": "x"}])], ["t.json: event 1"]),
    "dur_negative": lambda d: ([trace(d, [STEP, {**KERNEL, "dur": -1}])], ["t.json: event 1"]),
    "ts_missing": lambda d: ([trace(d, [{"cat": "kernel", "name": "k", "dur": 1}])], ["t.json: event 0"]),
    "bad_xz": lambda d: ([binary(d, "t.json.xz", b"not xz")], ["t.json.xz: not a Chrome"]),
    "no_kernels_no_ops": lambda d: ([trace(d, [STEP])], ["no GPU kernels and no CPU ops"]),
    "steps_unknown": lambda d: ([trace(d, [KERNEL])], ["no ProfilerStep ranges", "STEPS"]),
    "steps_mismatch": lambda d: ([trace(d, [STEP, KERNEL]), "3"], ["holds 1 profiled steps, not 3"]),
    "steps_zero": lambda d: ([trace(d, [STEP, KERNEL]), "0"], ["steps", "'0'"]),
    "steps_text": lambda d: ([trace(d, [STEP, KERNEL]), "all"], ["steps"]),
}


@pytest.mark.parametrize("case", TRACE)
def test_trace_summary_refuses(tmp_path, capfd, case):
    argv, words = TRACE[case](tmp_path)
    refused(capfd, trace_summary.main, argv, tmp_path, words)


def test_trace_summary_reads_a_cpu_trace_and_an_xz_one(tmp_path, capsys):
    """--profile_steps on the CPU writes no kernel events: the host's ops per step instead (the review: IndexError)."""
    ops = [{"cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": 300},
           {"cat": "cpu_op", "name": "aten::add", "ts": 400, "dur": 100}]
    steps = [{**STEP, "name": f"ProfilerStep#{i}"} for i in (3, 4)]
    trace_summary.main([trace(tmp_path, steps + ops)])
    out = capsys.readouterr().out
    assert "no GPU kernels in the trace" in out and "0.15 ms/step  aten::mm" in out and "0.05 ms/step  aten::add" in out
    assert "host time per step: step 0.70 ms" in out
    (tmp_path / "k.json.xz").write_bytes(lzma.compress(json.dumps({"traceEvents": [STEP, KERNEL]}).encode()))
    trace_summary.main([str(tmp_path / "k.json.xz")])
    assert "GPU busy 0.1 ms/step" in capsys.readouterr().out


CLOCKS_HEADER = ("timestamp, index, clocks.current.sm [MHz], power.draw [W], temperature.gpu, "
                 "clocks_event_reasons.active, utilization.gpu [%]\n")


@pytest.mark.parametrize("content, words", [
    (b"", ["x.gpus.csv: its first line is not nvidia-smi's header", "tools/ab_runs.sh writes"]),
    (b"step,loss\n1,2\n", ["x.gpus.csv: its first line is not nvidia-smi's header"]),
    (b"\xff\xfe\x00", ["x.gpus.csv: not text"]),
], ids=["empty", "another_csv", "binary"])
def test_gpu_clocks_refuses(tmp_path, capfd, content, words):
    (tmp_path / "x.gpus.csv").write_bytes(content)
    refused(capfd, gpu_clocks.main, [str(tmp_path / "x.gpus.csv")], tmp_path, words)
    refused(capfd, gpu_clocks.main, [str(tmp_path / "none.gpus.csv")], tmp_path, ["none.gpus.csv", "check the path"])


def test_gpu_clocks_reports_the_working_gpus_medians(tmp_path, capsys):
    """Medians over each GPU's working samples only: busy and drawing at least half its highest power (a GPU waiting
    in a collective reads 100% at idle power and full clock); an idle GPU, rows nvidia-smi could not fill and a line
    the run's end cut are left out; the reasons' shares by bit."""
    rows = ["t, 0, 1725, 693.0, 60, 0x4, 100", "t, 0, 1700, 690.0, 61, 0x24, 97", "t, 0, 1800, 700.0, 59, 0x0, 95",
            "t, 0, 1980, 122.0, 38, 0x0, 100", "t, 0, 345, 80.0, 40, 0x1, 0", "t, 1, 345, 77.9, 33, 0x1, 0",
            "t, 0, [N/A], 690.0, 60, 0x4, 100", "t, 0, 17"]
    (tmp_path / "A0.gpus.csv").write_text(CLOCKS_HEADER + "\n".join(rows) + "\n")
    (tmp_path / "B0.gpus.csv").write_text(CLOCKS_HEADER + rows[5] + "\n")
    (tmp_path / "C0.gpus.csv").write_text(CLOCKS_HEADER + rows[3] + "\n")
    gpu_clocks.main([str(tmp_path / f"{run}.gpus.csv") for run in ("A0", "B0", "C0")])
    assert capsys.readouterr().out.splitlines() == [
        "A0 GPU 0: 1725 MHz, 693 W, 60 C over 3 working samples; power cap 67%, slowdowns 33%",
        "B0: no working GPU samples",
        "C0 GPU 0: 1980 MHz, 122 W, 38 C over 1 working samples; power cap 0%, slowdowns 0%"]


def test_gpu_only_and_fixed_programs_refuse_arguments(tmp_path, capfd):
    for main in (host_overhead.main, polar_express_rounding.main):
        refused(capfd, main, ["--steps", "3"], tmp_path, ["unrecognized arguments: --steps 3"], status=2)
    if not torch.cuda.is_available():
        refused(capfd, host_overhead.main, [], tmp_path, ["run it on a GPU machine"], status=1)


LONG = "p" * 10_000


@pytest.mark.parametrize("program, argv", [
    (synthetic.main, ["--out", LONG]), (download.main, ["--out", LONG]), (plot.main, [LONG, "--out", "x.png"]),
    (trace_summary.main, [LONG]), (comm_ledger.main, ["--json", LONG]), (replay.main, [LONG]), (gpu_clocks.main, [LONG]),
], ids=["synthetic", "download", "plot", "trace_summary", "comm_ledger", "replay", "gpu_clocks"])
def test_a_10000_character_path_is_one_short_line(tmp_path, capfd, monkeypatch, program, argv):
    """The ground floor (harness/cli.shown) shows a long path by its ends and length, in every program."""
    monkeypatch.chdir(tmp_path)
    assert len(refused(capfd, program, argv, tmp_path, ["...", "(10,000 characters)"])) < 400


@pytest.mark.parametrize("content, words", [
    (None, ["the capture '", "none.pt': no such file"]),
    (b"not a checkpoint", ["is not a readable capture of train_gpt.py (not a file torch.save wrote)"]),
    ({"config": {}}, ["is not a file train_gpt.py wrote, not a capture"]),
    ({"kind": "checkpoint", "format": 1}, ["is a checkpoint, not a capture"]),
], ids=["missing", "garbage", "other_pt", "checkpoint"])
def test_replay_refuses_with_status_2(tmp_path, capfd, content, words):
    """Status 2: status 1 means the failure reproduced."""
    path = tmp_path / "none.pt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        torch.save(content, path)
    refused(capfd, replay.main, [str(path), "--device", "cpu"], tmp_path, words, status=2)


def test_a_refusal_by_the_trainers_code_is_the_programs_own_line(tmp_path, capfd):
    """train_gpt.py and harness/ refuse with a UserError: the line comes out with the program's status (replay's 2,
    as its own refusals); an exit with a status (--help's 0, argparse's 2) passes as it is."""
    @cli.program(error_status=2)
    def main(argv):
        raise SystemExit(argv) if isinstance(argv, int) else cli.UserError(argv)
    refused(capfd, main, "--device cuda was requested but CUDA is not available", tmp_path,
            ["error: --device cuda was requested"], status=2)
    for status in (0, 2):
        with pytest.raises(SystemExit) as e:
            main(status)
        assert e.value.code == status and capfd.readouterr().err == ""


# -----------------------------------------------------------------------------
# Faults in writes: every write fails with one line naming the path and the cause, leaves no partial or temporary
# file, and keeps the previous file

@pytest.fixture
def full_disk(monkeypatch):
    """Every file harness/files.atomic_write writes hits a full disk after a few bytes."""
    monkeypatch.setattr(files, "open", lambda path, mode: FullDisk(open(path, mode), room=7), raising=False)


@pytest.fixture
def read_only(monkeypatch):
    """Nothing can be created in any folder, as on a read-only file system (chmod would not stop root)."""
    def refuse(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), kwargs.get("dir"))
    monkeypatch.setattr(files, "open", lambda path, mode: refuse(dir=path), raising=False)
    monkeypatch.setattr("tempfile.TemporaryFile", refuse)


WRITERS = {  # id: (main, argv with {d} for the folder, the file it writes, bytes of a previous good copy or None)
    "synthetic": (synthetic.main, ["--out", "{d}", "--force", "--train_tokens", "2000", "--val_tokens", "100"],
                  "loss_floor.txt", b"1.000 nats/token\n"),
    "plot": (plot.main, ["{d}/run.txt", "--out", "{d}/plot.png"], "plot.png", b"\x89PNG old"),
    "project": (project.main, ["--project_1gpu", "224,428,637", "--project_emulated8", "31,56,82", "--ledger",
                               "{d}/ledger.json", "--json", "{d}/p.json"], "p.json", b"{}"),
    "comm_ledger": (comm_ledger.main, ["--json", "{d}/l.json"], "l.json", b"{}"),
    "tokenize": (tokenize_text.main, ["{d}/a.txt", "--out", "{d}", "--prefix", "p", "--workers", "1"],
                 "p_train_000001.bin", None),
}


@pytest.mark.parametrize("fault", ["full_disk", "read_only"])
@pytest.mark.parametrize("writer", WRITERS)
def test_failed_write_is_one_line_and_keeps_the_previous_file(tmp_path, capfd, monkeypatch, tiny, request, writer,
                                                               fault):
    main, argv, name, previous = WRITERS[writer]
    monkeypatch.setattr(tokenize_text, "load_gpt2", lambda: tiny)
    monkeypatch.setattr(comm_ledger, "ledgers", lambda world_size: {"stage 1": {"normuon": [LEDGER_ROW]}})
    log(tmp_path)
    ledger(tmp_path)
    text_file(tmp_path, "a.txt", "some text")
    if previous is not None:
        (tmp_path / name).write_bytes(previous)
    before = tree(tmp_path)
    request.getfixturevalue(fault)
    with pytest.raises(SystemExit) as e:
        main([a.format(d=tmp_path) for a in argv])
    cause = "No space left on device" if fault == "full_disk" else "Read-only file system"
    err = one_error_line(capfd.readouterr().err, cause, "write elsewhere")
    assert e.value.code == 1 and err.startswith(f"error: {tmp_path}"), err
    if fault == "full_disk":
        assert f"{tmp_path / name}: " in err, err
    assert tree(tmp_path) == before, "no partial or temporary file; the previous file kept"


def test_failed_replace_keeps_the_previous_shard(tmp_path, monkeypatch):
    write_shard(tmp_path / "s.bin", np.arange(5))

    def no_rename(src, dst):
        raise OSError(errno.EACCES, os.strerror(errno.EACCES), str(src))
    monkeypatch.setattr(files.os, "replace", no_rename)
    with pytest.raises(PermissionError) as e:
        write_shard(tmp_path / "s.bin", np.arange(9))
    assert e.value.filename == str(tmp_path / "s.bin")
    assert [p.name for p in tmp_path.iterdir()] == ["s.bin"] and read_header(tmp_path / "s.bin") == 5


def test_a_file_named_like_the_temporary_output_is_never_touched(tmp_path, tiny, monkeypatch, capfd):
    """The review's case: an input named like write_shard's temporary file was truncated and renamed into a shard.
    Now the temporary file is created exclusively: an input under the old name is read like any text, and one under
    the new name stops the write with one line; both inputs stay as they were."""
    monkeypatch.setattr(tokenize_text, "load_gpt2", lambda: tiny)
    old_style = text_file(tmp_path, "p_train_000001.bin.tmp", "an input")
    tokenize_text.main([old_style, "--out", str(tmp_path), "--prefix", "p", "--workers", "1"])
    assert Path(old_style).read_text() == "an input\n" and read_header(tmp_path / "p_train_000001.bin") == 10
    new_style = text_file(tmp_path, f".q_train_000001.bin.{os.getpid()}.tmp", "another input")
    refused(capfd, tokenize_text.main, [new_style, "--out", str(tmp_path), "--prefix", "q", "--workers", "1"], tmp_path,
            ["q_train_000001.bin: File exists"])


def test_failed_download_cleans_the_hub_cache(tmp_path, capfd, monkeypatch):
    """A full disk: the partial file and the cache folder this run created go, the shards fetched are kept. A lost
    connection: the partial file stays for the retry to resume, and the line says where."""
    write_shard(tmp_path / "fineweb_val_000000.bin", np.arange(3))

    def hub(error, partial: bytes):
        def hf_hub_download(repo_id, filename, repo_type, local_dir):
            cache = Path(local_dir) / ".cache" / "huggingface" / "download"
            cache.mkdir(parents=True, exist_ok=True)
            (cache / f"{filename}.lock").touch()
            (cache / f"abc.{filename}.incomplete").write_bytes(partial)
            raise error
        return hf_hub_download
    monkeypatch.setattr(download, "hf_hub_download", hub(OSError(errno.ENOSPC, "No space left on device"), b"x" * 9))
    refused(capfd, download.main, ["1", "--out", str(tmp_path)], tmp_path,
            [f"error: {tmp_path}: No space left on device; free space on that disk"])
    monkeypatch.setattr(download, "hf_hub_download", hub(ConnectionError("connection reset"), b"x" * 2_000_000))
    with pytest.raises(SystemExit):
        download.main(["1", "--out", str(tmp_path)])
    err = one_error_line(capfd.readouterr().err)
    assert err.startswith("error: could not fetch fineweb_train_000001.bin"), err
    assert f"the partial download in {tmp_path / '.cache'}/ (2 MB) resumes" in err
    assert sorted(p.name for p in tmp_path.rglob("*.incomplete")) == ["abc.fineweb_train_000001.bin.incomplete"]
    monkeypatch.setattr(download, "hf_hub_download", hub(ConnectionError("connection reset"), b""))
    (tmp_path / ".cache").rename(tmp_path / "old_cache")  # a run that starts without one leaves none
    with pytest.raises(SystemExit):
        download.main(["1", "--out", str(tmp_path)])
    assert "resumes" not in capfd.readouterr().err and not (tmp_path / ".cache").exists()


# -----------------------------------------------------------------------------
# Ctrl-C

def test_ctrl_c_in_tokenize_removes_its_shards(tmp_path, tiny, monkeypatch, capfd):
    monkeypatch.setattr(tokenize_text, "load_gpt2", lambda: tiny)
    text_file(tmp_path, "a.txt", *[f"line {i}" for i in range(200)])
    atomic_write, calls = data.shards.atomic_write, []

    def interrupted_at_the_third(path, write):
        calls.append(path)
        if len(calls) == 3:
            raise KeyboardInterrupt
        atomic_write(path, write)
    monkeypatch.setattr(data.shards, "atomic_write", interrupted_at_the_third)
    before = tree(tmp_path)
    with pytest.raises(SystemExit) as e:
        tokenize_text.main([str(tmp_path / "a.txt"), "--out", str(tmp_path / "new" / "out"), "--prefix", "p",
                            "--line_docs", "--shard_tokens", "64", "--workers", "1"])
    assert e.value.code == 130 and len(calls) == 3
    assert capfd.readouterr().err == "interrupted by Ctrl-C: stopped\n"
    assert tree(tmp_path) == before, "the shards written and the folders created are gone"


def test_ctrl_c_in_download_keeps_what_resumes(tmp_path, monkeypatch, capfd):
    seen = []

    def hf_hub_download(repo_id, filename, repo_type, local_dir):
        seen.append(download.hub_constants.HF_HUB_DISABLE_XET)  # plain HTTP: no chunk cache outside --out
        raise KeyboardInterrupt
    monkeypatch.delenv("HF_HUB_DISABLE_XET", raising=False)
    monkeypatch.setattr(download.hub_constants, "HF_HUB_DISABLE_XET", False, raising=False)
    monkeypatch.setattr(download, "hf_hub_download", hf_hub_download)
    with pytest.raises(SystemExit) as e:
        download.main(["1", "--out", str(tmp_path)])
    assert e.value.code == 130 and seen == [True]
    assert capfd.readouterr().err.endswith("interrupted by Ctrl-C: stopped; the shards fetched so far are kept\n")
    assert list(tmp_path.iterdir()) == []


CTRL_C_DRIVER = """\
import sys, tiktoken
sys.path.insert(0, {repo!r})
from data import tokenize_text
tokenize_text.load_gpt2 = lambda: tiktoken.Encoding(
    name="tiny_bytes", pat_str=r"\\s+|\\S+", mergeable_ranks={{bytes([b]): b for b in range(256)}},
    special_tokens={{"<|endoftext|>": 256}})
tokenize_text.read_documents = lambda *args: (f"document {{i}} " * 20 for i in range(10**9))  # endless
tokenize_text.main(sys.argv[1:])
"""


def test_ctrl_c_in_a_terminal_is_one_line_from_all_processes(tmp_path):
    """A terminal's Ctrl-C reaches the tokenizer's worker processes too: one line in all, status 130, no shards."""
    script = tmp_path / "driver.py"
    script.write_text(CTRL_C_DRIVER.format(repo=str(REPO)))
    (tmp_path / "a.txt").write_text("unused: the driver's documents never end")
    out = tmp_path / "new" / "out"
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "a.txt"), "--out", str(out), "--prefix", "p",
                             "--shard_tokens", "1000", "--workers", "2"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not any(out.glob("p_train_*.bin")) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal sends it: to every process of the group
        _, err = proc.communicate(timeout=60)
    finally:  # a driver that missed its Ctrl-C would write documents forever
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130 and err == "interrupted by Ctrl-C: stopped\n", err
    assert not (tmp_path / "new").exists(), list((tmp_path / "new").rglob("*"))


def test_plot_startup_reads_the_phases_and_writes_the_named_file(tmp_path, capsys):
    assert plot.startup_phases(log(tmp_path, STARTUP)) == pytest.approx([5.7, 44.5, 1.8, 3.0, 0.5])
    plot.main([log(tmp_path, STARTUP, "C0.txt"), log(tmp_path, STARTUP, "C1.txt"), "--startup", "--out",
               str(tmp_path / "s.png")])
    assert capsys.readouterr().out == f"wrote {tmp_path / 's.png'}\n"
    assert (tmp_path / "s.png").read_bytes().startswith(b"\x89PNG")
