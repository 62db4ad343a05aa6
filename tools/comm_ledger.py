"""The communication ledger: every collective of an optimizer step at a world size, with its bytes.

    python3 tools/comm_ledger.py [--world_size 8] [--json FILE]

Built from train_gpt.py's own optimizer (NorMuonAdam.ledger, the list step() launches) on the full-size model,
created on the meta device (shapes only, no memory). Three kinds of step: NorMuon only (even steps), Adam while
the embedding is tied to the head (odd steps until 2/3 of the run) and Adam after the untie. The bigram table's
sparse exchange (world 8) carries the rows a rank touched in two steps outside its own slice, which depends on the
data: estimated here for uniform hashing of 2 x the stage's micro-batch tokens into the table (an upper estimate:
real text repeats bigrams). Wire bytes are what each rank sends (ring collectives: (W-1)/W of the tensor per
pass). Not listed: one 8-byte all-reduce per guard check (every --guard_every steps) and at validations.
"""
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root
import train_gpt as tg  # noqa: E402
from harness import cli  # noqa: E402
from harness.cli import UserError  # noqa: E402
from harness.files import atomic_write, check_output  # noqa: E402

STEP_KINDS = {"normuon": (False, True), "adam_tied": (True, True), "adam_untied": (True, False)}  # (do_adam, tied)


def sparse_rows_sent(table_rows: int, world_size: int, micro_tokens: int) -> int:
    """Expected rows of another rank's slice touched by one rank's 2 x micro_tokens lookups (uniform hashing)."""
    touched = table_rows * (1 - math.exp(-2 * micro_tokens / table_rows))
    return round(touched * (world_size - 1) / world_size)


def ledgers(world_size: int) -> dict:
    """{stage: {step kind: [row dicts]}} for the record's configuration at this world size."""
    hp = tg.Hyperparameters()
    with torch.device("meta"):
        cfg = tg.GPTConfig(vocab_size=tg.round_up(hp.vocab_size, 128), model_dim=hp.model_dim,
                           num_heads=hp.num_heads, head_dim=hp.head_dim, max_tokens=128)
        model = tg.GPT(cfg)
        rt = tg.Runtime(0, world_size, torch.device("meta"), 8 // world_size, None)
        optimizer = tg.NorMuonAdam(model, hp, rt, compile=False)
    out = {}
    for stage, micro_tokens in enumerate(hp.micro_batch_tokens, 1):
        rows = sparse_rows_sent(model.bigram_embed.size(0), world_size, micro_tokens)
        out[f"stage {stage}"] = {
            kind: [dict(param=c.param, op=c.op, dtype=str(c.dtype).removeprefix("torch."), elements=c.numel,
                        tensor_bytes=c.numel * c.dtype.itemsize, wire_bytes=c.wire_bytes(world_size))
                   for c in optimizer.ledger(do_adam, tied, sparse_rows_sent=rows)]
            for kind, (do_adam, tied) in STEP_KINDS.items()}
    return out


@cli.program
def main(argv=None):
    parser = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world_size", type=cli.whole(1), default=8, help="1, 2, 4 or 8 (default: %(default)s)")
    parser.add_argument("--json", help="also write the ledger as JSON (for tools/project_8gpu.py)")
    args = parser.parse_args(argv)
    if tg.MICRO_BATCHES % args.world_size:
        raise UserError(f"--world_size {args.world_size}: the record's {tg.MICRO_BATCHES} micro-batches per step split "
                        "over 1, 2, 4 or 8 ranks; choose one of those")
    if args.json:
        check_output(args.json)
    table = ledgers(args.world_size)
    print(f"world size {args.world_size}: collectives per optimizer step (MB = 1e6 bytes)")
    for stage, kinds in table.items():
        for kind, rows in kinds.items():
            if stage != "stage 1" and not any(r["op"] == "all_to_all" for r in rows):
                continue  # only the sparse exchange changes with the stage
            print(f"\n{stage}, {kind} step:")
            print(f"  {'param':<15} {'op':<15} {'dtype':<9} {'elements':>12} {'tensor MB':>10} {'sent MB':>9}")
            for r in rows:
                print(f"  {r['param']:<15} {r['op']:<15} {r['dtype']:<9} {r['elements']:>12,} "
                      f"{r['tensor_bytes'] / 1e6:>10.2f} {r['wire_bytes'] / 1e6:>9.2f}")
            print(f"  {'total':<41} {sum(r['elements'] for r in rows):>12,} "
                  f"{sum(r['tensor_bytes'] for r in rows) / 1e6:>10.2f} {sum(r['wire_bytes'] for r in rows) / 1e6:>9.2f}")
    if args.json:
        text = json.dumps(dict(world_size=args.world_size, stages=table), indent=1)
        atomic_write(args.json, lambda f: f.write(text.encode()))


if __name__ == "__main__":
    main()
