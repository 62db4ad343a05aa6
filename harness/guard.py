"""The training loop's safety checks: a non-finite loss or gradient is caught without per-step host syncs, the
failing step is captured (the state before it and its batches: save_capture) for tools/replay.py, a signal stops
the run at a step boundary where every rank agrees, and a run that ends on a failure says why in one line."""
import signal
import threading

import torch
import torch.distributed as dist
from torch import Tensor

from harness.checkpoint import save_atomically
from harness.cli import stderr_line
from harness.launch import Watchdog, peer_failure


class NonFiniteError(RuntimeError):
    """Training produced a non-finite loss or gradient; the message says where the capture is."""


class Stopped(RuntimeError):
    """The run stopped on a signal; the message says where it was saved."""


class NonFiniteGuard:
    """Remembers on the device the first step whose losses or reduced gradient shards were not all finite, and
    whether a rank was asked to stop (so that all ranks stop at the same step).

    observe() folds in values the step computes anyway (its loss and the squared norm of the gradient shards the
    optimizer read): no host sync, no extra pass over the full gradients. publish() starts copying
    the flags, agreed over ranks, to the host; published() reads the copy started at the previous check, long
    done by then, so the loop never drains the GPU's queue for it. read() is the waiting version, for points
    where the loop waits anyway (validations)."""
    NONE = 2**62

    def __init__(self, device: torch.device, distributed: bool):
        self.flags = torch.tensor([self.NONE, 0], dtype=torch.int64, device=device)  # [first bad step, -stop]
        self.distributed = distributed
        self._host = self.flags.new_empty(2, device="cpu", pin_memory=device.type == "cuda").copy_(self.flags)
        self._copied = torch.cuda.Event() if device.type == "cuda" else None

    def observe(self, step: int, values: Tensor):
        bad = ~torch.isfinite(values).all()
        self.flags[0] = torch.where(bad & (self.flags[0] == self.NONE), step, self.flags[0])

    def request_stop(self):
        self.flags[1] = -1

    def _agreed(self) -> Tensor:
        flags = self.flags.clone()
        if self.distributed:  # the first bad step of any rank; -1 if any rank asks to stop
            dist.all_reduce(flags, op=dist.ReduceOp.MIN)
        return flags

    def publish(self):
        self._host.copy_(self._agreed(), non_blocking=True)
        if self._copied is not None:
            self._copied.record()

    def published(self) -> tuple[int | None, bool]:
        """(first bad step or None, whether a rank asked to stop) as of the previous publish()."""
        if self._copied is not None:
            self._copied.synchronize()
        return self._decode(self._host.tolist())

    def read(self) -> tuple[int | None, bool]:
        """The same, as of now (waits for the device)."""
        return self._decode(self._agreed().tolist())

    def _decode(self, flags: list[int]) -> tuple[int | None, bool]:
        return (None if flags[0] == self.NONE else flags[0]), flags[1] < 0

    def reset(self):
        self.flags.copy_(torch.tensor([self.NONE, 0]))
        self._host.copy_(self.flags)


class StopRequest:
    """SIGINT or SIGTERM during the training loop: stop at a step boundary (the next one in one process; on
    several ranks, the one where they agree: the guard's check after next), log why and save a checkpoint.
    During start-up, or a second time, stop at once."""

    def __init__(self):
        self.reason, self.in_loop = None, False
        self.saved = lambda: "nothing saved"  # what a stop at once leaves: Watch sets it to the run's checkpoints'

    def install(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():  # the only thread that may set handlers
            signal.signal(signal.SIGINT, self)
            signal.signal(signal.SIGTERM, self)
        return self

    def __call__(self, signum, frame):
        name = signal.Signals(signum).name
        if not self.in_loop or self.reason is not None:
            raise KeyboardInterrupt(f"{name}; {self.saved()}")
        self.reason = name
        stderr_line(f"{name}: stopping at a step boundary to save the run (send it again to stop at once)")


class Watch:
    """The checks of the training loop, every `every` steps and at validations (every = 0: none).

    Keeps two snapshots of the trainer's state: `good`, the state at the last check known finite, and `pending`,
    taken at the latest check and known finite once the next check reads the flags published with it. Validations
    wait for the device anyway, so they read the flags at once. On a non-finite value it saves `good` as a
    checkpoint (if checkpoints are on), has the failing step captured and raises NonFiniteError.

    snapshot(step, into): a copy of the trainer's state at `step` (into: an earlier snapshot's buffers, or None);
    capture(good, bad_step, detected_at): rewinds to `good`, re-runs to the failing step, saves it (save_capture),
    returns the path;
    watchdog: the Watchdog (harness/launch.py), which ends this process when the loop stops moving.
    """

    def __init__(self, guard: NonFiniteGuard, every: int, snapshot, capture, stop: StopRequest, checkpoints, log,
                 watchdog: Watchdog):
        self.guard, self.every, self.snapshot, self.capture = guard, every, snapshot, capture
        self.stop, self.checkpoints, self.log, self.watchdog = stop, checkpoints, log, watchdog
        self.distributed = guard.distributed
        stop.saved = checkpoints.newest_line

    def begin(self, start: int, lines):
        """lines: the StepLines, whose values the checks copy to the host as they go."""
        self.start, self.lines, self.pending = start, lines, None
        self.good = self.snapshot(start, None) if self.every > 0 else None
        # ranks agree on a stop through the checks: without them, a signal stops at once (nothing saved)
        self.stop.in_loop = not (self.distributed and self.every == 0)

    def end(self):
        self.stop.in_loop = False
        self.watchdog.disarm()

    def check(self, step: int, validate: bool) -> bool:
        """Before `step`: raises NonFiniteError if a step so far went non-finite; says whether to stop here."""
        self.watchdog.beat(step)
        stopping = self.stop.reason is not None and not self.distributed  # one process: at once; ranks: agreed
        if step > self.start and self.every > 0 and (validate or step % self.every == 0):  # the guard's cost
            with torch.profiler.record_function("guard_check"):  # a named range in --profile_steps traces
                stopping = self._check(step, validate) or stopping
        return stopping

    def _check(self, step: int, validate: bool) -> bool:
        if self.stop.reason is not None:
            self.guard.request_stop()
        bad, stop = self.guard.read() if validate else self.guard.published()
        if not validate:  # a validation prints every line anyway
            self.lines.print_published()
            self.lines.publish(step)
        if bad is not None:
            self.lines.flush(step)  # up to the failure and past it: NaN
            if self.checkpoints.enabled:
                nothing_timed = dict(train_ms=float("nan"), stage_ms={}, stage_start_ms=float("nan"))
                path = self.checkpoints.save(self.good, nothing_timed)
                self.log(f"checkpoint of step {self.good['step']}, the last known finite: {path}")
            path = self.capture(self.good, bad, step)
            raise NonFiniteError(f"non-finite loss or gradient at step {bad} (noticed at step {step}); "
                                 f"capture of the state before it and its batch: {path} (one per rank). "
                                 f"Replay: python3 tools/replay.py {path}")
        if validate:  # everything so far is known finite
            self.good, self.pending = self.snapshot(step, self.pending or self.good), None
        else:
            self.good, self.pending = (self.pending or self.good), self.snapshot(
                step, self.good if self.pending else None)
            self.guard.publish()
        return stop


def save_capture(path: str, header: dict, state: dict, batches: list, sched, bad_step: int, detected_at: int,
                 grad_accum_steps: int, rerun, guard: NonFiniteGuard) -> str:
    """Watch's capture of a non-finite step, for tools/replay.py, saved at `path` (returned): the state before the step
    (a checkpoint's keys, on the host) with its micro-batches and forward schedule; rerun() then runs the step again,
    and `guard` says whether the failure reproduced."""
    capture = dict(
        header, state=state, detected_at=detected_at, grad_accum_steps=grad_accum_steps,
        forward=dict(short_window=sched.short_window, long_window=sched.long_window, max_seq_len=sched.max_seq_len,
                     mtp_weights=sched.mtp_weights.tolist()),
        # nothing random runs in a step: no RNG state is needed
        batches=[dict(vars(mb)) for mb in batches])  # host tensors (make_micro_batch)
    guard.reset()
    rerun()
    capture["reproduced"] = guard.read()[0] == bad_step
    save_atomically(capture, path)
    return path


def run_ending(e: BaseException) -> str | None:
    """The line a run ends with on an outcome of its own, or None: harness/cli.program's `ending` for train_gpt.py,
    which exits with status 1 after it. A non-finite loss, a stop (saved), a signal during start-up or a second one
    (nothing saved), a peer process that died: each its one line, not a traceback."""
    if isinstance(e, NonFiniteError):
        return f"error: {e}"
    if isinstance(e, Stopped):
        return str(e)
    if isinstance(e, KeyboardInterrupt):
        # once StopRequest is installed, a KeyboardInterrupt names its signal and what is saved (before: Python's own)
        name, _, saved = (str(e) or "SIGINT").partition("; ")
        return f"interrupted by {name}: stopped at once, {saved or 'nothing saved'}"
    return peer_failure(e)
