"""What a run reports about itself: the training clock (validation, checkpoints and warm-up excluded; ms/step per
stage), torch.compile's share of the start-up and each rank's compiled graphs, peak memory, and the end-of-run summary
with MFU."""
import collections
import math
import resource
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor

# Dense bf16 tensor-core peaks from the datasheets (SXM parts), for MFU: nominal, not measured
NOMINAL_BF16_TFLOPS = {"H100": 989.4, "H200": 989.4, "A100": 312.0}


class TrainClock:
    """Training time in ms, which stops while paused (validations, checkpoints), and each stage's ms/step. It
    waits for the device only when paused and at stage ends: the per-step reading is the host's, ahead of the
    device by the queued work."""

    def __init__(self, bounds: list[int], sync, resumed: dict | None = None):
        """bounds: the first step of each stage, then the total; sync: waits for the device; resumed: state()."""
        self.bounds, self.sync = bounds, sync
        resumed = resumed or dict(train_ms=0.0, stage_ms={}, stage_start_ms=0.0)
        self.ms, self.stage_start_ms = resumed["train_ms"], resumed["stage_start_ms"]
        self.stage_ms = dict(resumed["stage_ms"])
        self.t0 = None

    def state(self) -> dict:
        return dict(train_ms=self.ms, stage_ms=dict(self.stage_ms), stage_start_ms=self.stage_start_ms)

    def now_ms(self) -> float:
        return self.ms + 1000 * (time.perf_counter() - self.t0)

    def start(self):
        self.sync()
        self.t0 = time.perf_counter()

    def pause(self):
        self.sync()
        self.ms = self.now_ms()

    def at_step(self, step: int):
        """Before `step` runs: if a stage just ended, its ms/step."""
        if step > 0 and step in self.bounds:
            self.sync()
            ended = self.bounds.index(step) - 1
            self.stage_ms[ended] = (self.now_ms() - self.stage_start_ms) / (step - self.bounds[ended])
            self.stage_start_ms = self.now_ms()

    def stage_line(self) -> str:
        return "ms/step by stage: " + " ".join(f"{i + 1}:{ms:.1f}" for i, ms in sorted(self.stage_ms.items()))

    def val_line(self, step: int, total: int, val_loss: float) -> str:
        """The log's line of a validation after `step` steps (while paused)."""
        avg = self.ms / step if step else 0.0  # before the first step nothing was timed
        return f"step:{step}/{total} val_loss:{val_loss:.4f} train_time:{self.ms:.0f}ms step_avg:{avg:.2f}ms"


class StepLines:
    """The log's line of each step, `step:N/T train_loss:L grad_norm:G train_time:Tms step_avg:Ams`: L is the
    step's training loss per token (MTP-weighted), G the norm of that loss's gradient of the weight banks, reduced
    over ranks (NorMuon's matrices, updated every step; Adam's parameters step every other step). They stay on the device (metrics: a row per step of this rank's shares, summed over ranks when
    read) until reading them costs no wait: publish() starts copying the rows so far to the host at a guard check and
    the next check prints them, long arrived by then; flush() prints at once where the loop waits anyway
    (validations, checkpoints, the end). One process on a CPU never waits: it prints every step at once."""

    def __init__(self, metrics: Tensor, clock: TrainClock, total: int, log, distributed: bool):
        """metrics: (steps, 3) fp32, row r = step r's shares of [loss, squared NorMuon and Adam gradient norms]."""
        self.metrics, self.clock, self.total, self.log, self.distributed = metrics, clock, total, log, distributed
        self.host = torch.zeros(metrics.shape, pin_memory=metrics.is_cuda)
        self.copied = torch.cuda.Event() if metrics.is_cuda else None
        self.times: dict[int, float] = {}  # steps done -> host ms then, for lines still waiting for their values
        self.published = 0  # rows below this are on their way to (or in) self.host
        self.at_once = not (metrics.is_cuda or distributed)

    def step_done(self, done: int):
        """`done` steps are done (their last is row done - 1)."""
        self.times[done] = self.clock.now_ms()
        if self.at_once:
            self.flush(done)

    def publish(self, done: int):
        """Start copying the rows of the first `done` steps that still wait, summed over ranks (every rank calls)."""
        if not self.times:
            return
        lo = min(self.times) - 1
        rows = self.metrics[lo:done].clone()
        if self.distributed:
            dist.all_reduce(rows)
        self.host[lo:done].copy_(rows, non_blocking=True)
        if self.copied is not None:
            self.copied.record()
        self.published = done

    def print_published(self):
        if self.copied is not None:
            self.copied.synchronize()
        for done in sorted(n for n in self.times if n <= self.published):
            loss, grad_sq, _ = self.host[done - 1].tolist()
            ms = self.times.pop(done)
            self.log(f"step:{done}/{self.total} train_loss:{loss:.4f} grad_norm:{math.sqrt(max(grad_sq, 0.0)):.4f} "
                     f"train_time:{ms:.0f}ms step_avg:{ms / done:.2f}ms")

    def flush(self, done: int):
        self.publish(done)
        self.print_published()


def compile_time_breakdown() -> str:
    """Where torch.compile's share of the start-up went, from its own counters (seconds summed over all graphs)."""
    names, values = torch._dynamo.utils.compile_times(repr="csv")
    seconds = collections.Counter({name: sum(map(float, str(v).split(","))) for name, v in zip(names, values)})
    return (f"{seconds['_compile.compile_inner']:.1f}s in compiled frames (forward graphs incl. their Inductor work), "
            f"Inductor {seconds['compile_fx_inner']:.1f}s over forward and backward graphs, of which "
            f"{seconds['async_compile.wait'] + seconds['PyCodeCache.load_by_key_path']:.1f}s building and loading kernels")


def compiled_by_rank(world_size: int) -> str:
    """Every rank's count of the graphs it compiled itself (Inductor's cache misses), gathered after the warm-up; the
    gather waits for every rank, as a barrier would. Ranks compile the same graphs: one that compiled more found none
    of what its compile helpers made for it, unseen in rank 0's `compile helpers:` line (rank 1 once compiled its
    NorMuon graphs itself: records/enwiki-124/2026-11-29_helpers-early-own-rank)."""
    counts = [None] * world_size
    dist.all_gather_object(counts, torch._dynamo.utils.counters["inductor"]["fxgraph_cache_miss"])
    return f"graphs each rank compiled itself: {', '.join(map(str, counts))}"


def peak_memory(device: torch.device) -> str:
    if device.type == "cuda":
        return (f"peak memory allocated: {torch.cuda.max_memory_allocated() // 2**20} MiB "
                f"reserved: {torch.cuda.max_memory_reserved() // 2**20} MiB")
    # Linux reports the peak resident size in KiB
    return f"peak memory (resident): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 2**10} MiB"


def summary(val_loss: float, vocab_size: int, val_files: str, clock: TrainClock, total_steps: int,
            step_tokens: dict[int, int], flops_per_token: float, device: torch.device, world_size: int,
            log_path: str) -> list[str]:
    """The end of the log, for people: loss against chance (and the data's floor, when a loss_floor.txt beside the
    validation shards states it), time, and per stage throughput and MFU. step_tokens: tokens per step by stage."""
    floor_file = Path(val_files).parent / "loss_floor.txt"
    floor = f"; the data's entropy floor {floor_file.read_text().strip()}" if floor_file.is_file() else ""
    lines = [f"summary: val loss {val_loss:.4f} (chance: log(vocab) = {math.log(vocab_size):.3f}{floor}); "
             f"train time {clock.ms / 1000:.1f} s over {total_steps} steps; log: {log_path}"]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
    peak = next((tflops for gpu, tflops in NOMINAL_BF16_TFLOPS.items() if gpu in name), None)
    for i, ms in sorted(clock.stage_ms.items()):
        tokens_per_s = step_tokens[i] / (ms / 1000)
        mfu = (f"; MFU {100 * flops_per_token * tokens_per_s / (peak * 1e12 * world_size):.1f}% of the "
               f"nominal {peak:.0f} TFLOP/s bf16 peak per GPU" if peak else "")
        lines.append(f"stage {i + 1}: {ms:.1f} ms/step, {tokens_per_s:,.0f} tokens/s{mfu}")
    return lines
