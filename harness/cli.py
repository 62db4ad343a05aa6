"""The ground floor: the one convention of every program (train_gpt.py, the data/ and tools/ programs) for bad
input and faults, and the one exception type for them.

A bad argument, a malformed input or a failed write ends with ONE line on stderr that starts with `error:`, names
the file (and line, where there is one) and says the fix, with exit status 1 (2 for an argument ArgumentParser refuses);
Ctrl-C ends with one line and status 130, after the program's clean-up (train_gpt.py's signals: a line of its own
and 1). Never a traceback: those are for bugs. The code below the entry points raises UserError; only program()
prints the line and exits. Imports nothing of the project and no torch: everything else may import it.
"""
import argparse
import errno
import functools
import math
import os
import sys


class UserError(Exception):
    """A problem the user can fix: its message says what, where (file:line) and how, on one line, without the
    `error: ` that program() puts before it."""


def stderr_line(text: str):
    """text and its newline on stderr in one write, so that lines printed by several ranks at once stay whole
    (print() writes the newline separately: with PYTHONUNBUFFERED, a write each)."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


# what to do about an OSError, by its errno (the path and the system's words come first)
_OS_FIXES = {
    errno.ENOSPC: "free space on that disk or write elsewhere",
    errno.EDQUOT: "free space within your quota or write elsewhere",
    errno.EROFS: "that file system is read-only: write elsewhere",
    errno.EACCES: "give yourself permission there or use another path",
    errno.EPERM: "give yourself permission there or use another path",
    errno.ENOTDIR: "a part of the path is a file, not a folder: choose another path",
    errno.ENAMETOOLONG: "choose a shorter name",
    errno.ENOENT: "check the path (does its folder exist?)",
    errno.EISDIR: "it is a folder: name a file, or move the folder away",
    errno.EEXIST: "move that file away or choose another path",
}


def shown(text, limit: int = 200) -> str:
    """`text` (a path, a value) for a one-line message: whole up to `limit` characters, else its two ends and its
    length, so that a 10,000-character argument still makes a line one can read."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:100]}...{text[-60:]} ({len(text):,} characters)"


def describe_os_error(e: OSError, path=None) -> str:
    """`path: the system's words; the fix` on one line: every program's words for an OSError. path: the file named,
    where not e's own ("": none, where the line names it already)."""
    if e.errno is None:  # raised with a message of its own
        return " ".join(str(e).split())
    path = e.filename if path is None else path
    return f"{f'{shown(path)}: ' if path else ''}{e.strerror}; {_OS_FIXES.get(e.errno, 'check the path and the disk')}"


def program(main=None, *, error_status: int = 1, ending=None):
    """Decorate main(argv), the entry point of every program: a UserError or an OSError becomes the one `error:` line
    and exit status `error_status`; Ctrl-C (KeyboardInterrupt, whose message may add what the program kept) one line
    and 130; an exit with a status (--help's 0, argparse's 2) passes as it is; anything else is a bug, with its
    traceback. ending(exception) -> a line or None: the program's own outcomes, asked first, each ending with its
    line and `error_status` (train_gpt.py's: harness/guard.run_ending)."""
    if main is None:
        return functools.partial(program, error_status=error_status, ending=ending)

    @functools.wraps(main)
    def run(argv=None):
        try:
            return main(argv)
        except BrokenPipeError:  # the reader of our output left (`| head`): nothing to say, to no one
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush fails no more
            raise SystemExit(141) from None
        except BaseException as e:
            if (said := _last_line(e, error_status, ending)) is None:
                raise
            stderr_line(said[0])
            raise SystemExit(said[1]) from None
    return run


def _last_line(e: BaseException, status: int, ending=None) -> tuple[str, int] | None:
    """The line and exit status a program ends with on `e` (program()), or None where `e` passes on."""
    if ending is not None and (line := ending(e)) is not None:
        return line, status
    if isinstance(e, UserError):
        return f"error: {e}", status
    if isinstance(e, OSError):
        return f"error: {describe_os_error(e)}", status
    if isinstance(e, KeyboardInterrupt):
        return f"interrupted by Ctrl-C: stopped{f'; {e}' if str(e) else ''}", 130
    return None


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are the one `error:` line (argparse's own prints the usage first), and which takes no
    abbreviated option: a typo (--line_doc) is refused, not read as the option it starts."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def error(self, message):
        stderr_line(f"error: {message} ({self.prog} --help lists the options)")
        raise SystemExit(2)


def whole(low: int, high: int | None = None):
    """An argparse type: an int in low..high (no upper bound when high is None)."""
    want = f"a whole number >= {low:,}" if high is None else f"a whole number in {low:,}..{high:,}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{text!r} is not {want}")
        return value
    return parse


def number(text, low: float = 0.0, above: bool = True) -> float:
    """text (or a number) as a finite float > low (>= low when not above); a ValueError saying what was expected
    otherwise (NaN, inf, zero or negative timings and sizes make no sense)."""
    try:
        value = float(text)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int too large for a float
        value = math.nan
    if not (math.isfinite(value) and (value > low if above else value >= low)):
        raise ValueError(f"{text!r} is not a finite number {'>' if above else '>='} {low:g}")
    return value


def finite(low: float = 0.0, *, above: bool = True):
    """number() as an argparse type."""
    def parse(text: str) -> float:
        try:
            return number(text, low, above)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return parse

