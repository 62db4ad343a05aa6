"""Shard format section (placeholder while the full script is written)."""
import os
from pathlib import Path

import numpy as np
import torch

# -----------------------------------------------------------------------------
# Token shards: 256 int32 header [magic, version, num_tokens, 0...] then num_tokens uint16 tokens

SHARD_MAGIC = 20240520
SHARD_VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
BOS_ID = 50256  # GPT-2 <|endoftext|>, placed before every document


class ShardError(ValueError):
    """A token shard is missing, truncated or has a bad header."""


def read_shard_header(path) -> int:
    """Validate the header of a .bin shard and return its token count."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as e:
        raise ShardError(f"{path}: cannot read shard ({e.strerror})") from None
    if size < HEADER_BYTES:
        raise ShardError(f"{path}: file is {size} bytes, shorter than the {HEADER_BYTES}-byte header; "
                         "the download was probably cut off - delete it and fetch it again")
    header = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
    if header[0] != SHARD_MAGIC:
        raise ShardError(f"{path}: bad magic number {header[0]} (expected {SHARD_MAGIC}); "
                         "not a token shard in the FineWeb .bin format")
    if header[1] != SHARD_VERSION:
        raise ShardError(f"{path}: unsupported shard version {header[1]} (expected {SHARD_VERSION})")
    num_tokens = int(header[2])
    expected = HEADER_BYTES + 2 * num_tokens
    if num_tokens < 0 or size != expected:
        raise ShardError(f"{path}: header claims {num_tokens} tokens ({expected} bytes) but the file has "
                         f"{size} bytes; the file is truncated or corrupt - delete it and fetch it again")
    return num_tokens


def load_shard(path) -> torch.Tensor:
    """Read all tokens of a validated shard into a uint16 CPU tensor."""
    num_tokens = read_shard_header(path)
    tokens = torch.empty(num_tokens, dtype=torch.uint16, pin_memory=torch.cuda.is_available())
    with open(path, "rb", buffering=0) as f:
        f.seek(HEADER_BYTES)
        nbytes = f.readinto(tokens.numpy())  # straight into the (pinned) tensor, no extra copy
    if nbytes != 2 * num_tokens:
        raise ShardError(f"{path}: read {nbytes} bytes of tokens, expected {2 * num_tokens}")
    return tokens


def write_shard(path, tokens) -> None:
    """Write tokens (any integer array with values < 2**16) as a .bin shard, atomically."""
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() >= 2**16):
        raise ValueError("token ids must fit in uint16")
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:3] = SHARD_MAGIC, SHARD_VERSION, tokens.size
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u2").tobytes())
    os.replace(tmp, path)  # a crash never leaves a half-written shard under the real name
