"""The launch: the environment torchrun (or a person) sets for each process, checked with one-line errors; the
process group formed within a bounded wait; the process's Runtime (rank, device, attention kernel); every rank's
settings and data agreed; a watchdog that ends a process whose loop stopped moving; a CPU process's memory kept."""
import ctypes
import datetime
import hashlib
import itertools
import os
import signal
import threading
import time
from dataclasses import dataclass

from harness.cli import UserError, stderr_line

HOW = "launch with torchrun --standalone --nproc_per_node=N train_gpt.py (it sets them), or unset them for one process"


@dataclass(frozen=True)
class Launch:
    rank: int
    world_size: int
    local_rank: int


def read_launch(environ=os.environ) -> Launch:
    """RANK, WORLD_SIZE and LOCAL_RANK (absent: one process), checked; several processes also need MASTER_ADDR and
    MASTER_PORT, where rank 0 waits for the others."""
    def integer(name: str, default: int, low: int) -> int:
        text = environ.get(name)
        if text is None:
            return default
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise UserError(f"{name}={text!r} must be an integer of at least {low}; {HOW}")
        return value
    world_size = integer("WORLD_SIZE", 1, 1)
    rank, local_rank = integer("RANK", 0, 0), integer("LOCAL_RANK", 0, 0)
    if rank >= world_size:
        raise UserError(f"RANK={rank} must be below WORLD_SIZE={world_size}; {HOW}")
    if world_size > 1:
        missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not environ.get(name)]
        if missing:
            raise UserError(f"WORLD_SIZE={world_size} needs {' and '.join(missing)} (where rank 0 waits for "
                            f"the others); {HOW}")
    return Launch(rank, world_size, local_rank)


def form_group(launch: Launch, backend: str, device, timeout_s: float):
    """Join the other processes, waiting at most timeout_s for them (also the limit of every collective later).
    While this blocks inside C++, Python's signal handlers cannot run: SIGINT and SIGTERM end the process at once."""
    import torch.distributed as dist  # here: read_launch() runs before train_gpt.py imports torch
    handlers = {sig: signal.signal(sig, signal.SIG_DFL) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        dist.init_process_group(backend=backend, device_id=device, timeout=datetime.timedelta(seconds=timeout_s))
    except (RuntimeError, ValueError, TimeoutError) as e:  # torch's store and network errors are RuntimeErrors
        where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
        raise UserError(f"rank {launch.rank} of {launch.world_size} could not join the others at {where} "
                        f"within --dist_timeout {timeout_s:g} s ({(str(e).splitlines() or [''])[0]}); start every "
                        "rank (torchrun --nproc_per_node=N starts them all), or raise --dist_timeout") from None
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


class Watchdog:
    """Ends this process with one line when the training loop makes no progress for timeout_s: a peer that died
    leaves the others blocked inside a collective, and a compile, kernel or read that hangs blocks one process, where
    no signal handler or exception reaches them. A thread checks every few seconds; beat() is cheap (a clock read)."""

    def __init__(self, timeout_s: float, rank: int, log, peers: bool):
        """peers: the run has other processes (the likely cause of a stall)."""
        self.timeout_s, self.rank, self.log, self.peers = timeout_s, rank, log, peers
        self.last, self.step, self.armed = time.monotonic(), None, False
        threading.Thread(target=self._watch, daemon=True).start()

    def beat(self, step: int):
        self.last, self.step, self.armed = time.monotonic(), step, True

    def disarm(self):
        self.armed = False

    def _watch(self):
        while True:
            time.sleep(min(5.0, self.timeout_s / 4))
            if self.armed and time.monotonic() - self.last > self.timeout_s:
                cause = "a peer process died or hangs" if self.peers else "a compile, kernel or read hangs"
                line = (f"error: rank {self.rank}: no progress for --dist_timeout {self.timeout_s:g} s after step "
                        f"{self.step}: {cause}; stopping")
                stderr_line(line)
                self.log(f"stopped: {line[len('error: '):]}", console=False)
                os._exit(1)


def peer_failure(error: BaseException) -> str | None:
    """The one line for a collective that failed because another process died or hung (gloo: its connection closed
    or timed out; NCCL: its watchdog or a remote error), else None."""
    text = str(error)
    if not isinstance(error, RuntimeError) or not any(w in text for w in ("gloo", "Gloo", "NCCL", "nccl")):
        return None
    return (f"error: rank {os.environ.get('RANK', 0)}: a collective with the other processes failed, most likely because "
            f"one of them died or hangs (see its log): {(text.splitlines() or [''])[0][:300]}")


def agree(settings: dict, shards: list[str], rank: int, world_size: int):
    """Every rank runs what rank 0 runs, before anything is built: the same settings and data (each shard's identity,
    data/shards.py), else every rank stops with the same line naming the first difference. One all-gather of a short
    hash (also a barrier), then, where the hashes differ, one of the values: no rank is left waiting."""
    import torch.distributed as dist
    ours = (settings, shards)
    hashes = [None] * world_size
    dist.all_gather_object(hashes, hashlib.sha256(repr(ours).encode()).hexdigest()[:16])
    if len(set(hashes)) > 1:
        every = [None] * world_size
        dist.all_gather_object(every, ours)
        r, what = next((r, d) for r in range(1, world_size) if (d := difference(every[0], every[r])))
        raise UserError(f"the ranks disagree: rank {r} has {what}; every rank must run the same settings on the same "
                        "data (the same command line, and the same shards on every machine)")


def difference(first: tuple[dict, list[str]], other: tuple[dict, list[str]]) -> str | None:
    """The first difference of another rank's (settings, shards) from rank 0's, in words; None where there is none."""
    (settings, shards), (theirs, their_shards) = first, other
    if name := next((k for k in settings if settings[k] != theirs.get(k)), None):
        return f"--{name} {theirs.get(name)!r} where rank 0 has {settings[name]!r}"
    pairs = itertools.zip_longest(shards, their_shards, fillvalue="no shard")
    return next((f"read {b} where rank 0 read {a}" for a, b in pairs if a != b), None)


@dataclass
class Runtime:
    rank: int
    world_size: int
    device: "torch.device"
    grad_accum_steps: int  # micro-batches per rank: MICRO_BATCHES // world_size keep the 8-GPU batch
    attention: "Attention"  # the attention kernel this process loaded (the same route on every rank)

    @property
    def is_master(self) -> bool:
        """Whether this process writes the run's log: rank 0, or a process alone (an emulated rank too)."""
        return self.rank == 0 or not self.distributed

    @property
    def distributed(self) -> bool:
        """Whether collectives run: False at world size 1 and in an emulated world (--emulate_world_size)."""
        import torch.distributed as dist
        return dist.is_initialized()


def setup_runtime(args, micro_batches: int) -> Runtime:
    """This process's rank, device (one GPU per local rank, else the CPU), process group and attention kernel, for
    train_gpt.Hyperparameters `args` and the recipe's micro-batches per step (each world size keeps them)."""
    import torch
    import torch.distributed as dist
    from kernels.attention import select_attention
    launch = read_launch()
    rank, world_size, local_rank = launch.rank, launch.world_size, launch.local_rank
    if micro_batches % world_size != 0:
        divisors = [str(n) for n in range(1, micro_batches + 1) if micro_batches % n == 0]
        raise UserError(f"world size {world_size} is not supported; use {', '.join(divisors[:-1])} or {divisors[-1]} "
                        f"processes (gradient accumulation {micro_batches} // world_size keeps the record's batch)")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda was requested but CUDA is not available "
                        "(no GPU visible or a CPU-only PyTorch); run with --device cpu or on a GPU machine")
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if use_cuda:
        if local_rank >= torch.cuda.device_count():
            raise UserError(f"local rank {local_rank} has no GPU ({torch.cuda.device_count()} visible); "
                            "start at most one process per GPU")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        # The host's tensor work beside a GPU is small index and copy operations, which OpenMP's threads stalled for
        # up to 16 ms each (records/enwiki-124/2026-11-29_one-host-thread): one thread, as torchrun gives each of
        # several processes, so that a lone process (world 1, an emulated rank) runs its host work as a rank does
        torch.set_num_threads(1)
    else:
        device = torch.device("cpu")
    if world_size > 1:
        form_group(launch, "nccl" if use_cuda else "gloo", device if use_cuda else None, args.dist_timeout)
    attention = select_attention(args.attention, device, args.fa3_hub_wait) if rank == 0 else None
    if world_size > 1:  # the other ranks load the route rank 0 chose, so that every rank runs the same kernel
        chosen = [attention.route if rank == 0 else None]
        dist.broadcast_object_list(chosen, 0)
        if rank != 0:
            attention = select_attention(args.attention, device, args.fa3_hub_wait, routes=(chosen[0],))
    if args.emulate_world_size:  # a rank of a larger run, alone: its data, shards and math, without its peers
        if world_size > 1:
            raise UserError(f"--emulate_world_size {args.emulate_world_size} runs in one process; start it "
                            "with python3 or torchrun --nproc_per_node=1")
        rank, world_size = args.emulate_rank, args.emulate_world_size
    return Runtime(rank, world_size, device, micro_batches // world_size, attention)


def keep_freed_memory():
    """CPU runs: malloc keeps freed memory for reuse. glibc's maps each block above 32 MB fresh from the kernel and
    unmaps it when freed, so every LM-head tensor of a micro-batch (38 MB at 383 tokens of the GPT-2 vocabulary) and
    every table-sized temporary of the Adam step is paid for again in page faults: a last-stage step of run.sh's
    CPU model on your shards took 2.7 s of CPU time, 1.5 s with this (one core; its Adam step 1.1 s, 0.27 s). No
    values change. A C library without mallopt keeps its ways."""
    libc = ctypes.CDLL(None)
    if hasattr(libc, "mallopt"):
        M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # malloc.h: the heap's free top is kept below this; blocks mmap'd at most
        libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1)
        libc.mallopt(M_MMAP_MAX, 0)
