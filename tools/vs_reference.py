"""The project against the reference from finished runs' logs: a table of the runs, the medians, the ratios by stage,
and the one `ab:` line a record of the comparison carries.

    python3 tools/vs_reference.py --reference REF_LOG --fp8 LOG [LOG ...] --exact LOG [LOG ...]
                                  --cold LOG [LOG ...] --device KIND

--fp8 takes the project's runs in its default numerics (`--fp8_body`), --exact those of the exact math (`--fp8_body
False`), one seed each; --cold the logs of runs in the default numerics that started from empty compile caches (the
median of their start-ups is the line's start_s; they may be --fp8 runs, or runs stopped once their first timed step
began); --device the machine's kind (e.g. nvidia-h100-x1). The reference's log is modded-nanogpt's; its stages come
from its step lines, with the project's number of scheduled steps. Times are train times without validation (each
log's last val line); the ratio is the median of the --fp8 runs over the reference's run. Prints to stdout; writes
nothing.
"""
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root, for tools.cli
from tools import cli  # noqa: E402
from tools.ab import PEAK, STARTUP  # noqa: E402
from tools.plot import parse_log  # noqa: E402

CONFIG = re.compile(r"^config: (.*)$", re.M)
SETTING = re.compile(r"\b(\w+)=('[^']*'|\S+?)(?:,|$)")
KIND = re.compile(r"[a-z0-9][a-z0-9-]*")


def settings(path: Path, text: str) -> dict:
    """The log's `config:` line as {name: value text}."""
    if not (m := CONFIG.search(text)):
        raise cli.Error(f"{path}: no `config:` line; is it a train_gpt.py log (the reference's goes to --reference)?")
    return dict(SETTING.findall(m[1]))


def check_numerics(path: Path, config: dict, fp8: bool, flag: str):
    if config.get("fp8_body") != str(fp8):
        raise cli.Error(f"{path}: fp8_body={config.get('fp8_body')}, but {flag} takes runs with --fp8_body {fp8}; "
                        "give each log to its numerics")


def project_run(path: Path, fp8: bool) -> dict:
    """One project run: its seed, steps, train time, val loss, stages, start-up and peak memory."""
    text = path.read_text(errors="replace")
    config, parsed = settings(path, text), parse_log(path)
    if missing := [k for k in ("seed", "num_scheduled_steps", "fp8_body") if k not in config]:
        raise cli.Error(f"{path}: its `config:` line lacks {', '.join(missing)}; is it from this project's train_gpt.py?")
    check_numerics(path, config, fp8, "--fp8" if fp8 else "--exact")
    if not parsed.val or len(parsed.stage_ms) < 3:
        raise cli.Error(f"{path}: no final validation or `ms/step by stage` line; did the run finish?")
    step, train_s, loss = parsed.val[-1]
    return dict(path=path, seed=int(config["seed"]), steps=(int(config["num_scheduled_steps"]), step),
                train_s=train_s, loss=loss, stage_ms=parsed.stage_ms, fp8_head=config.get("fp8_head") == "True",
                startup_s=float(m[1]) if (m := STARTUP.search(text)) else None,
                peak_mib=int(m[1]) if (m := PEAK.search(text)) else None)


def cold_start(path: Path, scheduled: int) -> dict:
    """A default-numerics run of `scheduled` steps from empty caches: its start-up (it may have stopped after it)."""
    text = path.read_text(errors="replace")
    config = settings(path, text)
    check_numerics(path, config, True, "--cold")
    if config.get("num_scheduled_steps") != str(scheduled):
        raise cli.Error(f"{path}: num_scheduled_steps={config.get('num_scheduled_steps')}, not the --fp8 runs' "
                        f"{scheduled}; give --cold cold starts of the same schedule")
    if not (m := STARTUP.search(text)):
        raise cli.Error(f"{path}: no `startup:` line; give --cold a log of a run that reached its first timed step")
    return dict(path=path, startup_s=float(m[1]))


def numerics_name(run: dict) -> str:
    """The record line's name of the default numerics (`--fp8_body`: FP8 head, QKV and MLP)."""
    return "fp8-head-qkv-mlp" if run["fp8_head"] else "fp8-qkv-mlp"


def table_row(name: str, run: dict) -> str:
    stages = " / ".join(f"{ms:.1f}" for ms in run["stage_ms"])
    start = "" if run.get("startup_s") is None else f"{run['startup_s']:.1f} s"
    peak = "" if run.get("peak_mib") is None else f"{run['peak_mib']:,} MiB"
    return f"| {name} | {run['loss']:.4f} | {run['train_s']:.2f} s | {stages} | {start} | {peak} |"


def median_run(runs: list[dict]) -> dict:
    return dict(loss=statistics.median(r["loss"] for r in runs), train_s=statistics.median(r["train_s"] for r in runs),
                stage_ms=[statistics.median(ms) for ms in zip(*(r["stage_ms"] for r in runs))])


@cli.program
def main(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference", required=True, type=Path, help="the reference's log (modded-nanogpt)")
    p.add_argument("--fp8", required=True, nargs="+", type=Path, help="the project's runs, default numerics")
    p.add_argument("--exact", required=True, nargs="+", type=Path, help="the project's runs, --fp8_body False")
    p.add_argument("--cold", required=True, nargs="+", type=Path,
                   help="default-numerics runs from empty compile caches (start_s: their median start-up)")
    p.add_argument("--device", required=True, help="the machine's kind, e.g. nvidia-h100-x1")
    args = p.parse_args(argv)
    if not KIND.fullmatch(args.device):
        p.error(f"--device {args.device!r}: name the kind in lower case, digits and dashes (e.g. nvidia-h100-x1)")
    fp8, exact = [project_run(f, True) for f in args.fp8], [project_run(f, False) for f in args.exact]
    for flag, runs in (("--fp8", fp8), ("--exact", exact)):
        if len(seeds := [r["seed"] for r in runs]) != len(set(seeds)):
            raise cli.Error(f"{flag}: seeds {seeds} repeat; give one run per seed")
    runs = fp8 + exact
    if mixed := [str(r["path"]) for r in runs if r["steps"] != fp8[0]["steps"]]:
        raise cli.Error(f"{', '.join(mixed)}: other steps than {fp8[0]['path']} (scheduled, total); compare runs of one "
                        "schedule")
    scheduled, total = fp8[0]["steps"]
    colds = [cold_start(f, scheduled) for f in args.cold]
    ref = parse_log(args.reference, scheduled_steps=scheduled)
    if not ref.val or ref.val[-1][0] != total or len(ref.stage_ms) < 3:
        raise cli.Error(f"{args.reference}: its last validation is not at step {total} (the project's last) with "
                        "three stages before it; did it run the same schedule to the end?")
    ref_text = args.reference.read_text(errors="replace")
    reference = dict(train_s=ref.val[-1][1], loss=ref.val[-1][2], stage_ms=ref.stage_ms,
                     peak_mib=int(m[1]) if (m := PEAK.search(ref_text)) else None)
    med_fp8, med_exact = median_run(fp8), median_run(exact)
    lines = ["| run | val loss | train time | ms/step by stage | start-up | peak allocated |",
             "| --- | --- | --- | --- | --- | --- |"]
    lines += [table_row(f"project seed {r['seed']} ({r['path'].name})", r) for r in fp8]
    lines += [table_row(f"exact math seed {r['seed']} ({r['path'].name})", r) for r in exact]
    lines += [f"| cold start ({c['path'].name}) | | | | {c['startup_s']:.1f} s | |" for c in colds
              if c["path"].resolve() not in [f.resolve() for f in args.fp8]]
    lines += [table_row(f"reference ({args.reference.name})", reference),
              table_row(f"project, medians of {len(fp8)}", med_fp8),
              table_row(f"exact math, medians of {len(exact)}", med_exact)]
    for name, med in (("project", med_fp8), ("exact math", med_exact)):
        ratios = " / ".join(f"{a / b:.3f}" for a, b in zip(med["stage_ms"], reference["stage_ms"]))
        lines.append(f"| {name} / reference | {med['loss'] - reference['loss']:+.4f} | "
                     f"{med['train_s'] / reference['train_s']:.4f} | {ratios} | | |")
    start_s = statistics.median(c["startup_s"] for c in colds)
    lines += ["", f"FP8 loss median - exact median: {med_fp8['loss'] - med_exact['loss']:+.4f}",
              f"cold starts: {', '.join(format(c['startup_s'], '.1f') for c in colds)} s; median {start_s:.1f} s", "",
              f"ab: ratio={med_fp8['train_s'] / reference['train_s']:.4f} reference_s={reference['train_s']:.2f} "
              f"project_s={med_fp8['train_s']:.2f} reference_loss={reference['loss']:.4f} "
              f"project_loss={med_fp8['loss']:.4f} exact_loss={med_exact['loss']:.4f} seeds={min(len(fp8), len(exact))} "
              f"device={args.device} numerics={numerics_name(fp8[0])} start_s={start_s:.1f}"]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
