"""A/B two checkouts of train_gpt.py on this machine, alternating, as records/ measures a change: cold starts from
empty compile caches, then full runs over seeds, and one table with each side's medians and one of B's means against
A's with their 95% intervals.

    python3 tools/ab.py --a MAIN_DIR --b EDIT_DIR --out OUT_DIR [--cold 3] [--seeds 0,1,2] [--nproc 1]
                        [--timeout 900] [--dry_run] -- TRAIN_GPT_FLAGS...

TRAIN_GPT_FLAGS: the run's settings (data, steps: e.g. tools/enwiki-124.sh's flags); the tool adds --seed,
--log_dir and --run_id. Order on the machine: cold starts in pairs A B, B A, A B, ... (each stopped once its log says
`startup:`, caches in OUT_DIR/caches/<run>), then full runs by seed, in pairs continuing that alternation, a side's
k-th full run reusing the caches of its k-th cold start, cycling (warm: their start-up is not a cold start). A compile
picks some kernels' launch configs by timing them, and two compiles of the same code can pick differently (~1% of a
step before records/enwiki-124/2026-11-29_fixed-short-row-configs, less since): runs spread over several compiles put
that in the spread the intervals see, where runs of one compile would all share its picks. The first runs on a machine
start slower whatever the code: alternate, and compare medians. Every run writes Python bytecode to one
OUT_DIR/pycache, filled first by importing torch's compiler, so that no run compiles torch's Python source on its
clock (a pip installation ships it compiled; some machines set PYTHONDONTWRITEBYTECODE). Logs, caches and the table
(OUT_DIR/ab.md) stay in OUT_DIR, which must be new or empty.

Beside the medians, ab.md compares the means over the runs (tools/stats.py): train time and cold start as ratios
B/A, val loss as the difference B-A, each with its 95% Welch interval and the two-sided p-value for "the means
differ" (a change may be slower or faster); the interval is not defined, and the table says so, with fewer than two
runs a side. Both sides run the same seeds, so the val loss is also compared seed by seed (paired t over the seeds'
differences), which leaves out what a seed alone moves.
"""
import argparse
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root
from harness import cli  # noqa: E402
from harness.cli import UserError  # noqa: E402
from tools import stats  # noqa: E402
from tools.plot import parse_log, stall_line  # noqa: E402

OWN_FLAGS = ("--seed", "--log_dir", "--run_id")  # set per run by this tool
STARTUP = re.compile(r"^startup: ([\d.]+)s", re.M)
PEAK = re.compile(r"^peak memory allocated: (\d+) MiB", re.M)
PREFILL = ("import torch, torch._dynamo, torch._inductor.compile_fx\n"  # a GPU compile loads Inductor's Triton code too
           "if torch.cuda.is_available(): torch.compile(lambda x: x + 1)(torch.ones(2, device='cuda'))")


@dataclass
class Run:
    name: str  # the run id: position, side, kind
    side: str  # "A" or "B"
    cold: bool  # start-up only, from empty caches
    seed: int
    caches: Path
    empty_caches: bool  # a cold start, or a side's first full run without one
    startup_s: float | None = None
    stage_ms: tuple = ()
    train_s: float | None = None
    val_loss: float | None = None
    peak_mib: int | None = None
    train_ms: dict[int, float] = field(default_factory=dict)  # step -> train time after it (ms): the stalls line
    scheduled_steps: int | None = None  # from the log's config line


def plan(cold: int, seeds: list[int], caches: Path) -> list[Run]:
    """The runs in machine order (see the module's docstring)."""
    runs = []
    for pair, seed in enumerate([None] * cold + seeds):
        for side in ("AB" if pair % 2 == 0 else "BA"):
            n = len(runs) + 1
            if seed is None:
                runs.append(Run(f"{n}_{side}_cold", side, True, 0, caches / f"{n}_{side}_cold", True))
                continue
            colds = [r.caches for r in runs if r.side == side and r.cold]
            k = sum(r.side == side and not r.cold for r in runs)  # this side's full runs so far
            own = colds[k % len(colds)] if colds else caches / side
            runs.append(Run(f"{n}_{side}_seed{seed}", side, False, seed, own, not colds and k == 0))
    return runs


def command(checkout: Path, nproc: int, flags: list[str], run: Run, out: Path) -> list[str]:
    launcher = [sys.executable] if nproc == 1 else ["torchrun", "--standalone", f"--nproc_per_node={nproc}"]
    return [*launcher, str(checkout / "train_gpt.py"), *flags, "--seed", str(run.seed), "--log_dir", str(out),
            "--run_id", run.name]


def run_env(out: Path, caches: Path) -> dict:
    """What a run changes in this process's environment: Python bytecode written to OUT/pycache, compile caches."""
    return {"PYTHONPYCACHEPREFIX": str(out / "pycache"), "TORCHINDUCTOR_CACHE_DIR": str(caches),
            "TRITON_CACHE_DIR": str(caches / "triton")}


def stop(proc: subprocess.Popen, sig: int = signal.SIGKILL):
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:  # already gone
        pass


def supervise(cmd: list[str], name: str, out: Path, caches: Path, timeout: float, poll=lambda proc: None) -> int:
    """Run cmd (output to OUT/<name>.console) in a session of its own, so that stopping it reaches torchrun's workers
    too, calling poll(proc) twice a second; returns its exit status. Nothing of it outlives this call."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | run_env(out, caches)
    console_path = out / f"{name}.console"
    with open(console_path, "w") as console:
        proc = subprocess.Popen(cmd, env=env, stdout=console, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        try:
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    raise UserError(f"{name} took over --timeout {timeout:g} s; its output: {console_path} (raise "
                                    "--timeout, or look for a hang there)")
                poll(proc)
                time.sleep(0.5)
        finally:  # Ctrl-C, the timeout or an error here: leave no training process behind
            stop(proc)
            proc.wait()
    return proc.returncode


def execute(cmd: list[str], run: Run, out: Path, timeout: float):
    """Run one; a cold start is stopped (SIGTERM, as Ctrl-C would) once its log says `startup:`."""
    log, console_path, stopped = out / f"{run.name}.txt", out / f"{run.name}.console", []

    def stop_at_startup(proc):
        if run.cold and not stopped and log.exists() and STARTUP.search(log.read_text(errors="replace")):
            stop(proc, signal.SIGTERM)
            stopped.append(True)
    status = supervise(cmd, run.name, out, run.caches, timeout, stop_at_startup)
    if not stopped and status != 0:
        raise UserError(f"run {run.name} failed (exit status {status}); its output: {console_path}")
    text = log.read_text(errors="replace") if log.exists() else ""
    if m := STARTUP.search(text):
        run.startup_s = float(m[1])
    elif run.cold:
        raise UserError(f"run {run.name} ended without a `startup:` line (a flag after -- such as --help or "
                        f"--check?); its output: {console_path}")
    if not run.cold:
        if not log.exists():
            raise UserError(f"run {run.name} wrote no log {log}; its output: {console_path}")
        parsed = parse_log(log)
        if not parsed.val:
            raise UserError(f"{log}: no final validation line; its output: {console_path}")
        run.stage_ms, (_, run.train_s, run.val_loss) = tuple(parsed.stage_ms), parsed.val[-1]
        run.train_ms, run.scheduled_steps = parsed.train_ms, parsed.scheduled_steps
        run.peak_mib = int(m[1]) if (m := PEAK.search(text)) else None


def median(values: list):
    return statistics.median(values) if values else None


def fmt(value, spec: str, unit: str = "") -> str:
    return "" if value is None else f"{value:{spec}}{unit}"


def table(runs: list[Run], a: Path, b: Path) -> str:
    lines = [f"A: {a}", f"B: {b}", "", "| run | side | seed | caches | start-up | ms/step by stage | train time | "
             "val loss | peak allocated |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in runs:
        stages = " / ".join(f"{ms:.1f}" for ms in r.stage_ms)
        lines.append(f"| {r.name} | {r.side} | {'' if r.cold else r.seed} | {'empty' if r.empty_caches else 'warm'} | "
                     f"{fmt(r.startup_s, '.1f', ' s')} | {stages} | {fmt(r.train_s, '.2f', ' s')} | "
                     f"{fmt(r.val_loss, '.4f')} | {fmt(r.peak_mib, ',', ' MiB')} |")
    lines += ["", "| medians | cold start | train time | val loss | ms/step by stage |", "| --- | --- | --- | --- | --- |"]
    cold, train, loss = {}, {}, {}  # by side: the cold starts' start-ups, the full runs' train times and val losses
    full = {side: [r for r in runs if r.side == side and not r.cold] for side in "AB"}
    for side in "AB":
        cold[side] = [r.startup_s for r in runs if r.side == side and r.cold]
        train[side], loss[side] = [r.train_s for r in full[side]], [r.val_loss for r in full[side]]
        stages = [median(list(ms)) for ms in zip(*(r.stage_ms for r in full[side]))]
        lines.append(f"| {side} | {fmt(median(cold[side]), '.1f', ' s')} | {fmt(median(train[side]), '.2f', ' s')} | "
                     f"{fmt(median(loss[side]), '.4f')} | {' / '.join(f'{ms:.1f}' for ms in stages)} |")
    ratio = (f"train time B/A {median(train['B']) / median(train['A']):.4f}" if train["A"] and train["B"] else
             "train time B/A: no full runs")
    start = (f"cold start B-A {median(cold['B']) - median(cold['A']):+.1f} s" if cold["A"] and cold["B"] else
             "cold start B-A: no cold starts")
    diff = f"val loss B-A {median(loss['B']) - median(loss['A']):+.4f}" if loss["A"] and loss["B"] else ""
    lines += ["", "; ".join(x for x in (ratio, start, diff) if x),
              stall_line([(r.name, r.train_ms, r.scheduled_steps) for r in full["A"] + full["B"] if r.scheduled_steps]),
              "",
              "| B against A, means | estimate | 95% interval | df | p, either way |",
              "| --- | --- | --- | --- | --- |"]
    comparisons = [(name, compare(values["A"], values["B"]), spec) for name, compare, spec, values in (
        ("train time B/A", stats.ratio, ".4f", train), ("cold start B/A", stats.ratio, ".4f", cold),
        ("val loss B-A", stats.difference, "+.4f", loss)) if values["A"] and values["B"]]
    by_seed = {side: {r.seed: r.val_loss for r in full[side]} for side in "AB"}
    if (full["A"] and sorted(by_seed["A"]) == sorted(by_seed["B"])  # a seed's own luck cancels in its pair
            and all(len(by_seed[side]) == len(full[side]) for side in "AB")):
        seeds = sorted(by_seed["A"])
        comparisons.append(("val loss B-A, seed by seed (paired t)",
                            stats.paired([by_seed["A"][s] for s in seeds], [by_seed["B"][s] for s in seeds]), "+.4f"))
    for name, c, spec in comparisons:
        lines.append(f"| {name} | {c.estimate:{spec}} | {stats.interval_text(c, spec)} | {fmt(c.df, '.1f')} | "
                     f"{fmt(c.p_two_sided, '.2g')} |")
    return "\n".join(lines) + "\n"


def checkout_dir(text: str) -> Path:
    path = Path(text).resolve()
    if not (path / "train_gpt.py").is_file():
        raise UserError(f"{text} holds no train_gpt.py; name a checkout of this project (its root folder)")
    return path


@cli.program
def main(argv=None):
    args_in = sys.argv[1:] if argv is None else list(argv)
    ours, flags = (args_in[:args_in.index("--")], args_in[args_in.index("--") + 1:]) if "--" in args_in \
        else (args_in, [])
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", required=True, help="the baseline checkout (its root folder)")
    p.add_argument("--b", required=True, help="the changed checkout")
    p.add_argument("--out", required=True, help="a new or empty folder for logs, caches and the table")
    p.add_argument("--cold", type=cli.whole(0), default=3, help="cold starts per side (default 3)")
    p.add_argument("--seeds", default="0,1,2", help="full runs' seeds, comma-separated; '' for none")
    p.add_argument("--nproc", type=cli.whole(1, 8), default=1, help="processes (GPUs) per run; >1 runs torchrun")
    p.add_argument("--timeout", type=cli.finite(), default=900.0, help="seconds one run may take (default 900)")
    p.add_argument("--dry_run", action="store_true", help="print the commands in order, run nothing")
    args = p.parse_args(ours)
    try:
        seeds = [cli.whole(0, 2**32 - 1)(s) for s in args.seeds.split(",") if s.strip()]
    except argparse.ArgumentTypeError:
        p.error(f"--seeds {args.seeds!r} is not comma-separated whole numbers in 0..{2**32 - 1:,}")
    if taken := [f for f in flags if f.split("=")[0] in OWN_FLAGS]:
        p.error(f"{', '.join(taken)} after -- : tools/ab.py sets {', '.join(OWN_FLAGS)} itself; leave them out")
    if args.cold == 0 and not seeds:
        p.error("nothing to run: --cold 0 and no --seeds")
    a, b = checkout_dir(args.a), checkout_dir(args.b)
    out = Path(args.out).resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out {args.out} exists and is not an empty folder; name a new one (runs never mix)")
    runs = plan(args.cold, seeds, out / "caches")
    cmds = [command(a if r.side == "A" else b, args.nproc, flags, r, out) for r in runs]
    prefill = out / "caches" / "prefill"
    if args.dry_run:
        for name, cmd, caches in [("prefill", [sys.executable, "-c", PREFILL], prefill),
                                  *((r.name, c, r.caches) for r, c in zip(runs, cmds))]:
            env = " ".join(f"{k}={v}" for k, v in run_env(out, caches).items())
            print(f"{name}: env -u PYTHONDONTWRITEBYTECODE {env} {shlex.join(cmd)}")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    # else the first run compiles torch's compiler to bytecode on its clock (records/enwiki-124/2026-11-27_ab-tool-a-a)
    if status := supervise([sys.executable, "-c", PREFILL], "prefill", out, prefill, args.timeout):
        raise UserError(f"filling the bytecode cache failed (exit status {status}; does torch import here?); its "
                        f"output: {out / 'prefill.console'}")
    for run, cmd in zip(runs, cmds):
        print(f"{run.name}: {shlex.join(cmd)}", flush=True)
        execute(cmd, run, out, args.timeout)
        print(f"  start-up {fmt(run.startup_s, '.1f', ' s')}" + ("" if run.cold else
              f", train time {fmt(run.train_s, '.2f', ' s')}, val loss {fmt(run.val_loss, '.4f')}"), flush=True)
    report = table(runs, a, b)
    (out / "ab.md").write_text(report)
    print(report, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
