"""Command-line settings: `--name value` / `--name=value` overrides of a settings dataclass, type-checked, then
validated as a whole. Imports nothing heavy: --help, --check and setting errors answer before torch loads."""
import dataclasses
import inspect
import math
import re
from ast import literal_eval
from pathlib import Path


def setting_help(cls) -> str:
    """Every field of `cls` with its default and meaning, in source order under its group comments: read from the
    class's source, so that its comments are the one description."""
    lines = ["usage: train_gpt.py [--name value | --name=value]...  (torchrun --nproc_per_node=N train_gpt.py ...)",
             "  --help, -h: this list;  --check: check the settings and exit", ""]
    defaults = cls()
    for line in inspect.getsource(cls).splitlines()[2:]:
        if m := re.fullmatch(r"\s*# (.*)", line):
            lines.append(f"{m[1]}:")
        elif m := re.fullmatch(r"\s*(\w+): \w+ = [^#]*?(?:#\s*(.*))?", line):
            lines.append(f"  --{m[1]} {getattr(defaults, m[1])!r}" + (f"  {m[2]}" if m[2] else ""))
    return "\n".join(lines)


def parse_value(name: str, text: str, default):
    """`text` as a value of the default's type: strings as given, everything else as a Python literal."""
    if isinstance(default, str):
        return text
    try:
        value = literal_eval(text)
    except (ValueError, SyntaxError):
        raise SystemExit(f"error: --{name} {text!r} is not a valid {type(default).__name__}") from None
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if isinstance(default, tuple) and isinstance(value, list):
        value = tuple(value)
    if type(value) is not type(default):
        kind = type(default).__name__
        raise SystemExit(f"error: --{name} expects {'an' if kind[0] in 'aeiou' else 'a'} {kind}, got {text!r}")
    if not all(math.isfinite(v) for v in _numbers(value)):  # 1e999 parses as inf
        raise SystemExit(f"error: --{name} {value!r} must be finite")
    return value


def _numbers(value) -> list:
    """The floats and ints in a value, through nested tuples."""
    if isinstance(value, tuple):
        return [x for v in value for x in _numbers(v)]
    return [value] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def parse_args(argv: list[str], cls, validate, check=None):
    """An instance of the dataclass `cls` with argv's overrides, checked by validate(instance) (which exits with a
    one-line error), and the names argv set (a setting given equal to its default is still given). --help/-h prints
    every setting; --check validates, runs check(instance) (e.g. that the data files exist; it raises on a problem)
    and exits: both exit here."""
    if {"--help", "-h"} & set(argv):
        print(setting_help(cls))
        raise SystemExit(0)
    args, given = cls(), set()
    fields = {f.name for f in dataclasses.fields(cls)}
    check_only, i = False, 0
    while i < len(argv):
        token = argv[i]
        if token == "--check":
            check_only, i = True, i + 1
            continue
        if not token.startswith("--"):
            raise SystemExit(f"error: unexpected argument {token!r}; settings are passed as --name value (--help lists them)")
        if "=" in token:
            name, text = token[2:].split("=", 1)
            i += 1
        else:
            if i + 1 >= len(argv):
                raise SystemExit(f"error: {token} needs a value")
            name, text = token[2:], argv[i + 1]
            i += 2
        if name not in fields:
            raise SystemExit(f"error: unknown setting --{name} (--help lists the settings)")
        setattr(args, name, parse_value(name, text, getattr(args, name)))
        given.add(name)
    validate(args)
    if check_only:
        try:
            if check is not None:
                check(args)
        except (OSError, ValueError, RuntimeError) as e:  # what the check found, as a one-line error
            raise SystemExit(f"error: {e}") from None
        print("settings OK")
        raise SystemExit(0)
    return args, given


def check_settings(hp, micro_batches: int, gate_channels: int, attention: tuple):
    """train_gpt.validate: every setting of hp in range and every derived constraint met, else a one-line error
    naming the flag and a valid value. micro_batches, gate_channels: the recipe's micro_batches and gate_channels;
    attention: --attention's choices."""
    defaults = type(hp)()
    def need(ok: bool, message: str):
        if not ok:
            raise SystemExit(f"error: {message}")

    def positive_ints(name: str, n: int):
        value = getattr(hp, name)
        need(len(value) == n and all(isinstance(v, int) and v > 0 for v in value),
             f"--{name} {value!r} needs {n} positive integers, e.g. {getattr(defaults, name)!r}")

    need(hp.vocab_size >= 2, f"--vocab_size {hp.vocab_size} must be at least 2")
    need(0 <= hp.bos_id < hp.vocab_size, f"--bos_id {hp.bos_id} must be a token id below --vocab_size {hp.vocab_size}")
    need(hp.val_tokens > 0 and hp.val_micro_batch_tokens > 0 and hp.val_tokens % hp.val_micro_batch_tokens == 0,
         f"--val_tokens {hp.val_tokens} must be a positive multiple of --val_micro_batch_tokens {hp.val_micro_batch_tokens}")
    need(hp.num_scheduled_steps >= 3, f"--num_scheduled_steps {hp.num_scheduled_steps} must be at least 3 (one per stage)")
    need(hp.num_extension_steps >= 0, f"--num_extension_steps {hp.num_extension_steps} must be 0 or more")
    for name in ("cooldown_frac", "final_lr_frac"):
        need(0.0 <= getattr(hp, name) <= 1.0, f"--{name} {getattr(hp, name)} must be in [0, 1]")
    need(0.0 < hp.untie_frac <= 1.0, f"--untie_frac {hp.untie_frac} must be in (0, 1]")
    positive_ints("micro_batch_tokens", 3)
    positive_ints("stage_seq_lens", 3)
    need(all(s <= t + 1 for s, t in zip(hp.stage_seq_lens, hp.micro_batch_tokens)),  # + 1: the last target
         f"--stage_seq_lens {hp.stage_seq_lens!r} may exceed --micro_batch_tokens {hp.micro_batch_tokens!r} by one "
         "token at most (a micro-batch reads one token more than its size, the last target)")
    need(len(hp.stage_lr_muls) == 3 and all(0 < m <= 100 for m in hp.stage_lr_muls),
         f"--stage_lr_muls {hp.stage_lr_muls!r} needs 3 multipliers in (0, 100], e.g. (1.0, 1.52, 1.73)")
    windows = hp.stage_windows
    need(len(windows) == 4 and all(len(w) == 2 and all(isinstance(b, int) and b > 0 for b in w) and w[0] <= w[1]
                                   for w in windows),
         f"--stage_windows {windows!r} needs 4 (short, long) pairs of positive block counts with short <= long")
    longs = [w[1] for w in windows] + [hp.final_long_window]
    need(all(a <= b for a, b in zip(longs, longs[1:])),
         f"--stage_windows long windows {longs[:-1]} and --final_long_window {hp.final_long_window} may only grow "
         "(YaRN extends the rotary positions to longer windows, never shorter)")
    need(hp.window_block > 0, f"--window_block {hp.window_block} must be positive, e.g. 128")
    need(len(hp.stage_mtp_weights) == 3 and all(
        len(pair) == 2 and len(pair[0]) == len(pair[1]) >= 1 and all(w >= 0 for w in pair[0] + pair[1])
        and sum(pair[0]) > 0 and sum(pair[1]) > 0 for pair in hp.stage_mtp_weights),
        f"--stage_mtp_weights needs 3 (start, end) pairs of equally long non-negative weight tuples, none all zero, "
        f"e.g. {defaults.stage_mtp_weights!r}")
    need(min(hp.model_dim, hp.num_heads, hp.head_dim) > 0, "--model_dim, --num_heads and --head_dim must be positive")
    # heads come in pairs (paired-head attention) of a multiple of 4 channels (half-truncated rotary pairs)
    need(hp.model_dim % 8 == 0 and hp.model_dim >= gate_channels,
         f"--model_dim {hp.model_dim} must be a multiple of 8 and at least {gate_channels} (an even number of heads of "
         f"a multiple of 4 channels; the gates read {gate_channels}), e.g. {max(16, hp.model_dim // 8 * 8)}")
    heads = min(range(2, hp.model_dim // 4 + 1, 2), key=lambda h: (hp.model_dim % (4 * h) != 0, abs(hp.model_dim / h - 128)))
    need(hp.num_heads * hp.head_dim == hp.model_dim and hp.num_heads % 2 == 0 and hp.head_dim % 4 == 0,
         f"--num_heads {hp.num_heads} x --head_dim {hp.head_dim} must equal --model_dim {hp.model_dim}, with an even "
         f"number of heads of a multiple of 4 channels, e.g. --num_heads {heads} --head_dim {hp.model_dim // heads}")
    if (hp.fp8_head or hp.fp8_body) and hp.device != "cpu":  # FP8 matmuls (cuBLASLt, TMA) need 16-byte rows
        need(hp.model_dim % 16 == 0 and all(t % 16 == 0 for t in hp.micro_batch_tokens),
             f"FP8 matmuls need --model_dim {hp.model_dim} and --micro_batch_tokens {hp.micro_batch_tokens!r} in "
             "multiples of 16; change them or pass --fp8_head False --fp8_body False")
    for name in ("adam_lr", "muon_lr"):
        need(0 < getattr(hp, name) <= 1, f"--{name} {getattr(hp, name)} must be in (0, 1], e.g. {getattr(defaults, name)}")
    need(0 < hp.adam_eps < 1, f"--adam_eps {hp.adam_eps} must be in (0, 1), e.g. 1e-10")
    for name in ("adam_wd", "muon_wd"):
        need(0 <= getattr(hp, name) <= 100, f"--{name} {getattr(hp, name)} must be in [0, 100]")
    for name in ("muon_beta2", "muon_momentum_min", "muon_momentum_max"):
        need(0 <= getattr(hp, name) < 1, f"--{name} {getattr(hp, name)} must be in [0, 1)")
    need(hp.muon_momentum_min <= hp.muon_momentum_max, "--muon_momentum_min may not exceed --muon_momentum_max")
    for name in ("muon_momentum_warmup_steps", "muon_momentum_cooldown_steps"):
        need(getattr(hp, name) >= 1, f"--{name} {getattr(hp, name)} must be at least 1")
    for name in ("max_doc_tokens", "val_every", "guard_every", "checkpoint_every", "emulate_world_size"):
        need(getattr(hp, name) >= 0, f"--{name} {getattr(hp, name)} must be 0 (off) or more")
    need(hp.emulate_world_size == 0 or micro_batches % hp.emulate_world_size == 0,
         f"--emulate_world_size {hp.emulate_world_size} must divide {micro_batches}: 1, 2, 4 or 8")
    total = hp.num_scheduled_steps + hp.num_extension_steps
    need(hp.inject_fault_step >= -1, f"--inject_fault_step {hp.inject_fault_step} must be -1 (off) or a step")
    need(0 <= hp.seed < 2**63, f"--seed {hp.seed} must be in [0, 2**63)")
    need(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", hp.run_id or "x") is not None,
         f"--run_id {hp.run_id!r} must be a plain file name (letters, digits, '.', '_', '-'); --log_dir sets the folder")
    need(hp.device in ("auto", "cuda", "cpu"), f"--device must be auto, cuda or cpu, not {hp.device!r}")
    need(hp.attention in attention, f"--attention must be one of {', '.join(attention)}, not {hp.attention!r}")
    need(hp.fa3_hub_wait >= 0, f"--fa3_hub_wait {hp.fa3_hub_wait} must be 0 or more seconds")
    need(hp.dist_timeout > 0, f"--dist_timeout {hp.dist_timeout} must be positive seconds, e.g. 300")
    need(not hp.profile_steps or re.fullmatch(r"\d+:\d+", hp.profile_steps) is not None
         and int(hp.profile_steps.split(":")[0]) < int(hp.profile_steps.split(":")[1]) <= total,
         f"--profile_steps {hp.profile_steps!r} must look like 100:103 (first step, step after the last), "
         f"within the run's {total} steps")
    need(not hp.resume or Path(hp.resume).is_file(), f"--resume {hp.resume!r}: no such file")
