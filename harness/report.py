"""What a run reports about itself: the training clock (validation, checkpoints and warm-up excluded; ms/step per
stage), torch.compile's share of the start-up, peak memory, and the end-of-run summary with MFU."""
import collections
import math
import resource
import time
from pathlib import Path

import torch

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

    def step_line(self, step: int, total: int, val_loss: float | None = None) -> str:
        """The log's line after `step` steps; with a val loss, the validation's (while paused)."""
        ms = self.now_ms() if val_loss is None else self.ms
        val = "" if val_loss is None else f" val_loss:{val_loss:.4f}"
        return f"step:{step}/{total}{val} train_time:{ms:.0f}ms step_avg:{ms / max(step, 1):.2f}ms"


def compile_time_breakdown() -> str:
    """Where torch.compile's share of the start-up went, from its own counters (seconds summed over all graphs)."""
    names, values = torch._dynamo.utils.compile_times(repr="csv")
    seconds = collections.Counter({name: sum(map(float, str(v).split(","))) for name, v in zip(names, values)})
    return (f"{seconds['_compile.compile_inner']:.1f}s in compiled frames (forward graphs incl. their Inductor work), "
            f"Inductor {seconds['compile_fx_inner']:.1f}s over forward and backward graphs, of which "
            f"{seconds['async_compile.wait'] + seconds['PyCodeCache.load_by_key_path']:.1f}s building and loading kernels")


def peak_memory(device: torch.device) -> str:
    if device.type == "cuda":
        return (f"peak memory allocated: {torch.cuda.max_memory_allocated() // 2**20} MiB "
                f"reserved: {torch.cuda.max_memory_reserved() // 2**20} MiB")
    # Linux reports the peak resident size in KiB
    return f"peak memory (resident): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 2**10} MiB"


def nominal_peak_tflops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((tflops for gpu, tflops in NOMINAL_BF16_TFLOPS.items() if gpu in name), None)


def summary(val_loss: float, vocab_size: int, val_files: str, clock: TrainClock, total_steps: int,
            step_tokens: dict[int, int], flops_per_token: float, device: torch.device, world_size: int,
            log_path: str) -> list[str]:
    """The end of the log, for people: loss against chance (and the data's floor, when a loss_floor.txt beside the
    validation shards states it), time, and per stage throughput and MFU. step_tokens: tokens per step by stage."""
    floor_file = Path(val_files).parent / "loss_floor.txt"
    floor = f"; the data's entropy floor {floor_file.read_text().strip()}" if floor_file.is_file() else ""
    lines = [f"summary: val loss {val_loss:.4f} (chance: log(vocab) = {math.log(vocab_size):.3f}{floor}); "
             f"train time {clock.ms / 1000:.1f} s over {total_steps} steps; log: {log_path}"]
    peak = nominal_peak_tflops(device)
    for i, ms in sorted(clock.stage_ms.items()):
        tokens_per_s = step_tokens[i] / (ms / 1000)
        mfu = (f"; MFU {100 * flops_per_token * tokens_per_s / (peak * 1e12 * world_size):.1f}% of the "
               f"nominal {peak:.0f} TFLOP/s bf16 peak per GPU" if peak else "")
        lines.append(f"stage {i + 1}: {ms:.1f} ms/step, {tokens_per_s:,.0f} tokens/s{mfu}")
    return lines
