"""Re-run a step that train_gpt.py's non-finite guard captured, eagerly, and say where it first went non-finite:
the first operation of the forward whose output holds a NaN (with the line of train_gpt.py that ran it and its
layer), the parameters whose gradients are not, and, for a one-process run, the weights the update broke.

    python3 tools/replay.py logs/RUN_capture_rank0.pt [--device cpu|cuda|auto]

Exit status 1 when the failure reproduces, 0 when everything is finite on replay, 2 with one `error:` line when the
capture cannot be read or replayed here.
"""
import dataclasses
import linecache
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for train_gpt

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

import train_gpt as tg  # noqa: E402
from harness.checkpoint import read_saved  # noqa: E402
from harness import cli  # noqa: E402


class FirstNaN(TorchDispatchMode):
    """Watches every operation but views. `origin`: the first whose floating-point output holds a NaN although its
    inputs hold none (where a NaN is made: an overflow, 0/0, ...); `first`: the first whose output holds one at all
    (a NaN that came in, with a weight or an input). Each names the line of train_gpt.py that ran it and its layer.
    Infinities are left alone: attention masks hold them on purpose, and what they break turns into NaN."""

    def __init__(self):
        super().__init__()
        self.origin = self.first = None

    @property
    def found(self) -> str | None:
        return self.origin or self.first

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.origin is None and not func.is_view and self._has_nan(out):
            where = f"{func}" + self._caller()
            self.first = self.first or where
            if not self._has_nan((args, kwargs)):
                self.origin = where
        return out

    @staticmethod
    def _has_nan(tree) -> bool:
        return any(isinstance(t, torch.Tensor) and t.is_floating_point() and t.isnan().any() for t in tree_leaves(tree))

    @staticmethod
    def _caller() -> str:
        """Where in train_gpt.py the operation ran: its line, and the layer when the layer loop's line names it."""
        frames, frame = [], sys._getframe(2)
        while frame is not None:
            if Path(frame.f_code.co_filename).name == "train_gpt.py":
                frames.append(frame)
            frame = frame.f_back
        if not frames:
            return ""
        code = frames[0].f_code
        where = (f" at train_gpt.py:{frames[0].f_lineno} in {code.co_name}: "
                 f"{linecache.getline(code.co_filename, frames[0].f_lineno).strip()}")
        for f in frames:  # the loop variable outlives the loop: trust it only on a line that uses it
            if isinstance(f.f_locals.get("layer"), int) and "layer" in linecache.getline(f.f_code.co_filename, f.f_lineno):
                return f"{where} (layer {f.f_locals['layer']})"
        return where


def nonfinite(what: str, named) -> bool:
    """Whether any of the named tensors is not finite; prints which."""
    bad = [name for name, t in named if t is not None and not torch.isfinite(t).all()]
    if bad:
        print(f"non-finite {what}: {', '.join(bad)}")
    return bool(bad)


def replay(path: str, device: str) -> int:
    # read and checked as a resume reads a checkpoint; on the replaying machine's device, eager, for the op-by-op watch
    saved, capture = read_saved(path, "capture", tg.Hyperparameters, dict(device=device, compile=False), tg.validate,
                                lambda s: tg.Schedule(s).total_steps, tg.weight_shapes)
    if missing := sorted({"grad_accum_steps", "forward", "batches", "reproduced"} - set(capture)):
        raise cli.UserError(f"{path} holds no {', '.join(missing)}: not a whole capture; the file was changed after "
                            "it was written")
    state, schedule = capture["state"], tg.Schedule(saved)  # the state: a checkpoint's keys (Trainer.restore reads them)
    rt = tg.setup_runtime(saved, tg.MICRO_BATCHES)  # refuses with one line, e.g. --device cuda without a GPU
    rt = dataclasses.replace(rt, grad_accum_steps=capture["grad_accum_steps"])  # one process re-runs one rank's share
    step = state["step"]
    model = tg.build_model(saved, rt)
    model.load_state_dict(state["model"])
    if state["carried"] is not None:  # an odd step's start: Adam's gradients of the even step before it
        model.load_gradients(state["carried"]["grads"])
    for old, new in schedule.rotary_extensions(step):
        model.extend_rotary(old, new)
    f = capture["forward"]
    sched = tg.ForwardSchedule(f["short_window"], f["long_window"], f["max_seq_len"],
                               torch.tensor(f["mtp_weights"], device=rt.device))
    print(f"replaying step {step} of run {saved.run_id} (rank {capture['rank']} of "
          f"{capture['world_size']}; non-finite reproduced when captured: {capture['reproduced']})")
    found = nonfinite("weights before the step", model.named_parameters())
    for i, batch in enumerate(capture["batches"]):
        mb = tg.MicroBatch(**{k: t.to(rt.device) for k, t in batch.items()})
        with FirstNaN() as watch:
            loss = model(mb.inputs, mb.targets, mb.cu_seqlens, mb.bigram, sched)
        (loss * model.cfg.loss_scale).backward()
        if watch.found:
            print(f"micro-batch {i}: first NaN {'made' if watch.origin else 'output'}: {watch.found}")
            found = True
    found = nonfinite("gradients", model.gradients().items()) or found
    if capture["world_size"] == 1:  # the optimizer state is whole: the update can be replayed too
        optimizer = tg.NorMuonAdam(model, saved, rt, compile=False)
        optimizer.load_state_dict(state["optimizer"])
        optimizer.step(*schedule.at(step).optimizer_args)
        found = nonfinite("weights after the optimizer step", model.named_parameters()) or found
    if not found:
        print("forward, backward and update are finite on replay: the failure did not reproduce here "
              "(nondeterministic kernels, a hardware fault, or a different device)")
    return 1 if found else 0


@cli.program(error_status=2)  # 1 means the failure reproduced
def main(argv=None) -> int:
    parser = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("capture", help="a *_capture_rank<N>.pt file written by train_gpt.py's guard")
    parser.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    args = parser.parse_args(argv)
    with tg.torch_settings():
        return replay(args.capture, args.device)


if __name__ == "__main__":
    sys.exit(main())
