"""Download FineWeb10B GPT-2 token shards from the Hugging Face hub.

Fetches fineweb_val_000000.bin and fineweb_train_000001.bin ... fineweb_train_<N>.bin (100M tokens,
200 MB each) from the dataset repo kjj0/fineweb10B-gpt2. Shards already present with a valid
header and size are skipped, so an interrupted download resumes where it stopped. Everything is written
inside the output folder: the shards, and the hub client's bookkeeping in <out>/.cache/, which a failed
download removes again unless it holds a partial shard to resume (the error line then says so).

How much the record needs: its 1490 steps (483 x 131,072 + 484 x 262,144 + 523 x 393,216 tokens)
train on 395.8M tokens. Batches start at a document boundary and cut documents at the stage's
sequence length, which skips ~5% more (~415M tokens read; estimated on Wikipedia documents of
FineWeb-like lengths), so 5 train shards are the minimum; the default 8 leaves room for longer runs.

    python3 data/download.py        # val + 8 train shards (1.8 GB) into data/fineweb10B/
    python3 data/download.py 5      # the minimum for one record run
"""
import argparse
import errno
import os
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

from huggingface_hub import constants as hub_constants
from huggingface_hub import hf_hub_download
from huggingface_hub.utils import LocalEntryNotFoundError
from huggingface_hub.utils import logging as hub_logging

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: the repository root, for data/ and harness/
from data.shards import HEADER_BYTES, read_header  # noqa: E402
from harness import cli  # noqa: E402
from harness.cli import UserError  # noqa: E402
from harness.files import check_output_folder, make_output_folder  # noqa: E402

HUB_REPO = "kjj0/fineweb10B-gpt2"
DEFAULT_TRAIN_SHARDS = 8
ALL_TRAIN_SHARDS = 103  # fineweb_train_000001.bin ... fineweb_train_000103.bin
SHARD_BYTES = HEADER_BYTES + 2 * 100_000_000  # about: the val shard and all train shards but the last
# a fetch that failed on these is the disk's fault: its partial file goes, and the line says what to fix there
DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.ENAMETOOLONG}


def shard_names(num_train_shards: int) -> list[str]:
    return ["fineweb_val_000000.bin"] + [f"fineweb_train_{i:06d}.bin" for i in range(1, num_train_shards + 1)]


def download(num_train_shards: int = DEFAULT_TRAIN_SHARDS, out=REPO_ROOT / "data" / "fineweb10B",
             repo_id: str = HUB_REPO) -> list[Path]:
    """Make sure `out` holds valid copies of the val shard and the first train shards; return their paths.

    Raises UserError (or OSError) with what failed and how to retry when a file cannot be fetched; what the hub
    client keeps in out/.cache after a failure is only a partial file to resume, and the message says so.
    """
    out = check_output_folder(out, "--out")
    names = shard_names(num_train_shards)
    if "HF_HUB_DISABLE_XET" not in os.environ:  # the client's setting, unless the user made one; set here, not on import
        # Xet transfers keep a chunk cache (up to 10 GB) and logs under ~/.cache/huggingface; plain HTTP writes only
        # into the output folder
        hub_constants.HF_HUB_DISABLE_XET = True
    make_output_folder(out)  # before minutes of downloading
    valid, invalid = {}, {}  # name: token count / what is wrong with the file there
    for name in names:
        path = out / name
        if path.exists() and not path.is_file():
            raise UserError(f"{path} is a folder, not a shard; move it away and rerun")
        if path.exists():
            try:
                valid[name] = read_header(path)
            except UserError as e:
                invalid[name] = e
    missing, free = len(names) - len(valid), shutil.disk_usage(out).free
    if missing * SHARD_BYTES > free:
        raise UserError(f"{out}: {free / 1e9:.1f} GB free, but the {missing} missing shards need about "
                        f"{missing * SHARD_BYTES / 1e9:.1f} GB; free space, fetch fewer shards or choose another --out")
    cache_existed = (out / ".cache").exists()
    paths = []
    for i, name in enumerate(names, 1):
        path = out / name
        progress = f"[{i}/{len(names)}] {name}"
        if name in valid:
            print(f"{progress}: present, {valid[name]:,} tokens, skipped")
            paths.append(path)
            continue
        if name in invalid:
            print(f"{progress}: invalid ({invalid[name]}); fetching it again")
            path.unlink()
        print(f"{progress}: downloading from {repo_id}", flush=True)
        try:
            # hf_hub_download keeps its bookkeeping in out/.cache (older versions also a partial file to resume)
            with _quiet_hub_logging():
                fetched = Path(hf_hub_download(repo_id=repo_id, filename=name, repo_type="dataset", local_dir=out))
        except KeyboardInterrupt:
            raise KeyboardInterrupt(_after_failure(out, cache_existed, keep_partial=True) or
                                    "the shards fetched so far are kept") from None
        except Exception as e:  # the hub client raises many types (connection, HTTP, offline mode, disk)
            if isinstance(e, OSError) and e.errno in DISK_ERRNOS:
                _after_failure(out, cache_existed, keep_partial=False)
                raise OSError(e.errno, e.strerror, e.filename or str(out)) from None
            kept = _after_failure(out, cache_existed, keep_partial=True)
            # offline, the client raises LocalEntryNotFoundError: the hub did not answer and no cached copy exists
            problem = ("the Hugging Face hub is unreachable" if isinstance(e, LocalEntryNotFoundError)
                       else f"{type(e).__name__}: {' '.join(str(e).split())}")
            raise UserError(f"could not fetch {name} from the Hugging Face dataset {repo_id}: {problem}. Rerun with "
                            f"network access (valid files are skipped{'; ' + kept if kept else ''}; HF_ENDPOINT "
                            f"selects a mirror), or copy {names[0]} and the train shards up to {names[-1]} into "
                            f"{out}/, or train on other shards with train_gpt.py --train_files/--val_files") from None
        try:
            read_header(fetched)
        except UserError as e:
            raise UserError(f"the downloaded {name} is not a valid shard ({e}); rerun to fetch it again") from None
        paths.append(fetched)
    return paths


def _after_failure(out: Path, cache_existed: bool, keep_partial: bool) -> str:
    """Clean out/.cache, the hub client's, after a failed fetch: keep a partial file when keep_partial (and return
    a note saying so), else remove the partial files and the folder itself if this run created it."""
    cache = out / ".cache"
    partial = [p for p in cache.rglob("*.incomplete") if p.is_file()]
    size = sum(p.stat().st_size for p in partial)
    if keep_partial and size:
        return f"the partial download in {cache}/ ({size / 1e6:.0f} MB) resumes; delete that folder to discard it"
    if not cache_existed:
        shutil.rmtree(cache, ignore_errors=True)
    for p in partial:
        p.unlink(missing_ok=True)
    return ""


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


@cli.program
def main(argv=None):
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("num_train_shards", nargs="?", type=cli.whole(1, ALL_TRAIN_SHARDS),
                        default=DEFAULT_TRAIN_SHARDS, help=f"train shards to fetch, 100M tokens each, "
                                                           f"1..{ALL_TRAIN_SHARDS} (default: %(default)s; the record needs 5)")
    parser.add_argument("--out", default=str(REPO_ROOT / "data" / "fineweb10B"), help="output folder (default: %(default)s)")
    parser.add_argument("--repo_id", default=HUB_REPO, help="Hugging Face dataset repo (default: %(default)s)")
    args = parser.parse_args(argv)
    paths = download(args.num_train_shards, args.out, args.repo_id)
    print(f"{len(paths)} shards ready in {args.out}")


if __name__ == "__main__":
    main()
