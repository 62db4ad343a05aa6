"""Tokenize text into GPT-2 token shards in the FineWeb .bin format, for training on other data.

Input files, in the order given (a folder: its *.jsonl, *.txt files, sorted, recursively):
  *.jsonl  one JSON object per line; the document is its "text" field (--text_field), a string
  *.txt    the whole file is one document, or each non-empty line is one with --line_docs
           (a file named on the command line with another suffix is read like a .txt)
Every document gets the GPT-2 <|endoftext|> token (50256) in front and is encoded with tiktoken's
`gpt2` encoding as plain text (special-token strings inside documents are not treated specially).
Input must be UTF-8. If tokenizing fails or is interrupted, the shards and folders this run created are
removed again.

Documents longer than --max_doc_tokens N tokens (separator included) are split into several documents of at
most N tokens, each starting with the separator; 0 splits nothing. The default, 2048, is the longest sequence the
recipe trains on: its loader cuts every document at the stage's length (train_gpt.py --stage_seq_lens, at most
2048) and skips the rest, so the tail of a longer document would never be read. A CPU run of run.sh reads
documents in pieces of its own, shorter length (train_gpt.py --max_doc_tokens 128): the same shards serve both.

Output, in --out: <prefix>_val_000000.bin with the first whole documents, at least --val_tokens + 1
tokens (the +1 is the target of the last position; none when --val_tokens is 0), then
<prefix>_train_000001.bin ... with --shard_tokens tokens each (the last one shorter); like FineWeb,
documents continue across train shard boundaries. Train with
  --train_files '<out>/<prefix>_train_*.bin' --val_files '<out>/<prefix>_val_*.bin' --val_tokens N

Offline, tiktoken needs its GPT-2 BPE files in a folder named by TIKTOKEN_CACHE_DIR (one run with
network access caches them).

    python3 data/tokenize_text.py corpus.jsonl --out data/mytext --prefix mytext --val_tokens 1_048_576
    python3 data/tokenize_text.py corpus.jsonl --out data/cpu --prefix cpu --val_tokens 8192   # for run.sh on the CPU
"""
import argparse
import json
import os
import re
import signal
import sys
from contextlib import contextmanager
from itertools import chain
from multiprocessing import Pool
from pathlib import Path

import numpy as np
import tiktoken

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: the repository root, for data/ and harness/
from data.shards import MAX_TOKENS, write_shard  # noqa: E402
from harness import cli  # noqa: E402
from harness.cli import UserError  # noqa: E402
from harness.files import check_output_folder, make_output_folder  # noqa: E402

INPUT_SUFFIXES = (".jsonl", ".txt")
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
RECIPE_SEQ_LEN = 2048  # the longest of train_gpt.py's --stage_seq_lens: the recipe reads no document past it


def input_files(inputs) -> list[Path]:
    files = []
    for name in map(Path, inputs):
        if name.is_dir():
            files += sorted(p for p in name.rglob("*") if p.suffix in INPUT_SUFFIXES and p.is_file())
        elif name.is_file():
            files.append(name)
        elif name.exists():
            raise UserError(f"input {name} is neither a file nor a folder; name .jsonl/.txt files or folders of them")
        else:
            raise UserError(f"input {name} does not exist; check the path")
    if not files:
        raise UserError(f"no {'/'.join(INPUT_SUFFIXES)} files in {', '.join(map(str, inputs))}; name the files "
                        "themselves or folders that hold such files")
    return files


def read_documents(files, text_field="text", line_docs=False):
    """Yield each document's text, in input order."""
    for path in files:
        try:
            yield from _file_documents(path, text_field, line_docs)
        except UnicodeDecodeError:
            raise _not_utf8_error(path) from None


def _file_documents(path: Path, text_field: str, line_docs: bool):
    # utf-8-sig: a byte-order mark some editors write at the start is not text
    if path.suffix == ".jsonl":
        with open(path, encoding="utf-8-sig") as f:
            for line_no, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    text = json.loads(line)[text_field]
                except (ValueError, KeyError, TypeError, RecursionError) as e:  # ValueError: bad JSON, huge ints
                    raise UserError(f"{path}:{line_no}: not a JSON object with a {text_field!r} field ({e}); fix the "
                                    "line, or name the field holding the text with --text_field") from None
                if not isinstance(text, str):
                    raise UserError(f"{path}:{line_no}: the {text_field!r} field is {json.dumps(text)[:40]}, not a "
                                    "string; give every line its document's text as a string, or drop the line")
                yield text
    elif line_docs:
        with open(path, encoding="utf-8-sig") as f:
            yield from (line.rstrip("\n") for line in f if line.strip())
    else:
        yield path.read_text(encoding="utf-8-sig")


def _not_utf8_error(path: Path) -> UserError:
    """Name the first line that is not UTF-8: the decoder's error position counts from its read buffer, not the file.
    Lines can be decoded one by one because no UTF-8 sequence contains the newline byte."""
    location, detail = str(path), ""
    with open(path, "rb") as f:
        for line_no, line in enumerate(f, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as e:
                location, detail = f"{path}:{line_no}", f" (byte {line[e.start]:#04x} at column {e.start + 1})"
                break
    return UserError(f"{location}: not UTF-8{detail}; convert the file to UTF-8 first, "
                     "e.g. with iconv -f <its encoding> -t utf-8")


def load_gpt2() -> tiktoken.Encoding:
    try:
        return tiktoken.get_encoding("gpt2")
    except Exception as e:  # tiktoken raises whatever its download raised (requests, hash mismatch, disk)
        cache = os.environ.get("TIKTOKEN_CACHE_DIR")
        where = f"TIKTOKEN_CACHE_DIR ({cache})" if cache else "tiktoken's cache (TIKTOKEN_CACHE_DIR is not set)"
        raise UserError(f"cannot load tiktoken's gpt2 encoding: its BPE files are not in {where} and downloading "
                        f"them failed ({type(e).__name__}); set TIKTOKEN_CACHE_DIR to a folder holding the GPT-2 "
                        "BPE files, or run once with network access to cache them") from None


def split_document(tokens: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """A document (separator first) as documents of at most max_tokens tokens (0: any), each starting with the
    separator."""
    if not max_tokens or len(tokens) <= max_tokens:
        return [tokens]
    body, step = tokens[1:], max_tokens - 1
    return [np.concatenate([tokens[:1], body[i:i + step]]) for i in range(0, len(body), step)]


_encoding, _max_doc_tokens = None, 0  # one per worker process


def _init_worker(encoding: tiktoken.Encoding, max_doc_tokens: int):
    global _encoding, _max_doc_tokens
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: no traceback per worker
    _encoding = encoding  # gpt2 pickles by name: the worker looks it up in tiktoken's registry or cache
    _max_doc_tokens = max_doc_tokens


def _encode(text: str) -> list[np.ndarray]:
    tokens = np.array([_encoding.eot_token] + _encoding.encode_ordinary(text), dtype=np.uint16)
    return split_document(tokens, _max_doc_tokens)


def tokenize(inputs, out, prefix, shard_tokens=100_000_000, val_tokens=0, text_field="text", line_docs=False,
             workers=None, chunksize=64, verbose=False, encoding=None, max_doc_tokens=RECIPE_SEQ_LEN) -> list[Path]:
    """Tokenize the documents of `inputs` into shards in `out`; return the shard paths in order.

    `encoding` is a tiktoken.Encoding whose <|endoftext|> token (eot_token) starts every document;
    the default is GPT-2's. max_doc_tokens: split longer documents (0: never).
    """
    if shard_tokens < 1 or val_tokens < 0 or max_doc_tokens == 1 or max_doc_tokens < 0:
        raise ValueError("shard_tokens must be >= 1, val_tokens >= 0 and max_doc_tokens 0 or >= 2")
    if not PLAIN_NAME.fullmatch(prefix):  # a '/' or '..' would write outside --out
        raise UserError(f"--prefix {prefix!r} must be a plain file name (letters, digits, '.', '_', '-'); "
                        "--out sets the folder")
    out = check_output_folder(out, "--out")
    existing = sorted(out.glob(f"{prefix}_*.bin"))
    if existing:  # mixing old and new shards under one glob would silently change the data
        raise UserError(f"{out} already holds {prefix}_*.bin shards ({existing[0].name} ...); "
                        "delete them or choose another --prefix or --out")
    files = input_files(inputs)
    if line_docs and all(f.suffix == ".jsonl" for f in files):
        raise UserError("--line_docs splits .txt files into lines, but every input is .jsonl, whose lines are "
                        "documents already; drop it (--max_doc_tokens N splits long documents)")
    encoding = load_gpt2() if encoding is None else encoding  # fail here, before anything is written

    paths = []

    def write(name, tokens):
        paths.append(out / name)  # before writing, so that a failed write is cleaned up too
        write_shard(out / name, tokens)
        if verbose:
            print(f"{out / name}: {len(tokens):,} tokens", flush=True)

    val_docs, val_size = [], 0  # whole documents, so that no document is split between val and train
    writing_val = val_tokens > 0
    buffer, filled, train_index = np.empty(shard_tokens, dtype=np.uint16), 0, 1
    num_docs = total = 0
    with _removed_on_failure(out, paths), Pool(workers, initializer=_init_worker,
                                               initargs=(encoding, max_doc_tokens)) as pool:
        # imap keeps input order, so the shards are the same for any number of workers
        for doc in chain.from_iterable(pool.imap(_encode, read_documents(files, text_field, line_docs),
                                                 chunksize=chunksize)):
            num_docs, total = num_docs + 1, total + len(doc)
            if writing_val:
                val_docs.append(doc)
                val_size += len(doc)
                if val_size > val_tokens:
                    write(f"{prefix}_val_000000.bin", np.concatenate(val_docs))
                    writing_val = False
                continue
            while len(doc):  # a document may continue in the next train shard
                take = min(len(doc), shard_tokens - filled)
                buffer[filled:filled + take] = doc[:take]
                filled += take
                doc = doc[take:]
                if filled == shard_tokens:
                    write(f"{prefix}_train_{train_index:06d}.bin", buffer)
                    filled, train_index = 0, train_index + 1
        if total == num_docs:  # separators only
            raise UserError(f"no text in {', '.join(map(str, inputs))} ({num_docs:,} documents, all empty); "
                            "check the inputs (and --text_field)")
        if writing_val:
            raise UserError(f"the input has only {val_size:,} tokens, fewer than --val_tokens {val_tokens:,} + 1; "
                            "lower --val_tokens or add text")
        if filled:
            write(f"{prefix}_train_{train_index:06d}.bin", buffer[:filled])
    return paths


@contextmanager
def _removed_on_failure(out: Path, shards: list[Path]):
    """Create the folder `out`, check that it takes files; if the block fails (Ctrl-C too), remove `shards` and the
    folders created here, nothing else."""
    new_folders = [folder for folder in (out, *out.parents) if not folder.exists()]  # deepest first
    try:
        make_output_folder(out)
        yield
    except BaseException:  # a partial set of shards would make the rerun refuse this prefix
        for path in shards:
            path.unlink(missing_ok=True)
        for folder in new_folders:
            try:
                folder.rmdir()
            except OSError:  # not empty (something else wrote there meanwhile) or never made: keep it and its parents
                break
        raise


@cli.program
def main(argv=None):
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="+", help=".jsonl / .txt files or folders of them")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--prefix", required=True, help="shard name prefix, e.g. 'mytext' for mytext_train_000001.bin")
    parser.add_argument("--shard_tokens", type=cli.whole(1, MAX_TOKENS), default=100_000_000,
                        help="tokens per train shard (default: %(default)s)")
    parser.add_argument("--val_tokens", type=cli.whole(0, MAX_TOKENS - 1), default=0,
                        help="tokens for the val shard; 0 writes none (default: %(default)s)")
    parser.add_argument("--text_field", default="text", help="JSON field holding a .jsonl document (default: %(default)s)")
    parser.add_argument("--line_docs", action="store_true", help="in .txt files, each non-empty line is a document")
    parser.add_argument("--max_doc_tokens", type=cli.whole(0), default=RECIPE_SEQ_LEN,
                        help="split documents longer than this many tokens (separator included) into several; 0: "
                             "never (default: %(default)s, the longest sequence the recipe trains on)")
    cores = os.cpu_count() or 1
    parser.add_argument("--workers", type=cli.whole(1, cores), default=cores,
                        help="tokenizer processes, at most one per core (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.max_doc_tokens == 1:
        parser.error("--max_doc_tokens 1 leaves no room for text after the separator; give 0 (never split) or 2 or more")
    paths = tokenize(args.inputs, args.out, args.prefix, args.shard_tokens, args.val_tokens, args.text_field,
                     args.line_docs, args.workers, verbose=True, max_doc_tokens=args.max_doc_tokens)
    print(f"{len(paths)} shards written to {args.out}")


if __name__ == "__main__":
    main()
