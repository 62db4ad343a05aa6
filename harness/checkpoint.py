"""Checkpoints: one file per rank (each rank holds its own optimizer shards), written atomically, and the rules of
resuming a run from them."""
import dataclasses
import os
import pickle
import re

import torch
from torch import Tensor

# Settings a resumed run may change (how it runs, not what it computes); the rest come from its checkpoint
RESUME_MAY_CHANGE = {"device", "attention", "fa3_hub_wait", "compile", "cuda_graphs", "warmup", "save_checkpoint",
                     "checkpoint_every", "guard_every", "profile_steps", "sync_debug", "resume", "overwrite"}


def save_atomically(obj, path: str):
    """torch.save to a temporary name, then rename: a reader never sees a half-written file."""
    tmp = f"{path}.tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def copy_tree(tree, into=None, device=None):
    """Copy of nested dicts of tensors and plain values; into `into`'s tensors when given (same structure: no
    allocation), else into new ones (on `device` if given)."""
    if isinstance(tree, dict):
        return {k: copy_tree(v, None if into is None else into.get(k), device) for k, v in tree.items()}
    if isinstance(tree, Tensor):
        return tree.detach().to(device, copy=True) if into is None else into.copy_(tree)
    return tree


class Checkpoints:
    """Where and when this rank saves: at the end and when a run stops early (at_end), and every `every` steps."""

    def __init__(self, settings, rank: int, world_size: int):
        """settings: the run's (log_dir, run_id, save_checkpoint, checkpoint_every; all saved with it)."""
        self.settings, self.rank, self.world_size = settings, rank, world_size
        self.at_end, self.every = settings.save_checkpoint, settings.checkpoint_every
        self.enabled = self.at_end or self.every > 0

    def path(self, rank: int) -> str:
        return os.path.join(self.settings.log_dir, f"{self.settings.run_id}_checkpoint_rank{rank}.pt")

    def due(self, step: int, start: int, last: bool, stopping: bool) -> bool:
        return self.enabled and (stopping or (last and self.at_end)
                                 or (self.every > 0 and step > start and step % self.every == 0))

    def save(self, state: dict, clock: dict) -> str:
        """state: the trainer's state (on the device; copied here); clock: TrainClock.state()."""
        path = self.path(self.rank)
        save_atomically(dict(state=copy_tree(state, device="cpu"), **clock, config=dataclasses.asdict(self.settings),
                             world_size=self.world_size, rank=self.rank), path)
        return path

    def resume_hint(self) -> str:
        if not self.enabled:
            return "not saved (--save_checkpoint or --checkpoint_every saves it)"
        return f"resume with: python3 train_gpt.py --resume {self.path(0)}"


def load_checkpoint(settings, rank: int):
    """This rank's checkpoint of the run that settings.resume names (its rank-0 file), and the run's settings: the
    saved ones, with only RESUME_MAY_CHANGE taken from the command line (where given, i.e. not the default)."""
    path = re.sub(r"_rank\d+\.pt$", f"_rank{rank}.pt", settings.resume)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, pickle.UnpicklingError, RuntimeError) as e:
        raise SystemExit(f"error: --resume: cannot read {path} as a checkpoint of train_gpt.py "
                         f"({str(e).splitlines()[0]})") from None
    cls = type(settings)
    saved, defaults = cls(**checkpoint["config"]), cls()
    for field in dataclasses.fields(cls):
        given, was = getattr(settings, field.name), getattr(saved, field.name)
        if field.name in RESUME_MAY_CHANGE:
            setattr(saved, field.name, given if given != getattr(defaults, field.name) else was)
        elif given != getattr(defaults, field.name) and given != was:
            raise SystemExit(f"error: --{field.name} {given!r} differs from the resumed run's {was!r}; a resumed run "
                             f"keeps its settings (it may change only {', '.join(sorted(RESUME_MAY_CHANGE))})")
    saved.resume = settings.resume
    return saved, checkpoint
