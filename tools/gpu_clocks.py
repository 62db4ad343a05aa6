"""Each run's GPU clocks from the samples tools/ab_runs.sh takes while it runs (nvidia-smi every 200 ms): per GPU that
worked, the median SM clock, power and temperature over its working samples (utilization >= 90% and at least half the
GPU's highest draw in the run), and the share of them held back by the power cap or by a thermal or hardware slowdown.

    python3 tools/gpu_clocks.py OUT/logs/*.gpus.csv

Why: an H200 at its 700 W cap clocks lower when warmer, so machines, GPUs of one machine and a GPU beside a busy
neighbour differ by a few percent in compute-bound kernels (a world-2 run's GPU 0 held 1725 MHz at 60 C against 1785
MHz at 56 C alone: records/enwiki-124/2026-11-30_world2-beyond-compute-d10efae). The ranks of a run step together, so
its slowest GPU's clock is the run's. Utilization alone does not say a GPU works: one waiting for its peer in a
collective reads 100% at idle power and full clock (the reference's compile phase at world 2, ~120 W at 1980 MHz:
records/enwiki-124/2026-11-30_vs-reference-world2-a39cf15).
"""
import csv
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root, for harness/
from harness import cli  # noqa: E402
from harness.cli import UserError  # noqa: E402

# nvidia-smi --query-gpu=FIELDS --format=csv,nounits, in this order (tools/ab_runs.sh asks for exactly these)
FIELDS = ("timestamp", "index", "clocks.sm", "power.draw", "temperature.gpu", "clocks_event_reasons.active",
          "utilization.gpu")
BUSY_PERCENT = 90.0
WORKING_POWER = 0.5  # of the GPU's highest draw in the run: below it a busy GPU waits
POWER_CAP = 0x4  # clocks_event_reasons: SwPowerCap
SLOWDOWNS = 0x8 | 0x20 | 0x40 | 0x80  # HwSlowdown, SwThermalSlowdown, HwThermalSlowdown, HwPowerBrakeSlowdown


def read_samples(path: Path) -> dict[int, list[tuple[float, float, float, int]]]:
    """{GPU index: [(SM MHz, W, degrees C, reasons)]} of the working samples; rows nvidia-smi could not fill ([N/A],
    a line cut by the run's end) are skipped, a file that is not such a CSV is refused."""
    try:
        with path.open() as f:
            rows = list(csv.reader(f))
    except (UnicodeDecodeError, csv.Error):
        raise UserError(f"{cli.shown(path)}: not text; pass the *.gpus.csv files tools/ab_runs.sh writes") from None
    if not rows or not rows[0] or rows[0][0].strip() != "timestamp" or len(rows[0]) != len(FIELDS):
        raise UserError(f"{cli.shown(path)}: its first line is not nvidia-smi's header for {','.join(FIELDS)}; "
                        "pass the *.gpus.csv files tools/ab_runs.sh writes")
    busy: dict[int, list] = {}
    for row in rows[1:]:
        try:
            _, index, sm, watts, temp, reasons, util = (field.strip() for field in row)
            sample = (float(sm), float(watts), float(temp), int(reasons, 16))
            gpu, util = int(index), float(util)
        except ValueError:
            continue
        if util >= BUSY_PERCENT:
            busy.setdefault(gpu, []).append(sample)
    peak = {gpu: max(s[1] for s in samples) for gpu, samples in busy.items()}
    return {gpu: [s for s in samples if s[1] >= WORKING_POWER * peak[gpu]] for gpu, samples in busy.items()}


def report(path: Path) -> list[str]:
    """One line per GPU that worked during the run (its name: the file's, less .gpus.csv)."""
    run = path.name.removesuffix(".gpus.csv")
    working = read_samples(path)
    if not working:
        return [f"{run}: no working GPU samples"]
    lines = []
    for gpu, samples in sorted(working.items()):
        median = lambda i: statistics.median(s[i] for s in samples)  # noqa: E731
        share = lambda mask: sum(bool(s[3] & mask) for s in samples) / len(samples)  # noqa: E731
        lines.append(f"{run} GPU {gpu}: {median(0):.0f} MHz, {median(1):.0f} W, {median(2):.0f} C over {len(samples)} "
                     f"working samples; power cap {share(POWER_CAP):.0%}, slowdowns {share(SLOWDOWNS):.0%}")
    return lines


@cli.program
def main(argv=None):
    parser = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="+", type=Path, help="OUT/logs/<run>.gpus.csv, written by tools/ab_runs.sh")
    args = parser.parse_args(argv)
    for path in args.csv:
        print("\n".join(report(path)))


if __name__ == "__main__":
    main()
