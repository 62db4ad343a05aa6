"""The token-shard format and its checks: the one owner of the file format, numpy only, so that the data tools
use it without torch.

A shard is a header of 256 little-endian int32 [magic 20240520, version 1, token count, 0, ...] followed by the
tokens as little-endian uint16: the format of the FineWeb GPT-2 shards (kjj0/fineweb10B-gpt2, from llm.c).
Every document starts with the separator token (`bos_id`, GPT-2's <|endoftext|>).
"""
import glob
import hashlib
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from harness.cli import UserError
from harness.files import atomic_write

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
MAX_TOKENS = 2**31 - 1  # the header's int32 count


def read_header(path) -> int:
    """Validate the header of a .bin shard against its size and return its token count."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as e:
        raise UserError(f"{path}: cannot read shard ({e.strerror})") from None
    if not path.is_file():
        raise UserError(f"{path}: not a file; name a .bin shard")
    if size < HEADER_BYTES:
        raise UserError(f"{path}: file is {size} bytes, shorter than the {HEADER_BYTES}-byte header; "
                        "the download was probably cut off - delete it and fetch it again")
    header = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
    if header[0] != MAGIC:
        raise UserError(f"{path}: bad magic number {header[0]} (expected {MAGIC}); "
                        "not a token shard in the FineWeb .bin format")
    if header[1] != VERSION:
        raise UserError(f"{path}: unsupported shard version {header[1]} (expected {VERSION})")
    num_tokens = int(header[2])
    expected = HEADER_BYTES + 2 * num_tokens
    if num_tokens < 0 or size != expected:
        raise UserError(f"{path}: header claims {num_tokens} tokens ({expected} bytes) but the file has "
                        f"{size} bytes; the file is truncated or corrupt - delete it and fetch it again")
    return num_tokens


def read_tokens(path, out: np.ndarray | None = None) -> np.ndarray:
    """All tokens of a shard as uint16, read straight into `out` (e.g. pinned memory) when given."""
    num_tokens = read_header(path)
    if out is None:
        out = np.empty(num_tokens, dtype=np.uint16)
    assert out.dtype == np.uint16 and out.shape == (num_tokens,), "out must be a uint16 array of the shard's length"
    with open(path, "rb", buffering=0) as f:
        f.seek(HEADER_BYTES)
        nbytes = f.readinto(out)
    if nbytes != 2 * num_tokens:
        raise UserError(f"{path}: read {nbytes} bytes of tokens, expected {2 * num_tokens}")
    return out


def memmap_tokens(path) -> np.ndarray:
    """A shard's tokens, memory-mapped (nothing is read until used)."""
    return np.memmap(path, dtype="<u2", mode="r", offset=HEADER_BYTES, shape=(read_header(path),))


def write_shard(path, tokens) -> None:
    """Write tokens (any integer array with values < 2**16) as a .bin shard, atomically (harness/files.atomic_write)."""
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() >= 2**16):
        raise ValueError("token ids must fit in uint16")
    if tokens.size > MAX_TOKENS:
        raise ValueError(f"a shard holds at most {MAX_TOKENS:,} tokens (its header's count is an int32)")
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:3] = MAGIC, VERSION, tokens.size

    def write(f):
        f.write(header.tobytes())
        f.write(tokens.astype("<u2").tobytes())
    atomic_write(path, write)


def find_shards(pattern: str, what: str) -> list[Path]:
    """The files matching --{what}_files, in name order; none, or a folder among them, is an error. A folder that
    exists as written is taken literally: `run[1]/*.bin` means that folder, not `run1/`."""
    folder, name = os.path.split(pattern)
    literal = folder and os.path.isdir(folder)
    files = sorted(Path(f) for f in glob.glob(os.path.join(glob.escape(folder), name) if literal else pattern))
    if not files:
        fix = (f"download them with `python3 data/download.py`, or point --{what}_files at your .bin shards"
               if "fineweb10B" in pattern else  # the default FineWeb glob
               f"the folder {folder!r} does not exist" if folder and not os.path.isdir(folder) else
               "check the file names and the glob's quotes (an unquoted * is expanded by the shell)")
        raise UserError(f"no {what} shards match {pattern!r}; {fix}")
    for f in files:
        if not f.is_file():
            raise UserError(f"--{what}_files {pattern!r} matches {f}, which is not a file; give a glob of .bin "
                            f"shards, e.g. '{f}/*.bin'")
    return files


def _check_ids(path, tokens: np.ndarray, vocab_size: int):
    if tokens.size and int(tokens.max()) >= vocab_size:
        raise UserError(f"{path}: token id {int(tokens.max())} >= vocab_size {vocab_size}; "
                        "was it tokenized for another vocabulary? (set --vocab_size/--bos_id)")


def checksum(tokens: np.ndarray) -> int:
    """CRC-32 of tokens (a shard's, memory-mapped): an edit that keeps sizes and headers shows. Of the checks tried on
    1 GB of tokens in memory, the cheapest: 0.15 s on one core, against SHA-256's 0.50 s and BLAKE2b's 0.73 s (the
    scan's search for separators took 1.2 s). Not against tampering: against edits and mix-ups."""
    return zlib.crc32(tokens)


def scan_shard(path, bos_id: int, vocab_size: int) -> tuple[np.ndarray, int, int]:
    """Check a shard's header and token ids, memory-mapped: (the positions of its document separators, its token
    count, checksum)."""
    tokens = memmap_tokens(path)
    _check_ids(path, tokens, vocab_size)
    return np.flatnonzero(tokens == bos_id), tokens.size, checksum(tokens)


def scan_train_shards(pattern: str, bos_id: int,
                      vocab_size: int) -> tuple[dict[Path, np.ndarray], list[int], dict[Path, int]]:
    """Every train shard checked (in parallel) and indexed, in name order: ({path: separator positions}, token
    counts, {path: checksum of its tokens})."""
    files = find_shards(pattern, "train")
    with ThreadPoolExecutor(max_workers=min(8, len(files))) as pool:  # numpy and zlib let go of the GIL
        scans = dict(zip(files, pool.map(lambda f: scan_shard(f, bos_id, vocab_size), files)))
    for f, (bos, _, _) in scans.items():
        if bos.size == 0:
            raise UserError(f"{f}: no document separator (token {bos_id}) in the shard: every document must start "
                            "with one; check --bos_id, or tokenize with data/tokenize_text.py")
    bos, sizes, checksums = zip(*scans.values())
    return dict(zip(files, bos)), list(sizes), dict(zip(files, checksums))


def check_val_shards(pattern: str, num_tokens: int, vocab_size: int) -> dict[Path, int]:
    """The validation shards that hold the first `num_tokens` tokens, with those tokens' ids checked:
    {path: checksum of all its tokens} (a whole file's, to compare with the train shards': check_roles)."""
    used, have = {}, 0
    for f in find_shards(pattern, "val"):
        if have >= num_tokens:
            break
        tokens = memmap_tokens(f)
        _check_ids(f, tokens[:num_tokens - have], vocab_size)
        used[f] = checksum(tokens)
        have += min(tokens.size, num_tokens - have)
    if have < num_tokens:
        raise UserError(f"validation shards {pattern!r} hold {have:,} tokens but the run reads {num_tokens:,} "
                        f"(--val_tokens and one more, the last target); lower --val_tokens or add validation data")
    return used


def check_roles(train: dict[Path, int | None], val: dict[Path, int | None]):
    """A file has one role: no validation shard is a train shard, by path (symlinks resolved) or by content (the same
    size and checksum under another name; None: not read yet), else the val loss is of trained-on tokens."""
    paths = {f.resolve(): f for f in train}
    contents = {(f.stat().st_size, crc): f for f, crc in train.items() if crc is not None}
    for f, crc in val.items():
        same = paths.get(f.resolve())
        if twin := same or (crc is not None and contents.get((f.stat().st_size, crc))):
            raise UserError(f"validation shard {f} is {'' if same else 'a copy of '}the train shard {twin}: a val loss "
                            "of trained-on tokens says nothing; give --val_files shards of their own")


def identities(checksums: dict[Path, int]) -> list[str]:
    """Each shard's identity: its name (not its folder: the data may move), size and the checksum of its tokens."""
    return [f"{f.name} ({f.stat().st_size:,} bytes, CRC-32 {crc:08x})" for f, crc in checksums.items()]


def fingerprint(shards: list[str]) -> str:
    """A shard set's identity(), short: checkpoints and captures name the data they were cut from. Shards written anew
    under the same names, or edited, differ."""
    return hashlib.sha256("\n".join(shards).encode()).hexdigest()[:16]
