"""Looking inside the timed steps: a torch.profiler trace of chosen steps (--profile_steps), and PyTorch's warning
on every device-to-host sync (--sync_debug)."""
import contextlib
import os

import torch


class StepProfiler:
    """--profile_steps "a:b": a Chrome trace of steps a..b-1 on rank 0, written to <log_dir>/<run_id>_trace.json
    (open it in Perfetto; look for communication kernels not overlapped by compute). Off: step() does nothing.
    first: the loop's first step, a resumed run's step; the trace's ProfilerStep#N ranges count from it (N = step -
    first). step() is called after each step."""

    def __init__(self, steps: str, first: int, log_dir: str, run_id: str, device: torch.device, is_master: bool, log):
        self.profiler = None
        if not steps or not is_master:
            return
        start, stop = (int(x) for x in steps.split(":"))
        if start < first:  # the trace is a by-product: a resumed run says why it has none, and trains on
            log(f"no profiler trace: --profile_steps {steps} starts before step {first}, where this run resumed")
            return
        path = os.path.join(log_dir, f"{run_id}_trace.json")
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)

        def save(prof):
            try:
                prof.export_chrome_trace(path)
            except OSError as e:  # the trace is a by-product: say why it is missing, keep training
                log(f"profiler trace of steps {start}..{stop - 1} not written: {path}: {e.strerror or e}")
                return
            log(f"profiler trace of steps {start}..{stop - 1}: {path}")
        # one step of warm-up, traced and dropped: the profiler's own start held the GPU idle ~4.5 ms in the first
        # traced step, which read as idle time of every step (records/enwiki-124/2026-11-29_vs-reference-world2-e8d42d3)
        warmup = min(start - first, 1)
        self.profiler = torch.profiler.profile(
            activities=activities, on_trace_ready=save,
            schedule=torch.profiler.schedule(wait=start - first - warmup, warmup=warmup, active=stop - start, repeat=1))
        self.profiler.start()

    def step(self):
        if self.profiler is not None:
            self.profiler.step()


@contextlib.contextmanager
def sync_debug(on: bool):
    """Within: PyTorch warns about every device-to-host sync (CUDA only)."""
    if not on:
        yield
        return
    torch.cuda.set_sync_debug_mode("warn")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(0)
