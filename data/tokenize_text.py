"""Tokenize text into GPT-2 token shards in the FineWeb .bin format, for training on other data.

Input files, in the order given (a folder: its *.jsonl, *.txt files, sorted, recursively):
  *.jsonl  one JSON object per line; the document is its "text" field (--text_field)
  *.txt    the whole file is one document, or each non-empty line is one with --line_docs
           (a file named on the command line with another suffix is read like a .txt)
Every document gets the GPT-2 <|endoftext|> token (50256) in front and is encoded with tiktoken's
`gpt2` encoding as plain text (special-token strings inside documents are not treated specially).

Output, in --out: <prefix>_val_000000.bin with the first whole documents, at least --val_tokens + 1
tokens (the +1 is the target of the last position; none when --val_tokens is 0), then
<prefix>_train_000001.bin ... with --shard_tokens tokens each (the last one shorter); like FineWeb,
documents continue across train shard boundaries. Train with
  --train_files '<out>/<prefix>_train_*.bin' --val_files '<out>/<prefix>_val_*.bin' --val_tokens N

Offline, tiktoken needs its GPT-2 BPE files in a folder named by TIKTOKEN_CACHE_DIR.

    python3 data/tokenize_text.py corpus.jsonl --out data/mytext --prefix mytext --val_tokens 1_048_576
"""
import argparse
import json
import os
import sys
from multiprocessing import Pool
from pathlib import Path

import numpy as np
import tiktoken

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # for train_gpt's shard functions
from train_gpt import BOS_ID, write_shard  # noqa: E402

INPUT_SUFFIXES = (".jsonl", ".txt")


def input_files(inputs) -> list[Path]:
    files = []
    for name in map(Path, inputs):
        if name.is_dir():
            files += sorted(p for p in name.rglob("*") if p.suffix in INPUT_SUFFIXES and p.is_file())
        elif name.is_file():
            files.append(name)
        else:
            raise FileNotFoundError(f"input {name} does not exist")
    if not files:
        raise FileNotFoundError(f"no {'/'.join(INPUT_SUFFIXES)} files in {', '.join(map(str, inputs))}")
    return files


def read_documents(files, text_field="text", line_docs=False):
    """Yield each document's text, in input order."""
    for path in files:
        if path.suffix == ".jsonl":
            with open(path, encoding="utf-8") as f:
                for line_no, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        yield json.loads(line)[text_field]
                    except (json.JSONDecodeError, KeyError, TypeError) as e:
                        raise ValueError(f"{path}:{line_no}: not a JSON object with a {text_field!r} field ({e})") from None
        elif line_docs:
            with open(path, encoding="utf-8") as f:
                yield from (line.rstrip("\n") for line in f if line.strip())
        else:
            yield path.read_text(encoding="utf-8")


def load_gpt2():
    try:
        return tiktoken.get_encoding("gpt2")
    except Exception as e:  # offline, tiktoken fails while fetching its BPE files
        raise RuntimeError(f"cannot load tiktoken's gpt2 encoding ({type(e).__name__}: {e}); offline, set "
                           "TIKTOKEN_CACHE_DIR to a folder holding its cached BPE files") from None


_encoding = None  # one per worker process


def _init_worker():
    global _encoding
    _encoding = load_gpt2()


def _encode(text: str) -> np.ndarray:
    return np.array([BOS_ID] + _encoding.encode_ordinary(text), dtype=np.uint16)


def tokenize(inputs, out, prefix, shard_tokens=100_000_000, val_tokens=0, text_field="text", line_docs=False,
             workers=None, chunksize=64, verbose=False) -> list[Path]:
    """Tokenize the documents of `inputs` into shards in `out`; return the shard paths in order."""
    if shard_tokens < 1 or val_tokens < 0:
        raise ValueError("shard_tokens must be >= 1 and val_tokens >= 0")
    out = Path(out)
    existing = sorted(out.glob(f"{prefix}_*.bin"))
    if existing:  # mixing old and new shards under one glob would silently change the data
        raise FileExistsError(f"{out} already holds {prefix}_*.bin shards ({existing[0].name} ...); "
                              "delete them or choose another --prefix or --out")
    files = input_files(inputs)
    load_gpt2()  # fail here, with the message above, rather than in every worker
    out.mkdir(parents=True, exist_ok=True)

    paths = []

    def write(name, tokens):
        write_shard(out / name, tokens)
        paths.append(out / name)
        if verbose:
            print(f"{out / name}: {len(tokens):,} tokens", flush=True)

    val_docs, val_size = [], 0  # whole documents, so that no document is split between val and train
    writing_val = val_tokens > 0
    buffer, filled, train_index = np.empty(shard_tokens, dtype=np.uint16), 0, 1
    with Pool(workers, initializer=_init_worker) as pool:
        # imap keeps input order, so the shards are the same for any number of workers
        for doc in pool.imap(_encode, read_documents(files, text_field, line_docs), chunksize=chunksize):
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
    if writing_val:
        raise ValueError(f"the input has only {val_size:,} tokens, fewer than --val_tokens {val_tokens:,} + 1")
    if filled:
        write(f"{prefix}_train_{train_index:06d}.bin", buffer[:filled])
    return paths


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="+", help=".jsonl / .txt files or folders of them")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--prefix", required=True, help="shard name prefix, e.g. 'mytext' for mytext_train_000001.bin")
    parser.add_argument("--shard_tokens", type=int, default=100_000_000, help="tokens per train shard (default: %(default)s)")
    parser.add_argument("--val_tokens", type=int, default=0, help="tokens for the val shard; 0 writes none (default: %(default)s)")
    parser.add_argument("--text_field", default="text", help="JSON field holding a .jsonl document (default: %(default)s)")
    parser.add_argument("--line_docs", action="store_true", help="in .txt files, each non-empty line is a document")
    parser.add_argument("--workers", type=int, default=os.cpu_count(), help="tokenizer processes (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        paths = tokenize(args.inputs, args.out, args.prefix, args.shard_tokens, args.val_tokens, args.text_field,
                         args.line_docs, args.workers, verbose=True)
    except (ValueError, OSError, RuntimeError) as e:
        sys.exit(f"tokenize_text.py: {e}")
    print(f"{len(paths)} shards written to {args.out}")


if __name__ == "__main__":
    main()
