"""Command-line settings: `--name value` / `--name=value` overrides of a settings dataclass, type-checked, then
validated as a whole. Imports nothing heavy: --help, --check and setting errors answer before torch loads."""
import dataclasses
import inspect
import math
import re
from ast import literal_eval

from harness.cli import UserError


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
        raise UserError(f"--{name} {text!r} is not a valid {type(default).__name__}") from None
    return typed(name, value, default, text)


def typed(name: str, value, default, text=None):
    """`value` as a value of the default's type (an int where a float is expected is one, a list where a tuple is
    a tuple), finite; else a UserError naming --name and the value (`text`, as given, where it was text)."""
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if isinstance(default, tuple) and isinstance(value, list):
        value = tuple(value)
    if type(value) is not type(default):
        kind = type(default).__name__
        raise UserError(f"--{name} expects {'an' if kind[0] in 'aeiou' else 'a'} {kind}, got "
                        f"{value if text is None else text!r}")
    if not all(math.isfinite(v) for v in _numbers(value)):  # 1e999 parses as inf
        raise UserError(f"--{name} {value!r} must be finite")
    return value


def _numbers(value) -> list:
    """The floats and ints in a value, through nested tuples."""
    if isinstance(value, tuple):
        return [x for v in value for x in _numbers(v)]
    return [value] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def parse_args(argv: list[str], cls, validate, check=None):
    """An instance of the dataclass `cls` with argv's overrides, checked by validate(instance), and the names argv set
    (a setting given equal to its default is still given); a bad one is a UserError. --help/-h prints every setting;
    --check validates, runs check(instance) (e.g. that the data files exist; it raises UserError on a problem) and
    exits: both exit here."""
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
            raise UserError(f"unexpected argument {token!r}; settings are passed as --name value (--help lists them)")
        if "=" in token:
            name, text = token[2:].split("=", 1)
            i += 1
        else:
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):  # a flag is no value: a wrapper's --check
                raise UserError(f"{token} needs a value" + (f", not the flag {argv[i + 1]} (write {token}=VALUE for a "
                                                             "value that starts with --)" if i + 1 < len(argv) else ""))
            name, text = token[2:], argv[i + 1]
            i += 2
        if name not in fields:
            raise UserError(f"unknown setting --{name} (--help lists the settings)")
        setattr(args, name, parse_value(name, text, getattr(args, name)))
        given.add(name)
    validate(args)
    if check_only:
        if check is not None:
            check(args)
        print("settings OK")
        raise SystemExit(0)
    return args, given


def need(ok: bool, message: str):
    """A settings rule: a one-line error naming the flag and a valid value where it is broken."""
    if not ok:
        raise UserError(message)


def runtime(default):
    """A setting of how the run runs, not of what it computes: a resumed run may change it (harness/checkpoint.py)."""
    return dataclasses.field(default=default, metadata={"runtime": True})


def runtime_settings(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if f.metadata.get("runtime")}
