"""Download FineWeb10B GPT-2 token shards from the Hugging Face hub.

Fetches fineweb_val_000000.bin and fineweb_train_000001.bin ... fineweb_train_<N>.bin (100M tokens,
200 MB each) from the dataset repo kjj0/fineweb10B-gpt2. Shards already present with a valid
header and size are skipped, so an interrupted download resumes where it stopped.

How much the record needs: its 1490 steps (483 x 131,072 + 484 x 262,144 + 523 x 393,216 tokens)
train on 395.8M tokens. Batches start at a document boundary and cut documents at the stage's
sequence length, which skips ~5% more (~415M tokens read; estimated on Wikipedia documents of
FineWeb-like lengths), so 5 train shards are the minimum; the default 8 leaves room for longer runs.

    python3 data/download.py        # val + 8 train shards (1.8 GB) into data/fineweb10B/
    python3 data/download.py 5      # the minimum for one record run
"""
import argparse
import sys
from contextlib import contextmanager
from pathlib import Path

from huggingface_hub import hf_hub_download
from huggingface_hub.utils import LocalEntryNotFoundError
from huggingface_hub.utils import logging as hub_logging

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: the repository root, for data.shards
from data.shards import ShardError, read_header  # noqa: E402

HUB_REPO = "kjj0/fineweb10B-gpt2"
DEFAULT_TRAIN_SHARDS = 8


def shard_names(num_train_shards: int) -> list[str]:
    return ["fineweb_val_000000.bin"] + [f"fineweb_train_{i:06d}.bin" for i in range(1, num_train_shards + 1)]


def download(num_train_shards: int = DEFAULT_TRAIN_SHARDS, out=REPO_ROOT / "data" / "fineweb10B",
             repo_id: str = HUB_REPO) -> list[Path]:
    """Make sure `out` holds valid copies of the val shard and the first train shards; return their paths.

    Exits (SystemExit, non-zero) with what failed and how to retry when a file cannot be fetched.
    """
    out = Path(out)
    names = shard_names(num_train_shards)
    paths = []
    for i, name in enumerate(names, 1):
        path = out / name
        progress = f"[{i}/{len(names)}] {name}"
        if path.exists():
            try:
                num_tokens = read_header(path)
            except ShardError as e:
                print(f"{progress}: invalid ({e}); fetching it again")
                path.unlink()
            else:
                print(f"{progress}: present, {num_tokens:,} tokens, skipped")
                paths.append(path)
                continue
        print(f"{progress}: downloading from {repo_id}", flush=True)
        try:
            # hf_hub_download keeps partial files under out/.cache and resumes them on the next call.
            with _quiet_hub_logging():
                fetched = Path(hf_hub_download(repo_id=repo_id, filename=name, repo_type="dataset", local_dir=out))
        except Exception as e:  # the hub client raises many types (connection, HTTP, offline mode, disk)
            # offline, the client raises LocalEntryNotFoundError: the hub did not answer and no cached copy exists
            problem = ("the Hugging Face hub is unreachable" if isinstance(e, LocalEntryNotFoundError)
                       else f"{type(e).__name__}: {' '.join(str(e).split())}")
            sys.exit(f"download.py: could not fetch {name} from the Hugging Face dataset {repo_id}: {problem}. "
                     "Rerun with network access (valid files are skipped, partial downloads resume; HF_ENDPOINT "
                     f"selects a mirror), or copy {names[0]} and the train shards up to {names[-1]} into {out}/, "
                     "or train on other shards with train_gpt.py --train_files/--val_files")
        try:
            read_header(fetched)
        except ShardError as e:
            sys.exit(f"download.py: the downloaded {name} is not a valid shard ({e}); delete it and rerun")
        paths.append(fetched)
    return paths


@contextmanager
def _quiet_hub_logging():
    """Hide the hub client's warnings (offline, one 'Retrying in Ns' line per attempt): download() reports a failure.
    Its progress bars stay, for the minutes a 200 MB shard takes."""
    verbosity = hub_logging.get_verbosity()
    hub_logging.set_verbosity_error()
    try:
        yield
    finally:
        hub_logging.set_verbosity(verbosity)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("num_train_shards", nargs="?", type=int, default=DEFAULT_TRAIN_SHARDS,
                        help="train shards to fetch, 100M tokens each (default: %(default)s; the record needs 5)")
    parser.add_argument("--out", default=str(REPO_ROOT / "data" / "fineweb10B"), help="output folder (default: %(default)s)")
    parser.add_argument("--repo_id", default=HUB_REPO, help="Hugging Face dataset repo (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.num_train_shards < 1:
        parser.error("num_train_shards must be at least 1")
    paths = download(args.num_train_shards, args.out, args.repo_id)
    print(f"{len(paths)} shards ready in {args.out}")


if __name__ == "__main__":
    main()
