"""Checkpoints: one file per rank (each rank holds its own optimizer shards), written atomically; the rules of
resuming a run from them; and reading any file the run wrote (checkpoint or capture) with one-line refusals."""
import dataclasses
import os
import pickle
import re
import zipfile

import torch
from torch import Tensor

from harness.cli import UserError, describe_os_error
from harness.files import atomic_write, check_input_file
from harness.settings import runtime_settings, typed

FORMAT = 2  # of the checkpoint and capture files (2: a capture holds a checkpoint's state); another is refused
USE = dict(checkpoint="resume", capture="replay")  # what each kind of file is read for


def check_state(path: str, state, total: int):
    """The bookkeeping of a saved state (a checkpoint's or capture's) as the run reads it: its step in 0..total (the
    run's steps) and its data position; a changed value is refused naming the field and the file."""
    if not isinstance(state, dict) or not {"step", "loader", "model", "optimizer", "carried"} <= set(state):
        raise UserError(f"{path} holds no trainer state; the file was changed after it was written")
    step, loader = state["step"], state["loader"]
    if type(step) is not int or not 0 <= step <= total:
        refuse_field(path, "state.step", step, f"a step in 0..{total}")
    if not (isinstance(loader, (tuple, list)) and len(loader) == 2 and all(type(n) is int and n >= 0 for n in loader)):
        refuse_field(path, "state.loader", loader, "(shard, document): two whole numbers >= 0")


def check_clock(path: str, checkpoint: dict):
    """A checkpoint's TrainClock.state(): times in ms >= 0 (NaN: not timed, as in the guard's checkpoints)."""
    for key in ("train_ms", "stage_start_ms"):
        if type(checkpoint.get(key)) is not float or checkpoint[key] < 0:
            refuse_field(path, key, checkpoint.get(key), "a time in ms >= 0")
    stage_ms = checkpoint.get("stage_ms")
    if not isinstance(stage_ms, dict) or not all(type(k) is int and k >= 0 and type(v) is float and v >= 0
                                                 for k, v in stage_ms.items()):
        refuse_field(path, "stage_ms", stage_ms, "{stage: ms per step >= 0}")


def refuse_field(path: str, field: str, value, want: str):
    raise UserError(f"{path}: its {field} {value!r} is not {want}; the file was changed after it was written")


def save_atomically(obj, path: str):
    """torch.save straight into a temporary file renamed over `path` (harness/files.atomic_write; no copy of the whole
    file in memory): a reader never sees a half-written file, and a failed write leaves the previous one as it was
    and is a UserError naming the path and the cause. Synced to the disk before the rename, so that a crash right
    after cannot leave an empty checkpoint either."""
    def save(f):
        try:
            torch.save(obj, f)
        except RuntimeError as e:  # torch's zip writer, closed after a failed write (a full disk, Ctrl-C), raises
            if not isinstance(e.__context__, (OSError, KeyboardInterrupt)):  # an error of its own over that one,
                raise                                                         # which says what happened
            raise e.__context__ from None
        f.flush()
        os.fsync(f.fileno())
    try:
        atomic_write(path, save)
    except OSError as e:
        raise UserError(f"cannot write {describe_os_error(e)}; the previous file, if any, is unchanged") from None


def copy_tree(tree, into=None, device=None):
    """Copy of nested dicts of tensors and plain values; into `into`'s tensors when given (same structure: no
    allocation), else into new ones (on `device` if given)."""
    if isinstance(tree, dict):
        return {k: copy_tree(v, None if into is None else into.get(k), device) for k, v in tree.items()}
    if isinstance(tree, Tensor):
        return tree.detach().to(device, copy=True) if into is None else into.copy_(tree)
    return tree


def header(kind: str, rank: int, world_size: int, data: str, settings) -> dict:
    """What every file of the run says of itself: what it is, its format, whose it is and what data it was cut from
    (data: the shard set's fingerprint, data/shards.py)."""
    return dict(kind=kind, format=FORMAT, rank=rank, world_size=world_size, data=data,
                config=dataclasses.asdict(settings))


def read_file(path: str, kind: str, option: str = "") -> dict:
    """A file train_gpt.py wrote, as `kind` ("checkpoint" or "capture"), or a UserError saying why not (naming the
    file as the `option` that gave it, if one did). weights_only: tensors and plain containers only, so a crafted .pt
    file cannot run code."""
    check_input_file(path, option or f"the {kind}", f"*_{kind}_rank0.pt")
    try:
        with open(path, "rb") as f:
            ours = zipfile.is_zipfile(f)  # torch.save writes a zip archive; anything else is not ours
        if not ours:
            raise UserError(f"{path} is not a readable {kind} of train_gpt.py (not a file torch.save wrote)")
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise UserError(f"{path} is not a {kind} of train_gpt.py: it holds objects other than tensors "
                        "and plain containers, which are not loaded") from None
    except (OSError, EOFError, RuntimeError, zipfile.BadZipFile) as e:
        raise UserError(f"{path} is not a readable {kind} of train_gpt.py "
                        f"({(str(e).splitlines() or [type(e).__name__])[0]})") from None
    found = obj.get("kind") if isinstance(obj, dict) else None
    if found != kind:
        raise UserError(f"{path} is {'a ' + found if found else 'not a file train_gpt.py wrote'}, not a {kind}")
    if obj.get("format") != FORMAT:
        raise UserError(f"{path} is a {kind} of format {obj.get('format')!r}, from another version of "
                        f"train_gpt.py (this one reads format {FORMAT}); {USE[kind]} it with the version that wrote it")
    return obj


def read_saved(path: str, kind: str, cls, changes: dict, validate, total_steps, shapes, option: str = ""):
    """A checkpoint or capture (read_file) with its settings, read and checked by one sequence for a resume and a
    replay: the saved settings (instance of the dataclass cls), each of its type as on the command line
    (harness/settings.typed), with `changes` ({name: value}, the command line's) taken where they are runtime settings
    (harness/settings.runtime) and refused where they differ; then validate(settings), the saved state (its step in
    0..total_steps(settings), its data position) and its weights against shapes(settings) -> {name: shape}. Every
    refusal is one line naming the file. Returns (settings, the file's contents)."""
    obj = read_file(path, kind, option)
    fields, defaults = {f.name for f in dataclasses.fields(cls)}, cls()
    if set(obj["config"]) != fields:
        odd = sorted(set(obj["config"]) ^ fields)
        raise UserError(f"{path} was written with other settings ({', '.join(odd)}) by another version of "
                        f"train_gpt.py; {USE[kind]} it with the version that wrote it")
    try:
        saved = cls(**{k: typed(k, v, getattr(defaults, k)) for k, v in obj["config"].items()})
    except UserError as e:
        raise UserError(f"{path}: its saved setting {e}; the file was changed after it was written") from None
    may_change = runtime_settings(cls)
    for name, now in sorted(changes.items()):
        if name in may_change:
            setattr(saved, name, now)
        elif now != getattr(saved, name):
            raise UserError(f"--{name} {now!r} differs from the resumed run's {getattr(saved, name)!r}; a resumed run "
                            f"keeps its settings (it may change only {', '.join(sorted(may_change))})")
    try:
        validate(saved)
    except UserError as e:
        raise UserError(f"{path}: its settings break a rule: {e}") from None
    check_state(path, obj["state"], total_steps(saved))
    weights = {name: tuple(t.shape) for name, t in obj["state"]["model"].items()}
    expected = shapes(saved)
    if weights != expected:
        name = next(n for n in sorted(set(weights) | set(expected)) if weights.get(n) != expected.get(n))
        raise UserError(f"{path}: its weights do not fit its settings ({name}: {weights.get(name)} saved, "
                        f"{expected.get(name)} expected); the file was changed after it was written")
    return saved, obj


def checkpoint_path(settings, rank: int) -> str:
    return f"{settings.log_dir}/{settings.run_id}_checkpoint_rank{rank}.pt"


class Checkpoints:
    """Where and when this rank saves: at the end and when a run stops early (at_end), and every `every` steps."""

    def __init__(self, settings, rank: int, world_size: int, data: str):
        """settings: the run's (log_dir, run_id, save_checkpoint, checkpoint_every; all saved with it);
        data: the shard set's fingerprint."""
        self.settings, self.rank, self.world_size, self.data = settings, rank, world_size, data
        self.at_end, self.every = settings.save_checkpoint, settings.checkpoint_every
        self.enabled = self.at_end or self.every > 0
        # the newest checkpoint of the run, (its rank-0 file, its step): the one resumed from until this run saves
        self.newest = (settings.resume, None) if settings.resume else None

    def due(self, step: int, start: int, last: bool, stopping: bool) -> bool:
        return self.enabled and (stopping or (last and self.at_end)
                                 or (self.every > 0 and step > start and step % self.every == 0))

    def save(self, state: dict, clock: dict) -> str:
        """state: the trainer's state (on the device; copied here); clock: TrainClock.state()."""
        path = checkpoint_path(self.settings, self.rank)
        save_atomically(dict(header("checkpoint", self.rank, self.world_size, self.data, self.settings),
                             state=copy_tree(state, device="cpu"), **clock), path)
        self.newest = checkpoint_path(self.settings, 0), state["step"]
        return path

    def resume_hint(self) -> str:
        """How to go on after a stop at a step boundary, which saves where checkpoints are on."""
        if self.enabled:
            return f"resume with: python3 train_gpt.py --resume {checkpoint_path(self.settings, 0)}"
        return self.newest_line("not saved (--save_checkpoint or --checkpoint_every saves it)")

    def newest_line(self, saved: str = "nothing saved") -> str:
        """What a stop left (`saved`: a stop at once, nothing of its own), then the run's newest checkpoint, if any,
        and how to go on from it."""
        if self.newest is None:
            return saved
        path, step = self.newest
        which = "the one this run resumed" if step is None else f"of step {step}"
        return f"{saved}; the newest checkpoint is {path} ({which}), resume with: python3 train_gpt.py --resume {path}"


def load_checkpoint(settings, given: set, rank: int, world_size: int, total_steps, shapes, validate):
    """This rank's checkpoint of the run that settings.resume names (its rank-0 file), and the run's settings: the
    saved ones (read_saved), with only the runtime settings taken from the command line where `given`, and --log_dir,
    where not given, the checkpoint's folder. Refused with one line beside read_saved's refusals: another rank's or
    world's file, a clock out of range, and a resume that would replace another checkpoint of the run. A step of N of
    N resumes to the final validation."""
    path = re.sub(r"_rank\d+\.pt$", f"_rank{rank}.pt", settings.resume)
    changes = {name: getattr(settings, name) for name in given - {"resume"}}
    if "log_dir" not in given:  # the resumed run writes where the user pointed: beside the checkpoint given
        changes["log_dir"] = os.path.dirname(settings.resume) or "."
    saved, checkpoint = read_saved(path, "checkpoint", type(settings), changes, validate, total_steps, shapes,
                                   option="--resume")
    saved.resume = settings.resume
    if (checkpoint["rank"], checkpoint["world_size"]) != (rank, world_size):
        raise UserError(f"{path} holds rank {checkpoint['rank']} of a {checkpoint['world_size']}-process run; "
                        f"this is rank {rank} of {world_size}: resume on as many processes, with each rank's own file")
    check_clock(path, checkpoint)
    ours = checkpoint_path(saved, rank)
    if not saved.overwrite and os.path.exists(ours) and not os.path.samefile(ours, path):
        raise UserError(f"resuming {path} would replace {ours}, another checkpoint of the run; resume from that one, "
                        "write elsewhere with --log_dir, or pass --overwrite True to replace it")
    return saved, checkpoint
