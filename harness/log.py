"""The run's log: one text file per run (rank 0 writes it), which opens with the code that ran, the versions,
nvidia-smi and the resolved settings, then holds every line printed."""
import dataclasses
import os
import subprocess
import sys
import uuid
from pathlib import Path

import torch
import torch.distributed as dist

from harness.cli import UserError, describe_os_error, shown
from harness.files import LockHeld, check_output_folder, hold_lock, make_output_folder

REPO = Path(__file__).resolve().parents[1]
# the code a training process runs, as globs under the repository root
SOURCES = ("train_gpt.py", "kernels/*.py", "harness/*.py", "data/shards.py")


class Logger:
    def __init__(self, log_dir: str, run_id: str, is_master: bool, fresh: bool = True):
        """fresh: start the log anew (a resumed run appends to its log instead). Other ranks log nothing."""
        self.path = None
        if is_master:
            self.path = os.path.join(log_dir, f"{run_id}.txt")
            self._write("w" if fresh else "a", "")

    def __call__(self, msg: str, console: bool = True):
        if self.path is None:
            return
        if console:
            print(msg, flush=True)
        self._write("a", msg + "\n")

    def _write(self, mode: str, text: str):
        try:
            with open(self.path, mode) as f:
                f.write(text)
        except OSError as e:
            raise UserError(f"cannot write the log {describe_os_error(e, self.path)}") from None


def claim_run(settings, is_master: bool, distributed: bool):
    """Before the start-up: a fresh run id (agreed over ranks) when none was given; --log_dir can hold the run's
    files; and the run id is this run's alone while it lives: rank 0 holds <log_dir>/<run_id>.lock (one writer of
    the log and the checkpoints: a second start, or a resume, of a live run is refused, naming its process), and a
    fresh run names no other run's log (a resumed run appends to its own; --overwrite replaces another's). Every rank
    gets rank 0's refusal. The lock lasts until the process exits."""
    if not settings.run_id:
        box = [str(uuid.uuid4())]
        if distributed:
            dist.broadcast_object_list(box, 0)
        settings.run_id = box[0]
    try:
        check_output_folder(settings.log_dir, "--log_dir")
        make_output_folder(settings.log_dir)
    except OSError as e:
        raise UserError(f"--log_dir {shown(settings.log_dir)!r} cannot hold the run's files: "
                        f"{describe_os_error(e, path='')}") from None
    box = [None]
    if is_master:
        try:
            _claim(settings)
        except (UserError, OSError) as e:
            box = [str(e) if isinstance(e, UserError) else describe_os_error(e)]
    if distributed:
        dist.broadcast_object_list(box, 0)
    if box[0] is not None:
        raise UserError(box[0])


def _claim(settings):
    """Rank 0's part of claim_run: the lock, then the log's name."""
    lock = Path(settings.log_dir) / f"{settings.run_id}.lock"
    try:
        release = hold_lock(lock)
    except LockHeld as e:
        raise UserError(f"the run {settings.run_id!r} is live: {e} writes its files in {settings.log_dir} (it holds "
                        f"{lock}); stop it or wait for it to end{', then resume' if settings.resume else ''}, or "
                        f"choose another {'--log_dir' if settings.resume else '--run_id'}") from None
    taken = Path(settings.log_dir) / f"{settings.run_id}.txt"
    if not settings.resume and not settings.overwrite and taken.exists():
        release()
        raise UserError(f"--run_id {settings.run_id!r} is taken: {taken} exists; choose another --run_id, or "
                        "pass --overwrite True to replace that run's files")


def open_log(settings, is_master: bool, resuming: bool) -> Logger:
    """The run's log, once nothing can refuse the run any more (claim_run named it), with its first lines: where it
    is, the code (SOURCES), Python/PyTorch/Triton versions and nvidia-smi, and the settings (also on the console)."""
    log = Logger(settings.log_dir, settings.run_id, is_master, fresh=not resuming)
    log(f"log: {log.path}" + (f" (resuming {settings.resume})" if resuming else ""))
    for pattern in SOURCES:
        for path in sorted(REPO.glob(pattern)):
            log(f"{'=' * 100}\n# {path.relative_to(REPO)}\n{path.read_text()}", console=False)
    log("=" * 100, console=False)
    log(f"Python {sys.version}\nPyTorch {torch.__version__} (CUDA {torch.version.cuda})", console=False)
    try:
        import triton
        log(f"Triton {triton.__version__}", console=False)
    except ImportError:
        pass
    if torch.cuda.is_available():
        smi = subprocess.run(["nvidia-smi"], capture_output=True, text=True)
        log(smi.stdout or smi.stderr, console=False)
    log("config: " + ", ".join(f"{k}={v!r}" for k, v in dataclasses.asdict(settings).items()))
    return log
