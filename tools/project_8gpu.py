"""Projects this project's ms/step on 8xH100 (the record box) from one-GPU measurements, with a model calibrated on
the reference (modded-nanogpt PR #233), whose one-GPU times and published 8xH100 log are both known.

    python3 tools/project_8gpu.py --project_1gpu 224,428,637 --project_emulated8 31,56,82 \
        [--ledger LEDGER.json] [--ref_opt1_ms 6.0] [--ref_opt8_ms 1.0] [--bus_gbps 340] [--json OUT] \
        [--check 2 EMULATED_MS MEASURED_MS ...]

--project_1gpu: the project's ms/step by stage on one H100 (8 micro-batches per step); --project_emulated8: the same
with --emulate_world_size 8 (rank 0's whole share of an 8-GPU step, collectives skipped); --ledger: the JSON of
`tools/comm_ledger.py --world_size 8 --json FILE` (built here from train_gpt.py when omitted); --check W E M
(repeatable): the model's prediction of a world it can be checked on, W = 2 or 4, from an emulated rank of that world
(E, ms/step by stage) against that world's measured ms/step (M), with W's bytes (its ledger built here), and what the
projection becomes if world 8 pays the per-step time the model missed there.

Model, per stage s (stages 1-3; the 40 extension steps run at stage 3's rate):
    t8(s)      = compute(s) + alpha * comm(s)
    comm(s)    = sum over step kinds k of f_k(s) * wire_k(s) / B          (ms if fully exposed)
    reference: compute(s) = (t1(s) - t_opt1) / 8 + t_opt8,  alpha_s = (published(s) - compute(s)) / comm_ref(s)
    project:   compute(s) = emulated(s),                    alpha   = mean of the alpha_s (negatives clamped to 0)
f_k(s): the share of the stage's steps of kind k (even steps NorMuon only; odd steps NorMuon and Adam, with the
embedding tied to the head before step 967 and reduced/gathered separately after). wire_k(s): bytes each rank sends in a
step of kind k, from the ledger; the reference sends the same tensors in the same dtypes, plus the int32 index of
each bigram row its sparse all-to-all carries (and an 8 x int64 count exchange, left out: negligible).

Assumptions:
- Collectives are launched after the backward (explicit order, no hooks) and overlap only the optimizer's own
  math, so a fraction alpha of their wire time shows in the step time; alpha is one number for both codes.
- B = 340 GB/s: NCCL bus bandwidth per GPU of ring reduce-scatter on 8x H100 80GB HBM3 (NVLink 4, NVSwitch,
  no NVLS) at our message sizes: nccl-tests reduce_scatter_perf measured 331 GB/s at 256 MiB, 341 GB/s at
  512 MiB, 349 GB/s at 1 GiB, 362 GB/s at 8 GiB (https://github.com/NVIDIA/nccl/issues/1047); NCCL's maintainer
  gives ~370 GB/s as the effective NVLink 4 bus bandwidth (450 GB/s line rate less ~20% protocol overhead) for
  non-all-reduce collectives (https://github.com/NVIDIA/nccl-tests/issues/212). A wire byte takes 1/B: for a
  ring collective busbw = (W-1)/W x size / time, and the ledger's wire bytes are (W-1)/W x size.
- The reference cannot be run emulated: its 8-GPU compute is one-eighth of its one-GPU step without the
  optimizer, plus the optimizer on 1/8 shards. t_opt1/t_opt8 (optimizer GPU ms per step, same math as ours)
  default to estimates: ~4 ms of NorMuon on the 80M-element banks plus ~4 ms of Adam over ~460M table elements
  (~11 GB of memory traffic) every other step; on 1/8 shards ~1 ms, small kernels being launch-bound.
- A negative alpha_s means the compute estimate alone exceeds the published time (the one-GPU run is slower per
  micro-batch than an 8-GPU rank, e.g. host-limited in stage 1): it is printed, and clamped to 0 in the mean.
Uncertainty of a projected stage (ms), three independent parts added in quadrature: the calibration spread
(largest |alpha_s - alpha|, clamped, times the project's comm), the project's emulated time (+-MEASURE_REL), and
the reference's one-GPU times (+-MEASURE_REL moves alpha by MEASURE_REL * t1 / 8 / comm_ref, stages averaged).
Stage errors are taken as correlated: the total's uncertainty is their step-weighted sum.
"""
import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root
from harness import cli  # noqa: E402
from harness.cli import UserError  # noqa: E402
from harness.files import atomic_write, check_output  # noqa: E402

# The record's schedule: three equal stages of 1450 scheduled steps, then 40 extension steps at stage 3's batch.
STAGE_BOUNDS = (0, 483, 967, 1450, 1490)
UNTIE_STEP = 967  # the embedding is tied to the LM head before this step
STAGE_STEPS = tuple(hi - lo for lo, hi in zip(STAGE_BOUNDS, STAGE_BOUNDS[1:]))  # (483, 484, 483, 40)
STEP_KINDS = ("normuon", "adam_tied", "adam_untied")  # the ledger's kinds of step (tools/comm_ledger.py)

# The reference, modded-nanogpt PR #233 (FlashAttention-3):
REF_1GPU_MS = (263.0, 462.0, 674.0)  # one H100, 8 micro-batches per step, by stage (shared/BENCHMARK.md)
REF_8GPU_MS = (32.4, 58.7, 85.4)  # its published 8xH100 log, by stage
REF_8GPU_TOTAL_S = 88.8  # same log: train time of its 1490 steps
REF_INDEX_BYTES = 4  # its sparse all-to-all also sends an int32 row index per bigram row
MODEL_DIM = 768  # elements per bigram row

MEASURE_REL = 0.02  # one-GPU timings differ by about +-2% between machines of one kind
DEFAULT_BUS_GBPS = 340.0
DEFAULT_REF_OPT1_MS = 6.0  # estimate (see the docstring); the lead supplies profiled values
DEFAULT_REF_OPT8_MS = 1.0  # estimate


def kind_counts(lo: int, hi: int) -> dict[str, int]:
    """Steps of each kind among steps lo..hi-1: Adam on odd steps, tied before UNTIE_STEP."""
    assert hi <= UNTIE_STEP or lo >= UNTIE_STEP, "a stage must not straddle the untie"
    adam = sum(s % 2 for s in range(lo, hi))
    return {"normuon": hi - lo - adam, "adam_tied" if hi <= UNTIE_STEP else "adam_untied": adam}


def step_bytes(rows: list[dict], reference: bool) -> int:
    """Bytes one rank sends in a step with these collectives (ledger rows); reference: plus its row indices."""
    extra = sum(r["elements"] // MODEL_DIM * REF_INDEX_BYTES for r in rows if r["op"] == "all_to_all")
    return sum(r["wire_bytes"] for r in rows) + (extra if reference else 0)


def mean_step_bytes(stage_ledger: dict, counts: dict[str, int], reference: bool) -> float:
    """Bytes per step averaged over a stage's steps (kinds weighted by their counts)."""
    return sum(n * step_bytes(stage_ledger[k], reference) for k, n in counts.items()) / sum(counts.values())


def stage_bytes(ledger: dict, stage: int, reference: bool) -> float:
    """mean_step_bytes of stage (0-2) over its steps' kinds."""
    return mean_step_bytes(ledger[f"stage {stage + 1}"], kind_counts(*STAGE_BOUNDS[stage:stage + 2]), reference)


def comm_ms(nbytes: float, bus_gbps: float) -> float:
    """Wire time of nbytes at bus bandwidth bus_gbps (GB/s = 1e9 B/s), in ms."""
    return nbytes / bus_gbps / 1e6


def ref_compute_ms(t1_ms: float, opt1_ms: float, opt8_ms: float) -> float:
    """The reference's 8-GPU step without communication: one micro-batch plus the optimizer on 1/8 shards."""
    return (t1_ms - opt1_ms) / 8 + opt8_ms


def solve_alpha(published_ms: float, compute_ms: float, full_comm_ms: float) -> float:
    """The exposed fraction of communication that makes compute + alpha * comm equal the published time."""
    return (published_ms - compute_ms) / full_comm_ms


def predict_ms(compute_ms: float, alpha: float, full_comm_ms: float) -> float:
    return compute_ms + alpha * full_comm_ms


def total_s(stage_ms) -> float:
    """Train time in s of the 1490 steps from ms/step of stages 1-3 (the extension at stage 3's rate)."""
    return sum(ms * n for ms, n in zip((*stage_ms, stage_ms[2]), STAGE_STEPS)) / 1e3


def project(ledger: dict, project_1gpu, project_emulated8, ref_opt1_ms: float, ref_opt8_ms: float,
            bus_gbps: float) -> dict:
    """The calibration on the reference and the projection of the project, stage by stage (see the docstring)."""
    stages = []
    for s in range(3):
        counts = kind_counts(STAGE_BOUNDS[s], STAGE_BOUNDS[s + 1])
        st = ledger[f"stage {s + 1}"]
        ours, ref = stage_bytes(ledger, s, False), stage_bytes(ledger, s, True)
        compute, ref_comm = ref_compute_ms(REF_1GPU_MS[s], ref_opt1_ms, ref_opt8_ms), comm_ms(ref, bus_gbps)
        stages.append(dict(
            counts=counts, bytes_per_step=dict(project=ours, reference=ref),
            bytes_by_kind={k: dict(project=step_bytes(st[k], False), reference=step_bytes(st[k], True))
                           for k in counts},
            ref_1gpu_ms=REF_1GPU_MS[s], ref_compute_ms=compute, ref_comm_ms=ref_comm, ref_published_ms=REF_8GPU_MS[s],
            alpha=solve_alpha(REF_8GPU_MS[s], compute, ref_comm),
            project_1gpu_ms=project_1gpu[s], project_emulated_ms=project_emulated8[s],
            project_compute_est_ms=ref_compute_ms(project_1gpu[s], ref_opt1_ms, ref_opt8_ms),
            project_comm_ms=comm_ms(ours, bus_gbps)))
    clamped = [max(st["alpha"], 0.0) for st in stages]
    alpha = sum(clamped) / len(clamped)
    d_alpha_fit = max(abs(a - alpha) for a in clamped)
    d_alpha_ref = sum(MEASURE_REL * st["ref_1gpu_ms"] / 8 / st["ref_comm_ms"] for st in stages) / len(stages)
    for st in stages:
        st["ref_predicted_ms"] = predict_ms(st["ref_compute_ms"], alpha, st["ref_comm_ms"])
        st["project_predicted_ms"] = predict_ms(st["project_emulated_ms"], alpha, st["project_comm_ms"])
        st["project_uncertainty_ms"] = math.hypot(d_alpha_fit * st["project_comm_ms"],
                                                  d_alpha_ref * st["project_comm_ms"],
                                                  MEASURE_REL * st["project_emulated_ms"])
    return dict(
        bus_gbps=bus_gbps, ref_opt1_ms=ref_opt1_ms, ref_opt8_ms=ref_opt8_ms, alpha=alpha,
        alpha_fit_spread=d_alpha_fit, alpha_ref_measurement=d_alpha_ref, stages=stages,
        project_total_s=total_s([st["project_predicted_ms"] for st in stages]),
        project_total_uncertainty_s=total_s([st["project_uncertainty_ms"] for st in stages]),
        ref_total_from_stages_s=total_s(REF_8GPU_MS), ref_total_published_s=REF_8GPU_TOTAL_S)


def check_world(ledger: dict, alpha: float, emulated, measured, bus_gbps: float) -> dict:
    """The model at a measured world: each stage's emulated rank plus alpha times its collectives at that world's bytes
    (ledger: comm_ledger.ledgers(world)), against the measured ms/step; missed: what the prediction fell short by."""
    stages = []
    for s in range(3):
        comm = comm_ms(stage_bytes(ledger, s, False), bus_gbps)
        predicted = predict_ms(emulated[s], alpha, comm)
        stages.append(dict(emulated_ms=emulated[s], comm_ms=comm, predicted_ms=predicted, measured_ms=measured[s],
                           missed_ms=measured[s] - predicted))
    return dict(stages=stages, missed_total_s=total_s([st["missed_ms"] for st in stages]))


def report(r: dict) -> str:
    stages = r["stages"]
    lines = [f"8xH100 projection: bus bandwidth B = {r['bus_gbps']:g} GB/s per GPU; reference optimizer "
             f"t_opt1 = {r['ref_opt1_ms']:g} ms, t_opt8 = {r['ref_opt8_ms']:g} ms per step", "",
             "bytes each rank sends per step, MB (1e6 B): by step kind, and the stage's mean over its steps",
             f"{'':9}{'steps (normuon+adam)':>22} {'':>11}{'project':>10}{'reference':>11}"]
    for i, st in enumerate(stages, 1):
        counts = " + ".join(str(n) for n in st["counts"].values())
        for j, (kind, b) in enumerate(st["bytes_by_kind"].items()):
            lines.append(f"{f'stage {i}' if j == 0 else '':9}{counts if j == 0 else '':>22} {kind:>11}"
                         f"{b['project'] / 1e6:>10.1f}{b['reference'] / 1e6:>11.1f}")
        b = st["bytes_per_step"]
        lines.append(f"{'':9}{'':>22} {'mean':>11}{b['project'] / 1e6:>10.1f}{b['reference'] / 1e6:>11.1f}")
    lines += ["", "reference (PR #233), ms/step:",
              f"{'':9}{'1-GPU':>8}{'compute':>9}{'comm':>7}{'alpha':>8}{'predicted':>11}{'published':>11}"]
    for i, st in enumerate(stages, 1):
        flag = "  (< 0: clamped to 0 in the mean)" if st["alpha"] < 0 else ""
        lines.append(f"{f'stage {i}':9}{st['ref_1gpu_ms']:>8.1f}{st['ref_compute_ms']:>9.2f}{st['ref_comm_ms']:>7.2f}"
                     f"{st['alpha']:>8.3f}{st['ref_predicted_ms']:>11.2f}{st['ref_published_ms']:>11.1f}{flag}")
    lines += [f"alpha = {r['alpha']:.3f}, the mean (spread +-{r['alpha_fit_spread']:.3f}; reference 1-GPU timing "
              f"+-{r['alpha_ref_measurement']:.3f}): 'predicted' uses it (each stage's own alpha gives 'published')",
              "", "project, ms/step ((t1-o1)/8+o8: the reference's compute estimate applied to the project's 1-GPU "
              "time, a check on it):",
              f"{'':9}{'1-GPU':>8}{'(t1-o1)/8+o8':>13}{'emulated':>10}{'comm':>7}{'exposed':>9}{'predicted':>17}"]
    for i, st in enumerate(stages, 1):
        lines.append(f"{f'stage {i}':9}{st['project_1gpu_ms']:>8.1f}{st['project_compute_est_ms']:>13.2f}"
                     f"{st['project_emulated_ms']:>10.2f}{st['project_comm_ms']:>7.2f}"
                     f"{r['alpha'] * st['project_comm_ms']:>9.2f}"
                     f"{st['project_predicted_ms']:>10.2f} +- {st['project_uncertainty_ms']:.2f}")
    lines += ["", f"train time of 1490 steps ({' + '.join(map(str, STAGE_STEPS))}, the extension at stage 3's rate):",
              f"  project   {r['project_total_s']:.1f} +- {r['project_total_uncertainty_s']:.1f} s (projected)",
              f"  reference {r['ref_total_published_s']:.1f} s published ({r['ref_total_from_stages_s']:.1f} s from "
              f"its stage rates): project {r['project_total_s'] - r['ref_total_published_s']:+.1f} s"]
    for world, c in r.get("checks", {}).items():
        lines += ["", f"the model at world {world}, measured: emulated rank + alpha x its collectives, ms/step:",
                  f"{'':9}{'emulated':>10}{'comm':>7}{'predicted':>11}{'measured':>10}{'missed':>9}"]
        for i, st in enumerate(c["stages"], 1):
            missed = st["missed_ms"]
            lines.append(f"{f'stage {i}':9}{st['emulated_ms']:>10.2f}{st['comm_ms']:>7.2f}{st['predicted_ms']:>11.2f}"
                         f"{st['measured_ms']:>10.2f}{missed:>+9.2f} ({missed / st['measured_ms']:+.1%})")
        lines.append(f"  if world 8 pays what the model missed here: project "
                     f"{r['project_total_s'] + c['missed_total_s']:.1f} s ({c['missed_total_s']:+.1f} s)")
    return "\n".join(lines)


def three_floats(text: str) -> tuple:
    """An argparse type: ms/step of stages 1-3, finite and > 0."""
    try:
        values = tuple(cli.number(v) for v in text.split(","))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{e} (give ms/step of stages 1-3 as a,b,c)") from None
    if len(values) != 3:
        raise argparse.ArgumentTypeError(f"expected 3 comma-separated ms values (stages 1-3), got {text!r}")
    return values


def load_ledger(path) -> dict:
    """The stages of a `tools/comm_ledger.py --world_size 8 --json` file, checked: every stage and kind of step,
    each sending a finite, positive number of bytes. UserError names the file and what is wrong."""
    try:
        data = json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        where = f"{path}:{e.lineno}" if isinstance(e, json.JSONDecodeError) else str(path)
        raise UserError(f"{where}: not JSON ({e}); pass the file `tools/comm_ledger.py --json` writes") from None

    def bad(problem):
        return UserError(f"{path}: {problem}; write it again with tools/comm_ledger.py --world_size 8 --json FILE")
    if not isinstance(data, dict) or not isinstance(data.get("stages"), dict):
        raise bad("not a ledger (no stages)")
    if data.get("world_size") != 8:
        raise bad(f"world size {data.get('world_size')!r}, the projection needs 8")
    for s in (1, 2, 3):
        stage = data["stages"].get(f"stage {s}")
        for kind in STEP_KINDS:
            rows = stage.get(kind) if isinstance(stage, dict) else None
            if not isinstance(rows, list):
                raise bad(f"no list of collectives for stage {s}, {kind} steps")
            for r in rows:
                if not isinstance(r, dict) or not isinstance(r.get("op"), str):
                    raise bad(f"stage {s}, {kind} steps: {str(r)[:60]} is not a collective with an op")
                try:
                    cli.number(r.get("elements"), above=False)
                    cli.number(r.get("wire_bytes"), above=False)
                except ValueError as e:
                    raise bad(f"stage {s}, {kind} steps, {r['op']} of {r.get('param')}: elements and wire_bytes "
                              f"must be numbers >= 0 ({e})") from None
            if not sum(r["wire_bytes"] for r in rows) > 0:  # the calibration divides by the bytes
                raise bad(f"stage {s}, {kind} steps send no bytes")
    return data["stages"]


@cli.program
def main(argv=None):
    parser = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--project_1gpu", type=three_floats, required=True, help="ms/step by stage, one GPU")
    parser.add_argument("--project_emulated8", type=three_floats, required=True,
                        help="ms/step by stage with --emulate_world_size 8")
    parser.add_argument("--ledger", help="tools/comm_ledger.py --world_size 8 --json output (default: build it)")
    parser.add_argument("--ref_opt1_ms", type=cli.finite(above=False), default=DEFAULT_REF_OPT1_MS)
    parser.add_argument("--ref_opt8_ms", type=cli.finite(above=False), default=DEFAULT_REF_OPT8_MS)
    parser.add_argument("--bus_gbps", type=cli.finite(), default=DEFAULT_BUS_GBPS)
    parser.add_argument("--json", help="also write the results as JSON")
    parser.add_argument("--check", nargs=3, action="append", default=[], metavar=("WORLD", "EMULATED", "MEASURED"),
                        help="world 2 or 4: its emulated rank's and its measured ms/step by stage (repeatable)")
    args = parser.parse_args(argv)
    checks = {}
    for world, emulated, measured in args.check:
        if world not in ("2", "4"):
            raise UserError(f"--check {world}: the model is checked at world 2 or 4 (8 is what it projects)")
        if int(world) in checks:
            raise UserError(f"--check {world} is given twice; give each world once")
        try:
            checks[int(world)] = (three_floats(emulated), three_floats(measured))
        except argparse.ArgumentTypeError as e:
            raise UserError(f"--check {world} {emulated} {measured}: {e}") from None
    if args.ref_opt1_ms >= min(REF_1GPU_MS):
        raise UserError(f"--ref_opt1_ms {args.ref_opt1_ms:g} must be below the reference's one-GPU step "
                        f"({min(REF_1GPU_MS):g} ms in stage 1): it is the optimizer's share of that step")
    if args.json:
        check_output(args.json, [args.ledger] if args.ledger else [])
    if checks or not args.ledger:
        from tools.comm_ledger import ledgers  # torch and train_gpt.py: only when needed
    ledger = load_ledger(args.ledger) if args.ledger else ledgers(8)
    result = project(ledger, args.project_1gpu, args.project_emulated8, args.ref_opt1_ms, args.ref_opt8_ms,
                     args.bus_gbps)
    if checks:
        result["checks"] = {world: check_world(ledgers(world), result["alpha"], *times, args.bus_gbps)
                            for world, times in checks.items()}
    print(report(result))
    if args.json:
        atomic_write(args.json, lambda f: f.write(json.dumps(result, indent=1).encode()))


if __name__ == "__main__":
    main()
