"""Token shards and the data/ tools: format errors, exact round trips, tokenization, synthetic
data and the download script (hub monkeypatched, no network).

    python3 -m pytest -q tests/test_data.py
"""
import importlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import train_gpt
from train_gpt import HEADER_BYTES, SHARD_MAGIC, SHARD_VERSION, ShardError, load_shard, read_shard_header, write_shard

download = importlib.import_module("data.download")
synthetic = importlib.import_module("data.synthetic")
tokenize_text = importlib.import_module("data.tokenize_text")

TIKTOKEN_CACHE = Path(__file__).resolve().parents[2] / "shared" / "data" / "tiktoken_cache"


def raw_shard(path, header, tokens=()):
    """A shard with exactly the given header ints and token bytes, valid or not."""
    full = np.zeros(HEADER_BYTES // 4, dtype="<i4")
    full[:len(header)] = header
    path.write_bytes(full.tobytes() + np.asarray(tokens, dtype="<u2").tobytes())
    return path


def shard_tokens(paths) -> np.ndarray:
    return np.concatenate([load_shard(p).numpy() for p in paths]).astype(np.int64)


# -----------------------------------------------------------------------------
# Shard format

BAD_SHARDS = {  # name: (header, tokens, words the error must contain)
    "bad_magic": ([1234, SHARD_VERSION, 3], [1, 2, 3], "bad magic number 1234"),
    "bad_version": ([SHARD_MAGIC, 7, 3], [1, 2, 3], "unsupported shard version 7"),
    "truncated": ([SHARD_MAGIC, SHARD_VERSION, 10], [1, 2, 3], "header claims 10 tokens"),
    "extra_bytes": ([SHARD_MAGIC, SHARD_VERSION, 2], [1, 2, 3], "header claims 2 tokens"),
    "negative_count": ([SHARD_MAGIC, SHARD_VERSION, -1], [], "header claims -1 tokens"),
}


@pytest.mark.parametrize("case", BAD_SHARDS)
def test_bad_header_raises_shard_error_naming_file(tmp_path, case):
    header, tokens, problem = BAD_SHARDS[case]
    path = raw_shard(tmp_path / f"{case}.bin", header, tokens)
    with pytest.raises(ShardError, match=problem) as e:
        read_shard_header(path)
    assert str(path) in str(e.value)
    with pytest.raises(ShardError):
        load_shard(path)


def test_file_shorter_than_header(tmp_path):
    path = tmp_path / "short.bin"
    path.write_bytes(np.array([SHARD_MAGIC, SHARD_VERSION, 0], dtype="<i4").tobytes())
    with pytest.raises(ShardError, match=f"{path}: file is 12 bytes, shorter than the {HEADER_BYTES}-byte header"):
        read_shard_header(path)


def test_missing_file(tmp_path):
    path = tmp_path / "nope.bin"
    with pytest.raises(ShardError, match="cannot read shard") as e:
        read_shard_header(path)
    assert str(path) in str(e.value)


@pytest.mark.parametrize("tokens", [[], [0], [0, 65535, 50256, 1, 65534], np.arange(2**16)], ids=["empty", "zero", "edges", "all"])
def test_read_returns_exactly_what_was_written(tmp_path, tokens):
    path = tmp_path / "s.bin"
    write_shard(path, np.asarray(tokens, dtype=np.int64))
    assert read_shard_header(path) == len(tokens)
    got = load_shard(path)
    assert got.dtype == torch.uint16
    np.testing.assert_array_equal(got.numpy(), np.asarray(tokens, dtype=np.uint16))
    assert not path.with_name("s.bin.tmp").exists()


def test_write_rejects_tokens_outside_uint16(tmp_path):
    for bad in ([65536], [-1]):
        with pytest.raises(ValueError, match="uint16"):
            write_shard(tmp_path / "s.bin", bad)


# -----------------------------------------------------------------------------
# data/tokenize_text.py (needs tiktoken's GPT-2 files, which cannot be downloaded here)

DOCS = ["Hello world", "Second document.\nIt has two lines and <|endoftext|> as plain text.",
        "Ünïcödé ✓ 日本語", "", "x"]


@pytest.fixture
def gpt2(monkeypatch):
    if not TIKTOKEN_CACHE.is_dir():
        pytest.skip(f"tiktoken's GPT-2 BPE files are not at {TIKTOKEN_CACHE} (offline, tiktoken cannot fetch them)")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(TIKTOKEN_CACHE))
    return tokenize_text.load_gpt2()


def split_documents(tokens: np.ndarray, enc) -> list[str]:
    assert tokens[0] == train_gpt.BOS_ID, "every stream starts with a document"
    starts = np.flatnonzero(tokens == train_gpt.BOS_ID)
    return [enc.decode(doc[1:].tolist()) for doc in np.split(tokens, starts[1:])]


@pytest.mark.parametrize("workers", [1, 2])
def test_tokenize_round_trip(tmp_path, gpt2, workers):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_text("".join(json.dumps({"text": d, "id": i}) + "\n" for i, d in enumerate(DOCS)) + "\n")
    (src / "b.txt").write_text("A whole file\nis one document.\n")
    out = tmp_path / "out"
    paths = tokenize_text.tokenize([src], out, "t", shard_tokens=7, val_tokens=5, workers=workers, chunksize=2)

    names = [p.name for p in paths]
    assert names[0] == "t_val_000000.bin" and names[1:] == [f"t_train_{i:06d}.bin" for i in range(1, len(names))]
    assert all(read_shard_header(p) == 7 for p in paths[1:-1]) and 0 < read_shard_header(paths[-1]) <= 7
    val = shard_tokens(paths[:1])
    assert len(val) > 5 and split_documents(val, gpt2) == DOCS[:2], "whole documents, at least val_tokens + 1"
    assert split_documents(shard_tokens(paths), gpt2) == DOCS + ["A whole file\nis one document.\n"]


def test_tokenize_line_docs_and_no_val(tmp_path, gpt2):
    (tmp_path / "lines.txt").write_text("first line\n\nsecond line\n")
    paths = tokenize_text.tokenize([tmp_path / "lines.txt"], tmp_path / "out", "l", line_docs=True, workers=1)
    assert [p.name for p in paths] == ["l_train_000001.bin"]
    assert split_documents(shard_tokens(paths), gpt2) == ["first line", "second line"]


def test_tokenize_refuses_to_mix_with_old_shards(tmp_path, gpt2):
    (tmp_path / "d.txt").write_text("doc")
    tokenize_text.tokenize([tmp_path / "d.txt"], tmp_path, "p", workers=1)
    with pytest.raises(FileExistsError, match="already holds p_"):
        tokenize_text.tokenize([tmp_path / "d.txt"], tmp_path, "p", workers=1)


def test_tokenize_input_errors(tmp_path, gpt2):
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{"body": "no text field"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not a JSON object with a 'text' field"):
        tokenize_text.tokenize([tmp_path / "bad.jsonl"], tmp_path / "o1", "p", workers=1)
    (tmp_path / "small.txt").write_text("tiny")
    with pytest.raises(ValueError, match="fewer than --val_tokens"):
        tokenize_text.tokenize([tmp_path / "small.txt"], tmp_path / "o2", "p", val_tokens=1000, workers=1)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        tokenize_text.tokenize([tmp_path / "missing.txt"], tmp_path / "o3", "p", workers=1)


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
    assert [read_shard_header(p) for p in paths] == [100_000] * 3 + [20_000]
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
    assert read_shard_header(paths[0]) == 100_000
    assert paths[1].stat().st_ino == inode[paths[1]]
    synthetic.generate(tmp_path, **SMALL, force=True)
    assert all(p.stat().st_ino != inode[p] for p in paths[1:])


def test_synthetic_refuses_stale_extra_shards(tmp_path):
    synthetic.generate(tmp_path, **SMALL)
    with pytest.raises(FileExistsError, match="synthetic_train_000002.bin"):
        synthetic.generate(tmp_path, **{**SMALL, "train_shards": 2})


# -----------------------------------------------------------------------------
# data/download.py (the hub call is replaced; nothing leaves this machine)

def fake_hub(calls, fail_on=None):
    def hf_hub_download(repo_id, filename, repo_type, local_dir):
        calls.append(filename)
        assert (repo_id, repo_type) == ("kjj0/fineweb10B-gpt2", "dataset")
        if filename == fail_on:
            raise ConnectionError("Failed to resolve 'huggingface.co'")
        write_shard(Path(local_dir) / filename, np.arange(5))
        return str(Path(local_dir) / filename)
    return hf_hub_download


def test_download_skips_valid_and_refetches_invalid(tmp_path, monkeypatch, capsys):
    write_shard(tmp_path / "fineweb_val_000000.bin", np.arange(3))
    raw_shard(tmp_path / "fineweb_train_000001.bin", [SHARD_MAGIC, SHARD_VERSION, 100], [1, 2])  # cut off
    calls = []
    monkeypatch.setattr(download, "hf_hub_download", fake_hub(calls))
    paths = download.download(2, tmp_path)
    assert calls == ["fineweb_train_000001.bin", "fineweb_train_000002.bin"]
    assert [p.name for p in paths] == ["fineweb_val_000000.bin", "fineweb_train_000001.bin", "fineweb_train_000002.bin"]
    assert [read_shard_header(p) for p in paths] == [3, 5, 5]
    assert "[1/3] fineweb_val_000000.bin: present" in capsys.readouterr().out
    calls.clear()
    download.download(2, tmp_path)
    assert calls == []


def test_download_unreachable_hub_exits_with_instructions(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(download, "hf_hub_download", fake_hub(calls, fail_on="fineweb_train_000002.bin"))
    with pytest.raises(SystemExit) as e:
        download.main(["3", "--out", str(tmp_path)])
    message = str(e.value.code)  # a string code: printed to stderr, exit status 1
    assert "could not fetch fineweb_train_000002.bin" in message and "ConnectionError" in message
    assert "run the same command again" in message and str(tmp_path) in message
    assert calls == ["fineweb_val_000000.bin", "fineweb_train_000001.bin", "fineweb_train_000002.bin"]
    assert (tmp_path / "fineweb_train_000001.bin").exists()  # what arrived is kept for the retry
