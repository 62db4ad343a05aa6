"""The project against the reference from finished runs' logs: a table of the runs, the medians, the ratios by stage,
the means with their 95% intervals over the seeds, and the one `ab:` line a record of the comparison carries.

    python3 tools/vs_reference.py --reference LOG [LOG ...] --fp8 LOG [LOG ...] --exact LOG [LOG ...]
                                  --cold LOG [LOG ...] --device KIND [--proj_s SECONDS] [--world N]

--fp8 takes the project's runs in its default numerics (`--fp8_body`), --exact those of the exact math (`--fp8_body
False`), one seed each; --cold the logs of runs in the default numerics that started from empty compile caches (the
median of their start-ups is the line's start_s; they may be --fp8 runs, or runs stopped once their first timed step
began); --device the machine's kind (e.g. nvidia-h100-x1); --proj_s the 8xH100 train time tools/project_8gpu.py
projected for this code (its `project ... s (projected)` line), else the line says `proj_s=-`. The reference's logs
(one run or several) are modded-nanogpt's console output; its stages come from its step lines, with the project's
number of scheduled steps. Times are train times without validation (each log's last val line); a step that took over
twice its stage's median, in any run, is named on the `stalls` line with what it cost (a ratio counts it). Prints to
stdout; writes nothing.

The `ab:` line, its fields in this order, each `name=value` without spaces:
  ratio             the --fp8 runs' median train time over the reference's (its median, with several runs)
  world             the project's world size, from its logs' `world: N (...)` line (--world for older logs); the
                    reference's console output does not record its own: run it at the same world (run_reference.sh's
                    NGPU)
  reference_s, project_s, reference_loss, project_loss, exact_loss
                    medians: the train times (s) and val losses of the reference's, the --fp8 and the --exact runs
  seeds             the fewer of the --fp8 and --exact runs
  device, numerics  --device; the default numerics' name
  start_s           the --cold runs' median start-up (s)
  peak_mib          the --fp8 runs' highest peak memory allocated (MiB)
  proj_s            --proj_s, or `-`
  reference_runs    how many reference logs were given
  loss_diff         the --fp8 runs' mean val loss minus the --exact runs', with its 95% interval:
                    `+0.0009[-0.0020,+0.0040]`, or `+0.0009[-,-]` where no interval is defined (fewer than 2 runs a
                    side, or no spread)
  loss_p            the one-sided p-value for "the FP8 mean loss is higher" (2 significant digits), or `-`
  loss_diff_paired  where the --fp8 and --exact runs have the same seeds: the mean over seeds of the FP8 run's val
                    loss minus the exact run's, with its 95% interval (paired t: what the seed alone moves cancels);
                    `-` where the seeds differ
  loss_p_paired     its one-sided p-value for "FP8 is higher", or `-`
  mean_ratio        the --fp8 runs' mean train time over the reference's mean, with its 95% interval:
                    `0.8484[0.8470,0.8498]`; one reference run is taken as exact, the interval then holding the
                    project's spread alone (n - 1 degrees of freedom; the printed lines say so)
  exact_mean_ratio  the same for the --exact runs
The intervals and p-values are tools/stats.py's (Welch; the ratios' on the log of the means). One field:
`grep -o 'loss_diff=[^ ]*'`.
"""
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root
from harness import cli  # noqa: E402
from harness.cli import UserError  # noqa: E402
from tools import stats  # noqa: E402
from tools.ab import PEAK, STARTUP  # noqa: E402
from tools.plot import parse_log, stall_line  # noqa: E402

CONFIG = re.compile(r"^config: (.*)$", re.M)
SETTING = re.compile(r"\b(\w+)=('[^']*'|\S+?)(?:,|$)")
KIND = re.compile(r"[a-z0-9][a-z0-9-]*")
WORLD = re.compile(r"^world: (\d+) \(", re.M)


def settings(path: Path, text: str) -> dict:
    """The log's `config:` line as {name: value text}."""
    if not (m := CONFIG.search(text)):
        raise UserError(f"{path}: no `config:` line; is it a train_gpt.py log (the reference's goes to --reference)?")
    return dict(SETTING.findall(m[1]))


def check_numerics(path: Path, config: dict, fp8: bool, flag: str):
    if config.get("fp8_body") != str(fp8):
        raise UserError(f"{path}: fp8_body={config.get('fp8_body')}, but {flag} takes runs with --fp8_body {fp8}; "
                        "give each log to its numerics")


def project_run(path: Path, fp8: bool, world_given: int | None = None) -> dict:
    """One project run: its seed, steps, world size, train time, val loss, stages, start-up and peak memory.
    world_given: --world, for a log older than the `world:` line (a newer log's line must agree with it)."""
    text = path.read_text(errors="replace")
    config, parsed = settings(path, text), parse_log(path)
    if missing := [k for k in ("seed", "num_scheduled_steps", "fp8_body", "emulate_world_size") if k not in config]:
        raise UserError(f"{path}: its `config:` line lacks {', '.join(missing)}; is it from this project's train_gpt.py?")
    if config["emulate_world_size"] != "0":
        raise UserError(f"{path}: an emulated rank (--emulate_world_size {config['emulate_world_size']}) times one "
                        "rank's share of a step, not a run; give it to tools/project_8gpu.py")
    check_numerics(path, config, fp8, "--fp8" if fp8 else "--exact")
    world = int(m[1]) if (m := WORLD.search(text)) else world_given
    if world is None:
        raise UserError(f"{path}: no `world: N (...)` line (a train_gpt.py older than the logging of its world size); "
                        "give the runs' world size with --world N")
    if world_given is not None and world != world_given:
        raise UserError(f"{path}: its `world:` line says {world}, not --world {world_given}; give runs of one world")
    peak = PEAK.search(text)
    if not parsed.val or len(parsed.stage_ms) < 3 or not peak:
        raise UserError(f"{path}: no final validation, `ms/step by stage` or `peak memory allocated:` line; did the "
                        "run finish on a GPU?")
    step, train_s, loss = parsed.val[-1]
    return dict(path=path, seed=int(config["seed"]), steps=(int(config["num_scheduled_steps"]), step),
                world=world, train_s=train_s, loss=loss, stage_ms=parsed.stage_ms, train_ms=parsed.train_ms,
                fp8_head=config.get("fp8_head") == "True",
                startup_s=float(m[1]) if (m := STARTUP.search(text)) else None, peak_mib=int(peak[1]))


def cold_start(path: Path, scheduled: int) -> dict:
    """A default-numerics run of `scheduled` steps from empty caches: its start-up (it may have stopped after it)."""
    text = path.read_text(errors="replace")
    config = settings(path, text)
    check_numerics(path, config, True, "--cold")
    if config.get("num_scheduled_steps") != str(scheduled):
        raise UserError(f"{path}: num_scheduled_steps={config.get('num_scheduled_steps')}, not the --fp8 runs' "
                        f"{scheduled}; give --cold cold starts of the same schedule")
    if not (m := STARTUP.search(text)):
        raise UserError(f"{path}: no `startup:` line; give --cold a log of a run that reached its first timed step")
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


def reference_run(path: Path, scheduled: int, total: int) -> dict:
    """One run of the reference, to the project's last step: its train time, val loss, stages and peak memory."""
    ref = parse_log(path, scheduled_steps=scheduled)
    if not ref.val or ref.val[-1][0] != total or len(ref.stage_ms) < 3:
        raise UserError(f"{path}: its last validation is not at step {total} (the project's last) with three stages "
                        "before it; did it run the same schedule to the end?")
    return dict(path=path, train_s=ref.val[-1][1], loss=ref.val[-1][2], stage_ms=ref.stage_ms, train_ms=ref.train_ms,
                peak_mib=int(m[1]) if (m := PEAK.search(path.read_text(errors="replace"))) else None)


def interval(c: stats.Comparison, spec: str, method: str) -> str:
    """The estimate and its 95% interval, in words."""
    if c.undefined:
        return f"{c.estimate:{spec}}; 95% interval not defined: {c.undefined}"
    return f"{c.estimate:{spec}}, 95% interval {stats.interval_text(c, spec)} ({method}, df {c.df:.1f})"


def field(c: stats.Comparison, spec: str) -> str:
    """The `ab:` line's form: `estimate[low,high]`, `estimate[-,-]` where the interval is not defined."""
    low, high = ("-", "-") if c.undefined else (format(c.low, spec), format(c.high, spec))
    return f"{c.estimate:{spec}}[{low},{high}]"


@cli.program
def main(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference", required=True, nargs="+", type=Path,
                   help="the reference's logs (modded-nanogpt's console output), one run or several")
    p.add_argument("--fp8", required=True, nargs="+", type=Path, help="the project's runs, default numerics")
    p.add_argument("--exact", required=True, nargs="+", type=Path, help="the project's runs, --fp8_body False")
    p.add_argument("--cold", required=True, nargs="+", type=Path,
                   help="default-numerics runs from empty compile caches (start_s: their median start-up)")
    p.add_argument("--device", required=True, help="the machine's kind, e.g. nvidia-h100-x1")
    p.add_argument("--world", type=cli.whole(1), help="the runs' world size, for logs older than their `world:` line")
    p.add_argument("--proj_s", type=cli.finite(),
                   help="the 8xH100 train time tools/project_8gpu.py projected (seconds); else the line has proj_s=-")
    args = p.parse_args(argv)
    if not KIND.fullmatch(args.device):
        p.error(f"--device {args.device!r}: name the kind in lower case, digits and dashes (e.g. nvidia-h100-x1)")
    fp8 = [project_run(f, True, args.world) for f in args.fp8]
    exact = [project_run(f, False, args.world) for f in args.exact]
    for flag, runs in (("--fp8", fp8), ("--exact", exact)):
        if len(seeds := [r["seed"] for r in runs]) != len(set(seeds)):
            raise UserError(f"{flag}: seeds {seeds} repeat; give one run per seed")
    runs = fp8 + exact
    if mixed := [str(r["path"]) for r in runs if (r["steps"], r["world"]) != (fp8[0]["steps"], fp8[0]["world"])]:
        raise UserError(f"{', '.join(mixed)}: other steps (scheduled, total) or world size than {fp8[0]['path']}; "
                        "compare runs of one schedule and world")
    (scheduled, total), world = fp8[0]["steps"], fp8[0]["world"]
    colds = [cold_start(f, scheduled) for f in args.cold]
    refs = [reference_run(f, scheduled, total) for f in args.reference]
    reference, med_fp8, med_exact = median_run(refs), median_run(fp8), median_run(exact)
    lines = ["| run | val loss | train time | ms/step by stage | start-up | peak allocated |",
             "| --- | --- | --- | --- | --- | --- |"]
    lines += [table_row(f"project seed {r['seed']} ({r['path'].name})", r) for r in fp8]
    lines += [table_row(f"exact math seed {r['seed']} ({r['path'].name})", r) for r in exact]
    lines += [f"| cold start ({c['path'].name}) | | | | {c['startup_s']:.1f} s | |" for c in colds
              if c["path"].resolve() not in [f.resolve() for f in args.fp8]]
    lines += [table_row(f"reference ({r['path'].name})", r) for r in refs]
    lines += [table_row(f"reference, medians of {len(refs)}", reference)] if len(refs) > 1 else []
    lines += [table_row(f"project, medians of {len(fp8)}", med_fp8),
              table_row(f"exact math, medians of {len(exact)}", med_exact)]
    for name, med in (("project", med_fp8), ("exact math", med_exact)):
        ratios = " / ".join(f"{a / b:.3f}" for a, b in zip(med["stage_ms"], reference["stage_ms"]))
        lines.append(f"| {name} / reference | {med['loss'] - reference['loss']:+.4f} | "
                     f"{med['train_s'] / reference['train_s']:.4f} | {ratios} | | |")
    loss = stats.difference([r["loss"] for r in exact], [r["loss"] for r in fp8])
    exact_loss = {r["seed"]: r["loss"] for r in exact}
    pairs = (stats.paired([exact_loss[r["seed"]] for r in fp8], [r["loss"] for r in fp8])
             if sorted(exact_loss) == sorted(r["seed"] for r in fp8) else None)
    # one reference run has no spread to measure: it is taken as exact, the interval then holds the project's alone
    one_ref = len(refs) == 1
    time_ratio = {name: stats.ratio([r["train_s"] for r in refs], [r["train_s"] for r in own], a_exact=one_ref)
                  for name, own in (("project", fp8), ("exact math", exact))}
    method = ("the reference's one run taken as exact: the project's spread alone" if one_ref else
              "Welch on the logs of the means")
    start_s = statistics.median(c["startup_s"] for c in colds)
    lines += ["", f"FP8 loss median - exact median: {med_fp8['loss'] - med_exact['loss']:+.4f}",
              f"FP8 loss mean - exact mean: {interval(loss, '+.4f', 'Welch')}"
              + ("" if loss.undefined else f"; one-sided p for a higher FP8 mean: {loss.p_higher:.2g}"),
              "FP8 loss - exact loss, seed by seed: " + (
                  "not paired, the --fp8 and --exact runs' seeds differ" if pairs is None else
                  interval(pairs, "+.4f", f"paired t over {len(fp8)} seeds")
                  + ("" if pairs.undefined else f"; one-sided p for a higher FP8 loss: {pairs.p_higher:.2g}")),
              *(f"train time, {name} mean / reference mean: {interval(c, '.4f', method)}"
                for name, c in time_ratio.items()),
              f"cold starts: {', '.join(format(c['startup_s'], '.1f') for c in colds)} s; median {start_s:.1f} s",
              stall_line([(r["path"].name, r["train_ms"], scheduled) for r in refs + fp8 + exact]), "",
              f"ab: ratio={med_fp8['train_s'] / reference['train_s']:.4f} world={world} "
              f"reference_s={reference['train_s']:.2f} project_s={med_fp8['train_s']:.2f} "
              f"reference_loss={reference['loss']:.4f} project_loss={med_fp8['loss']:.4f} "
              f"exact_loss={med_exact['loss']:.4f} seeds={min(len(fp8), len(exact))} device={args.device} "
              f"numerics={numerics_name(fp8[0])} start_s={start_s:.1f} peak_mib={max(r['peak_mib'] for r in fp8)} "
              f"proj_s={'-' if args.proj_s is None else format(args.proj_s, '.1f')} reference_runs={len(refs)} "
              f"loss_diff={field(loss, '+.4f')} loss_p={'-' if loss.undefined else format(loss.p_higher, '.2g')} "
              f"loss_diff_paired={'-' if pairs is None else field(pairs, '+.4f')} "
              f"loss_p_paired={'-' if pairs is None or pairs.undefined else format(pairs.p_higher, '.2g')} "
              f"mean_ratio={field(time_ratio['project'], '.4f')} "
              f"exact_mean_ratio={field(time_ratio['exact math'], '.4f')}"]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
