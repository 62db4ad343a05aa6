"""Token shards and the data/ tools: format errors, exact round trips, tokenization (a tiny generated
encoding; one GPT-2 test), synthetic data and the download script (hub monkeypatched, no network).

    python3 -m pytest -q tests/test_data.py
"""
import importlib
import json
import logging
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry
from huggingface_hub.utils import LocalEntryNotFoundError

import data.shards
from data.shards import HEADER_BYTES, MAGIC, VERSION, read_header, read_tokens, write_shard
from harness.cli import UserError
from tests.utils import REPO, one_error_line

download = importlib.import_module("data.download")
synthetic = importlib.import_module("data.synthetic")
tokenize_text = importlib.import_module("data.tokenize_text")

# Optional: GPT-2's BPE files, cached for offline machines (only the GPT-2 test uses them)
TIKTOKEN_CACHE = REPO.parent / "shared" / "data" / "tiktoken_cache"


def raw_shard(path, header, tokens=()):
    """A shard with exactly the given header ints and token bytes, valid or not."""
    full = np.zeros(HEADER_BYTES // 4, dtype="<i4")
    full[:len(header)] = header
    path.write_bytes(full.tobytes() + np.asarray(tokens, dtype="<u2").tobytes())
    return path


def shard_tokens(paths) -> np.ndarray:
    return np.concatenate([read_tokens(p) for p in paths]).astype(np.int64)


# -----------------------------------------------------------------------------
# Shard format

BAD_SHARDS = {  # name: (header, tokens, words the error must contain)
    "bad_magic": ([1234, VERSION, 3], [1, 2, 3], "bad magic number 1234"),
    "bad_version": ([MAGIC, 7, 3], [1, 2, 3], "unsupported shard version 7"),
    "truncated": ([MAGIC, VERSION, 10], [1, 2, 3], "header claims 10 tokens"),
    "extra_bytes": ([MAGIC, VERSION, 2], [1, 2, 3], "header claims 2 tokens"),
    "negative_count": ([MAGIC, VERSION, -1], [], "header claims -1 tokens"),
}


@pytest.mark.parametrize("case", BAD_SHARDS)
def test_bad_header_raises_shard_error_naming_file(tmp_path, case):
    header, tokens, problem = BAD_SHARDS[case]
    path = raw_shard(tmp_path / f"{case}.bin", header, tokens)
    with pytest.raises(UserError, match=problem) as e:
        read_header(path)
    assert str(path) in str(e.value)
    with pytest.raises(UserError):
        read_tokens(path)


def test_file_shorter_than_header(tmp_path):
    path = tmp_path / "short.bin"
    path.write_bytes(np.array([MAGIC, VERSION, 0], dtype="<i4").tobytes())
    with pytest.raises(UserError, match=f"{path}: file is 12 bytes, shorter than the {HEADER_BYTES}-byte header"):
        read_header(path)


def test_missing_file(tmp_path):
    path = tmp_path / "nope.bin"
    with pytest.raises(UserError, match="cannot read shard") as e:
        read_header(path)
    assert str(path) in str(e.value)


@pytest.mark.parametrize("tokens", [[], [0], [0, 65535, 50256, 1, 65534], np.arange(2**16)], ids=["empty", "zero", "edges", "all"])
def test_read_returns_exactly_what_was_written(tmp_path, tokens):
    path = tmp_path / "s.bin"
    write_shard(path, np.asarray(tokens, dtype=np.int64))
    assert read_header(path) == len(tokens)
    got = read_tokens(path)
    assert got.dtype == np.uint16
    np.testing.assert_array_equal(got, np.asarray(tokens, dtype=np.uint16))
    into = np.full(len(tokens), 7, dtype=np.uint16)  # e.g. the trainer's pinned buffer
    assert read_tokens(path, out=into) is into
    np.testing.assert_array_equal(into, got)
    assert not path.with_name("s.bin.tmp").exists()


def test_data_tools_do_not_import_torch_or_the_trainer():
    """The shard format is numpy only: the data tools read and write shards without torch, Triton or train_gpt."""
    probe = ("import sys; import data.shards, data.synthetic, data.tokenize_text, data.download; "
             "print(sorted({'torch', 'triton', 'train_gpt'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out


def test_write_rejects_tokens_outside_uint16(tmp_path):
    for bad in ([65536], [-1]):
        with pytest.raises(ValueError, match="uint16"):
            write_shard(tmp_path / "s.bin", bad)


# -----------------------------------------------------------------------------
# data/tokenize_text.py (a tiny byte-level encoding, conftest.py's `tiny`; one test needs GPT-2's BPE files)

DOCS = ["Hello world", "Second document.\nIt has two lines and <|endoftext|> as plain text.",
        "Ünïcödé ✓ 日本語", "", "x"]


def split_documents(tokens: np.ndarray, enc) -> list[str]:
    assert tokens[0] == enc.eot_token, "every stream starts with a document"
    starts = np.flatnonzero(tokens == enc.eot_token)
    return [enc.decode(doc[1:].tolist()) for doc in np.split(tokens, starts[1:])]


def write_corpus(src: Path) -> list[str]:
    """A .jsonl and a .txt file in `src`; return their documents in order."""
    src.mkdir()
    (src / "a.jsonl").write_text("".join(json.dumps({"text": d, "id": i}) + "\n" for i, d in enumerate(DOCS)) + "\n")
    (src / "b.txt").write_text("A whole file\nis one document.\n")
    return DOCS + ["A whole file\nis one document.\n"]


@pytest.mark.parametrize("workers", [1, 2])
def test_tokenize_round_trip(tmp_path, tiny, workers):
    docs = write_corpus(tmp_path / "src")
    out = tmp_path / "out"
    paths = tokenize_text.tokenize([tmp_path / "src"], out, "t", shard_tokens=20, val_tokens=12, workers=workers,
                                   chunksize=2, encoding=tiny)

    names = [p.name for p in paths]
    assert names[0] == "t_val_000000.bin" and names[1:] == [f"t_train_{i:06d}.bin" for i in range(1, len(names))]
    assert len(names) > 3, "documents continue across train shards"
    assert all(read_header(p) == 20 for p in paths[1:-1]) and 0 < read_header(paths[-1]) <= 20
    val = shard_tokens(paths[:1])
    assert len(val) > 12 and split_documents(val, tiny) == DOCS[:2], "whole documents, at least val_tokens + 1"
    assert split_documents(shard_tokens(paths), tiny) == docs


def test_tokenize_line_docs_and_no_val(tmp_path, tiny):
    (tmp_path / "lines.txt").write_text("first line\n\nsecond line\n")
    paths = tokenize_text.tokenize([tmp_path / "lines.txt"], tmp_path / "out", "l", line_docs=True, workers=1,
                                   encoding=tiny)
    assert [p.name for p in paths] == ["l_train_000001.bin"]
    assert split_documents(shard_tokens(paths), tiny) == ["first line", "second line"]


def test_tokenize_refuses_to_mix_with_old_shards(tmp_path, tiny):
    (tmp_path / "d.txt").write_text("doc")
    tokenize_text.tokenize([tmp_path / "d.txt"], tmp_path, "p", workers=1, encoding=tiny)
    with pytest.raises(UserError, match="already holds p_"):
        tokenize_text.tokenize([tmp_path / "d.txt"], tmp_path, "p", workers=1, encoding=tiny)


def test_tokenize_input_errors(tmp_path, tiny):
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{"body": "no text field"}\n')
    with pytest.raises(UserError, match=r"bad.jsonl:2: not a JSON object with a 'text' field"):
        tokenize_text.tokenize([tmp_path / "bad.jsonl"], tmp_path / "o1", "p", workers=1, encoding=tiny)
    (tmp_path / "small.txt").write_text("tiny")
    with pytest.raises(UserError, match="fewer than --val_tokens"):
        tokenize_text.tokenize([tmp_path / "small.txt"], tmp_path / "o2", "p", val_tokens=1000, workers=1,
                               encoding=tiny)
    with pytest.raises(UserError, match="does not exist"):
        tokenize_text.tokenize([tmp_path / "missing.txt"], tmp_path / "o3", "p", workers=1, encoding=tiny)


NOT_UTF8 = {  # file name, content after a long first line, extra arguments, column of the bad byte (on line 4)
    "jsonl": ("latin1.jsonl", b'\n{"text": "ok"}\n\n{"text": "caf\xe9"}\n', [], 14),
    "txt_lines": ("latin1.txt", b"\nok\n\ncaf\xe9\n", ["--line_docs"], 4),
    "txt_whole": ("latin1.txt", b"\nok\n\ncaf\xe9\n", [], 4),
}


@pytest.mark.parametrize("case", NOT_UTF8)
def test_non_utf8_input_is_one_line_naming_file_and_line(tmp_path, tiny, monkeypatch, capfd, case):
    name, content, args, column = NOT_UTF8[case]
    (tmp_path / "first.txt").write_text("a good file first")
    # a first line longer than the decoder's read buffer, whose error position then counts from a later read
    (tmp_path / name).write_bytes(json.dumps({"text": "x" * 10_000}).encode() + content)
    monkeypatch.setattr(tokenize_text, "load_gpt2", lambda: tiny)
    with pytest.raises(SystemExit) as e:
        tokenize_text.main([str(tmp_path / "first.txt"), str(tmp_path / name), "--out", str(tmp_path / "out"),
                            "--prefix", "p", "--workers", "1", *args])
    message = one_error_line(capfd.readouterr().err)
    assert e.value.code == 1, e.value.code
    assert message.startswith(f"error: {tmp_path / name}:4: not UTF-8 (byte 0xe9 at column {column}); "
                              "convert the file to UTF-8"), message


FAILURES = {  # what goes wrong after some shards were written: the error it raises
    "bad_input": (UserError, "not UTF-8"),
    "disk_full": (OSError, "No space left on device"),
}


@pytest.mark.parametrize("out_exists", [False, True], ids=["new_out", "existing_out"])
@pytest.mark.parametrize("failure", FAILURES)
def test_failed_tokenize_removes_only_what_it_created(tmp_path, tiny, monkeypatch, failure, out_exists):
    (tmp_path / "docs.txt").write_text("".join(f"document {i}\n" for i in range(50)))
    (tmp_path / "more.txt").write_bytes(b"caf\xe9\n" if failure == "bad_input" else b"more\n")
    out = tmp_path / "kept" if out_exists else tmp_path / "new" / "sub" / "out"
    others = ["other.bin", "q_train_000001.bin"]
    if out_exists:
        out.mkdir()
        for name in others:
            (out / name).write_bytes(b"not this run's")
    written = []
    atomic_write = data.shards.atomic_write

    def atomic_write_until_disk_full(path, write):
        written.append(path)

        def write_until_full(f):  # the third shard's write stops midway, as a full disk stops it
            f.write(b"partial")
            raise OSError(28, "No space left on device")
        atomic_write(path, write_until_full if failure == "disk_full" and len(written) == 3 else write)
    monkeypatch.setattr(data.shards, "atomic_write", atomic_write_until_disk_full)
    error, words = FAILURES[failure]
    with pytest.raises(error, match=words):
        tokenize_text.tokenize([tmp_path / "docs.txt", tmp_path / "more.txt"], out, "p", shard_tokens=16,
                               line_docs=True, workers=1, chunksize=1, encoding=tiny)
    assert len(written) >= 3, "it failed after writing shards"
    if out_exists:
        assert sorted(p.name for p in out.iterdir()) == others
    else:
        assert not (tmp_path / "new").exists(), "the folders this run created are gone"
        assert tmp_path.exists()


LONG_DOCS = [("ab " * 200).strip(), "short", "x" * 130, "y" * 127]  # tiny's tokens are bytes: 600, 5, 130, 127


@pytest.mark.parametrize("layout", ["jsonl", "txt_files", "txt_lines"])
def test_max_doc_tokens_splits_long_documents_in_every_format(tmp_path, tiny, layout):
    """Pieces of at most N tokens, separator included, each starting with the separator, whose text joins up to the
    document; shorter documents unchanged, and with 0 nothing is split."""
    src = tmp_path / "src"
    src.mkdir()
    if layout == "jsonl":
        (src / "c.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in LONG_DOCS))
    elif layout == "txt_files":
        for i, d in enumerate(LONG_DOCS):
            (src / f"{i}.txt").write_text(d)
    else:
        (src / "lines.txt").write_text("".join(d + "\n" for d in LONG_DOCS))
    args = dict(shard_tokens=50, workers=1, chunksize=1, encoding=tiny, line_docs=layout == "txt_lines")
    whole = tokenize_text.tokenize([src], tmp_path / "whole", "w", max_doc_tokens=0, **args)
    assert split_documents(shard_tokens(whole), tiny) == LONG_DOCS
    split = tokenize_text.tokenize([src], tmp_path / "split", "s", max_doc_tokens=128, **args)
    tokens = shard_tokens(split)
    starts = np.flatnonzero(tokens == tiny.eot_token)
    assert np.diff(np.append(starts, len(tokens))).max() == 128, "every document fits the cut"
    docs = split_documents(tokens, tiny)
    assert len(docs) == 5 + 2 + 1 + 1 and docs[5:] == ["short", "x" * 127, "xxx", "y" * 127]
    assert "".join(docs[:5]) == LONG_DOCS[0]


def test_by_default_documents_are_split_at_the_recipes_longest_sequence(tmp_path, tiny, monkeypatch):
    """Without --max_doc_tokens, a document longer than 2048 tokens (the longest sequence the recipe reads of one) is
    split there, and its text is all in the pieces; --max_doc_tokens 0 splits nothing."""
    monkeypatch.setattr(tokenize_text, "load_gpt2", lambda: tiny)
    (tmp_path / "c.jsonl").write_text(json.dumps({"text": "ab" * 2500}) + "\n" + json.dumps({"text": "short"}) + "\n")

    def docs(*args):
        out = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
        tokenize_text.main([str(tmp_path / "c.jsonl"), "--out", str(out), "--prefix", "p", "--workers", "1", *args])
        return split_documents(shard_tokens(sorted(out.glob("p_train_*.bin"))), tiny)
    pieces = docs()
    assert [len(d) for d in pieces] == [2047, 2047, 906, 5] and "".join(pieces[:3]) == "ab" * 2500  # bytes: tokens
    assert docs("--max_doc_tokens", "0") == ["ab" * 2500, "short"]


def test_recipe_seq_len_is_train_gpts_longest():
    """The default split is where the recipe's loader cuts: the longest of train_gpt.py's --stage_seq_lens."""
    seq_lens = re.search(r"stage_seq_lens: tuple = \(([\d, ]+)\)", (REPO / "train_gpt.py").read_text())[1]
    assert max(map(int, seq_lens.split(","))) == tokenize_text.RECIPE_SEQ_LEN


def test_gpt2_unavailable_is_one_line_with_the_fix(tmp_path, monkeypatch, capfd):
    """Offline with no cached BPE files: a one-line error naming TIKTOKEN_CACHE_DIR, and no output folder."""
    def no_network(url):
        raise ConnectionError(f"Failed to resolve host for {url}")
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})  # forget a gpt2 loaded by another test
    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty_cache"))
    (tmp_path / "d.txt").write_text("doc")
    with pytest.raises(SystemExit) as e:
        tokenize_text.main([str(tmp_path / "d.txt"), "--out", str(tmp_path / "out"), "--prefix", "p"])
    assert e.value.code == 1
    assert capfd.readouterr().err == (
        "error: cannot load tiktoken's gpt2 encoding: its BPE files are not in "
        f"TIKTOKEN_CACHE_DIR ({tmp_path / 'empty_cache'}) and downloading them failed "
        "(ConnectionError); set TIKTOKEN_CACHE_DIR to a folder holding the GPT-2 BPE files, "
        "or run once with network access to cache them\n")
    assert not (tmp_path / "out").exists()


@pytest.fixture
def gpt2(monkeypatch):
    """tiktoken's gpt2 encoding: from the shared offline cache if there is one, else tiktoken's cache or download."""
    if TIKTOKEN_CACHE.is_dir():
        monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(TIKTOKEN_CACHE))
    try:
        return tokenize_text.load_gpt2()
    except UserError as e:  # offline, without ../shared
        pytest.skip(f"no GPT-2 BPE files: none at {TIKTOKEN_CACHE} and {e}")


def test_gpt2_cli_round_trip(tmp_path, gpt2, capsys):
    docs = write_corpus(tmp_path / "src")
    out = tmp_path / "mine"
    tokenize_text.main([str(tmp_path / "src"), "--out", str(out), "--prefix", "g", "--val_tokens", "10",
                        "--workers", "2"])
    assert capsys.readouterr().out.endswith(f"2 shards written to {out}\n")
    paths = [out / "g_val_000000.bin", out / "g_train_000001.bin"]
    tokens = shard_tokens(paths)
    assert gpt2.eot_token == 50256 and tokens[:3].tolist() == [50256, 15496, 995], "<|endoftext|> Hello world"
    assert split_documents(tokens, gpt2) == docs


# -----------------------------------------------------------------------------
# data/synthetic.py

SMALL = dict(vocab_size=64, train_tokens=300_000, val_tokens=20_000, train_shards=3)


def test_synthetic_is_deterministic(tmp_path):
    a = synthetic.generate(tmp_path / "a", **SMALL, seed=1)
    b = synthetic.generate(tmp_path / "b", **SMALL, seed=1)
    c = synthetic.generate(tmp_path / "c", **SMALL, seed=2)
    assert [p.name for p in a] == ["synthetic_train_000000.bin", "synthetic_train_000001.bin",
                                   "synthetic_train_000002.bin", "synthetic_val_000000.bin"]
    assert all(pa.read_bytes() == pb.read_bytes() for pa, pb in zip(a, b))
    assert a[0].read_bytes() != c[0].read_bytes()


def test_synthetic_document_structure(tmp_path):
    vocab = SMALL["vocab_size"]
    paths = synthetic.generate(tmp_path, **SMALL)
    assert [read_header(p) for p in paths] == [100_000] * 3 + [20_000]
    tokens = shard_tokens(paths[:3])
    sep = vocab - 1
    assert tokens.max() == sep and tokens.min() >= 0
    starts = np.flatnonzero(tokens == sep)
    assert starts[0] == 0 and (np.diff(starts) > 1).all(), "every document has at least one token"
    lengths = np.diff(np.append(starts, len(tokens))) - 1
    assert 60 < np.median(lengths) < 160
    assert (lengths <= 5).sum() >= 3, "some very short documents exercise edge cases"
    assert lengths.max() > 1000, "some long documents exceed the sequence lengths"
    # learnable: next-token entropy given the previous token is far below chance
    prev, nxt = tokens[:-1], tokens[1:]
    counts = np.zeros((vocab, vocab))
    np.add.at(counts, (prev, nxt), 1)
    cond = counts / counts.sum(1, keepdims=True).clip(min=1)
    entropy = -(counts * np.log(np.where(cond > 0, cond, 1))).sum() / counts.sum()
    assert entropy < 0.5 * math.log(vocab)


def test_synthetic_keeps_valid_files_unless_forced(tmp_path):
    paths = synthetic.generate(tmp_path, **SMALL)
    inode = {p: p.stat().st_ino for p in paths}  # write_shard replaces the file: a rewrite gets a new inode
    synthetic.generate(tmp_path, **SMALL)
    assert all(p.stat().st_ino == inode[p] for p in paths)
    paths[0].write_bytes(b"broken")
    synthetic.generate(tmp_path, **SMALL)
    assert read_header(paths[0]) == 100_000
    assert paths[1].stat().st_ino == inode[paths[1]]
    synthetic.generate(tmp_path, **SMALL, force=True)
    assert all(p.stat().st_ino != inode[p] for p in paths[1:])


def test_synthetic_refuses_stale_extra_shards(tmp_path):
    synthetic.generate(tmp_path, **SMALL)
    with pytest.raises(UserError, match="synthetic_train_000002.bin"):
        synthetic.generate(tmp_path, **{**SMALL, "train_shards": 2})


# -----------------------------------------------------------------------------
# data/download.py (the hub call is replaced; nothing leaves this machine)

def fake_hub(calls, fail_on=None, error=None):
    def hf_hub_download(repo_id, filename, repo_type, local_dir):
        calls.append(filename)
        assert (repo_id, repo_type) == ("kjj0/fineweb10B-gpt2", "dataset")
        if filename == fail_on:  # offline, the real client logs a warning per retry, then raises
            logging.getLogger("huggingface_hub.utils._http").warning("Retrying in 1s [Retry 1/5].")
            raise error
        write_shard(Path(local_dir) / filename, np.arange(5))
        return str(Path(local_dir) / filename)
    return hf_hub_download


def test_download_skips_valid_and_refetches_invalid(tmp_path, monkeypatch, capsys):
    write_shard(tmp_path / "fineweb_val_000000.bin", np.arange(3))
    raw_shard(tmp_path / "fineweb_train_000001.bin", [MAGIC, VERSION, 100], [1, 2])  # cut off
    calls = []
    monkeypatch.setattr(download, "hf_hub_download", fake_hub(calls))
    paths = download.download(2, tmp_path)
    assert calls == ["fineweb_train_000001.bin", "fineweb_train_000002.bin"]
    assert [p.name for p in paths] == ["fineweb_val_000000.bin", "fineweb_train_000001.bin", "fineweb_train_000002.bin"]
    assert [read_header(p) for p in paths] == [3, 5, 5]
    assert "[1/3] fineweb_val_000000.bin: present" in capsys.readouterr().out
    calls.clear()
    download.download(2, tmp_path)
    assert calls == []


HUB_ERRORS = {  # what the client raises: the words the error line must hold
    "offline": (LocalEntryNotFoundError("An error happened while trying to locate the file on the Hub and we cannot "
                                        "find the requested files in the local cache. Please check your connection"),
                "the Hugging Face hub is unreachable."),
    "other": (PermissionError("[Errno 13] Permission denied:\n  'out/.cache'"),
              "PermissionError: [Errno 13] Permission denied: 'out/.cache'."),
}


@pytest.mark.parametrize("case", HUB_ERRORS)
def test_download_failure_is_one_line_with_what_to_do(tmp_path, monkeypatch, caplog, capfd, case):
    error, problem = HUB_ERRORS[case]
    caplog.set_level(logging.WARNING, logger="huggingface_hub")  # the client's default, restored after the test
    calls = []
    monkeypatch.setattr(download, "hf_hub_download", fake_hub(calls, "fineweb_train_000002.bin", error))
    with pytest.raises(SystemExit) as e:
        download.main(["3", "--out", str(tmp_path)])
    message = one_error_line(capfd.readouterr().err)
    assert e.value.code == 1, e.value.code
    assert message.startswith("error: could not fetch fineweb_train_000002.bin from the Hugging Face dataset "
                              f"kjj0/fineweb10B-gpt2: {problem} Rerun with network access"), message
    copy_by_hand = f"copy fineweb_val_000000.bin and the train shards up to fineweb_train_000003.bin into {tmp_path}/"
    assert copy_by_hand in message
    assert "--train_files/--val_files" in message and "file(s)" not in message
    assert not caplog.records and "Retrying" not in message, "the hub client's warnings are hidden"
    assert logging.getLogger("huggingface_hub").level == logging.WARNING, "and shown again afterwards"
    assert calls == ["fineweb_val_000000.bin", "fineweb_train_000001.bin", "fineweb_train_000002.bin"]
    assert (tmp_path / "fineweb_train_000001.bin").exists()  # what arrived is kept for the retry
