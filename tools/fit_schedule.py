"""run.sh's plan for a CPU run on your shards: the longest num_scheduled_steps, at most the settings' own, whose steps
the train shards cover (train_gpt.cover), and what those steps take, in one line that starts with the number.

    python3 tools/fit_schedule.py TRAIN_GPT_FLAGS...

Exits with status 0, or 1 and one `error:` line: a bad setting or shard, or shards that cover not even one step per
stage (train_gpt.check_data's refusal, which says what to change).
"""
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root
import train_gpt as tg  # noqa: E402
from harness.cli import program  # noqa: E402
from harness.settings import parse_args  # noqa: E402


@program
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    hp = parse_args(argv, tg.Hyperparameters, tg.validate)[0]
    index, sizes, _ = tg.index_train_shards(hp)
    starts = list(index.values())
    if (steps := tg.longest_schedule(hp, starts, sizes)) is None:
        tg.check_data(hp, tg.Schedule(hp), world_size=1)  # raises: the shards cover less than the schedule
    taken, total = tg.cover(tg.Schedule(dataclasses.replace(hp, num_scheduled_steps=steps)), starts, sizes)[2], sum(sizes)
    asked = "" if steps == hp.num_scheduled_steps else f"; {hp.num_scheduled_steps} asked"
    pieces = f"; documents read in pieces of {hp.max_doc_tokens} tokens" if hp.max_doc_tokens else ""
    print(f"{steps} scheduled steps (+ {hp.num_extension_steps}{asked}) fit the train shards: they take {taken:,} "
          f"of their {total:,} tokens ({taken / total:.0%}{pieces})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
