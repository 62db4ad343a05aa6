"""Network-free synthetic token shards for the CPU demo and the tests.

Text comes from a seeded order-1 Markov source over a small vocabulary: each token has a few
likely successors, so a small model can learn to predict far better than chance (the printed
entropy rate is roughly the loss floor; log(vocab_size) is chance). The last id, vocab_size - 1, is the
document separator and starts every document, like GPT-2's <|endoftext|> in FineWeb. Train with
`--vocab_size 256 --bos_id 255` for the defaults.

    python3 data/synthetic.py                      # data/synthetic/synthetic_{train,val}_*.bin
    python3 data/synthetic.py --train_tokens 10_000_000 --force
"""
import argparse
import sys
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: the repository root, for data/ and harness/
from data.shards import MAX_TOKENS, read_header, write_shard  # noqa: E402
from harness import cli  # noqa: E402
from harness.cli import UserError  # noqa: E402
from harness.files import atomic_write, check_output_folder, make_output_folder  # noqa: E402

MEDIAN_DOC_TOKENS = 100
DOC_LENGTH_SIGMA = 1.2  # log-normal spread: ~0.5% of documents have 1-5 tokens, a few run to thousands


def transition_table(rng: np.random.Generator, vocab_size: int, branching: int):
    """Successors (vocab_size, branching) of every token, with their probabilities and cumulative sums.

    Row vocab_size - 1 (the separator) is the distribution of a document's first token. Successors
    are content tokens only, so a separator appears only where a document starts.
    """
    num_content = vocab_size - 1
    successors = np.stack([rng.choice(num_content, size=branching, replace=False) for _ in range(vocab_size)])
    probs = rng.dirichlet(np.full(branching, 0.5), size=vocab_size)  # alpha < 1: a few dominant successors
    return successors, probs, np.cumsum(probs, axis=1)


def entropy_rate(successors: np.ndarray, probs: np.ndarray) -> float:
    """Per-token entropy (nats) of the chain under its stationary distribution, ignoring document
    boundaries: roughly the lowest loss a model can reach."""
    vocab_size = len(successors)
    stationary = np.full(vocab_size, 1.0 / vocab_size)
    for _ in range(200):  # power iteration; the chain mixes in a handful of steps
        stationary = np.bincount(successors.ravel(), (stationary[:, None] * probs).ravel(), minlength=vocab_size)
    row_entropy = -(probs * np.log(probs, where=probs > 0, out=np.zeros_like(probs))).sum(axis=1)
    return float(stationary @ row_entropy)


def sample_tokens(rng: np.random.Generator, successors: np.ndarray, cdf: np.ndarray, num_tokens: int) -> np.ndarray:
    """Exactly num_tokens tokens: separator + document, repeated; the last document may be cut."""
    separator = len(successors) - 1
    lengths = np.zeros(0, dtype=np.int64)  # document lengths without the separator
    while (lengths + 1).sum() < num_tokens:
        drawn = rng.lognormal(np.log(MEDIAN_DOC_TOKENS), DOC_LENGTH_SIGMA, size=num_tokens // MEDIAN_DOC_TOKENS + 1)
        lengths = np.concatenate([lengths, np.maximum(1, drawn.round()).astype(np.int64)])
    ends = np.cumsum(lengths + 1)
    lengths = lengths[:np.searchsorted(ends, num_tokens) + 1]  # drop documents that start past the end
    starts = ends[:len(lengths)] - lengths  # index of each document's first content token
    out = np.full(int(ends[len(lengths) - 1]), separator, dtype=np.uint16)

    # Advance all documents' chains together: at step t the documents longer than t are active,
    # which after a sort by length is a prefix of the sorted order.
    order = np.argsort(-lengths, kind="stable")
    num_active_at = np.searchsorted(-lengths[order], -np.arange(lengths.max()), side="left")  # count of lengths > t
    current = np.full(len(lengths), separator)
    for t, num_active in enumerate(num_active_at):
        docs = order[:num_active]
        choice = (rng.random(num_active)[:, None] > cdf[current[docs]]).sum(axis=1)
        current[docs] = successors[current[docs], np.minimum(choice, cdf.shape[1] - 1)]
        out[starts[docs] + t] = current[docs]
    return out[:num_tokens]


def shard_paths(out: Path, train_shards: int):
    return [out / f"synthetic_train_{i:06d}.bin" for i in range(train_shards)], out / "synthetic_val_000000.bin"


def generate(out=REPO_ROOT / "data" / "synthetic", vocab_size=256, train_tokens=2_000_000, val_tokens=200_000, train_shards=2,
             branching=8, seed=0, force=False, verbose=False) -> list[Path]:
    """Write train and val shards to `out` (same seed, same files) and return their paths.

    Shards already there with the expected token count are kept unless force=True.
    """
    if not 2 < vocab_size <= 2**16:
        raise UserError(f"--vocab_size {vocab_size} must be in 3..65536 (uint16 tokens)")
    if not 1 <= branching < vocab_size:
        raise UserError(f"--branching {branching} must be in 1..{vocab_size - 1} (--vocab_size - 1)")
    if seed < 0:
        raise UserError(f"--seed {seed} must be >= 0")
    if train_shards < 1 or train_tokens < train_shards or val_tokens < 1:
        raise UserError(f"need --train_shards >= 1 (got {train_shards}), --train_tokens >= --train_shards (got "
                        f"{train_tokens}) and --val_tokens >= 1 (got {val_tokens})")
    if max(val_tokens, -(-train_tokens // train_shards)) > MAX_TOKENS:
        raise UserError(f"a shard holds at most {MAX_TOKENS:,} tokens: lower --val_tokens, or raise --train_shards "
                        "for these --train_tokens")
    out = check_output_folder(out, "--out")
    train_paths, val_path = shard_paths(out, train_shards)
    stale = sorted(set(out.glob("synthetic_train_*.bin")) - set(train_paths))
    if stale:
        raise UserError(f"{out} holds train shards beyond the {train_shards} requested ({stale[0].name} ...); "
                        "training globs would pick them up - delete them first")
    make_output_folder(out)

    # Independent streams per file: the table and val shard stay the same when train_shards changes.
    table_seed, val_seed, *train_seeds = np.random.SeedSequence(seed).spawn(2 + train_shards)
    successors, probs, cdf = transition_table(np.random.default_rng(table_seed), vocab_size, branching)
    if verbose:
        print(f"Markov source: entropy rate {entropy_rate(successors, probs):.3f} nats/token "
              f"(about the lowest reachable loss); chance is log({vocab_size}) = {np.log(vocab_size):.3f}")

    per_shard = [train_tokens // train_shards + (i < train_tokens % train_shards) for i in range(train_shards)]
    jobs = list(zip(train_paths, per_shard, train_seeds)) + [(val_path, val_tokens, val_seed)]
    # train_gpt.py quotes this file in its end-of-run summary (a loss_floor.txt beside the validation shards)
    floor = f"{entropy_rate(successors, probs):.3f} nats/token (the Markov source's entropy rate)\n"
    atomic_write(out / "loss_floor.txt", lambda f: f.write(floor.encode()))
    for path, num_tokens, file_seed in jobs:
        if not force and _holds(path, num_tokens):
            if verbose:
                print(f"{path}: present and valid, kept (--force regenerates)")
            continue
        write_shard(path, sample_tokens(np.random.default_rng(file_seed), successors, cdf, num_tokens))
        if verbose:
            print(f"{path}: wrote {num_tokens:,} tokens")
    return [path for path, _, _ in jobs]


def _holds(path: Path, num_tokens: int) -> bool:
    try:
        return read_header(path) == num_tokens
    except UserError:
        return False


@cli.program
def main(argv=None):
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(REPO_ROOT / "data" / "synthetic"), help="output folder (default: %(default)s)")
    parser.add_argument("--vocab_size", type=int, default=256, help="vocabulary size; id vocab_size-1 is the separator (default: %(default)s)")
    parser.add_argument("--train_tokens", type=int, default=2_000_000, help="train tokens over all train shards (default: %(default)s)")
    parser.add_argument("--val_tokens", type=int, default=200_000, help="tokens in synthetic_val_000000.bin (default: %(default)s)")
    parser.add_argument("--train_shards", type=int, default=2, help="number of train shards (default: %(default)s)")
    parser.add_argument("--branching", type=int, default=8, help="successors per token in the Markov table (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="same seed, same files (default: %(default)s)")
    parser.add_argument("--force", action="store_true", help="regenerate even if valid shards of the right size exist")
    args = parser.parse_args(argv)
    generate(args.out, args.vocab_size, args.train_tokens, args.val_tokens, args.train_shards,
             args.branching, args.seed, args.force, verbose=True)


if __name__ == "__main__":
    main()
