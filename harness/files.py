"""Writing files so that a failure is one clear line: the path and the cause, no partial file left, the previous
good file kept; the output folders and files checked before the long work; and a lock that one process holds
while it writes. No torch: every program uses it. Its refusals are UserErrors (harness/cli.py)."""
import atexit
import fcntl
import os
import socket
import stat
import tempfile
import time
from pathlib import Path

from harness.cli import UserError, describe_os_error, shown


def atomic_write(path, write) -> None:
    """Create or replace the file `path` with what write(binary file) writes, all or nothing: the file appears
    complete under its name or not at all, and the old one stays until then. A failure (a full disk, Ctrl-C) also
    removes the hidden temporary file beside it; an OSError names `path`, whichever file or call raised it."""
    path = Path(path)
    # hidden from globs of *.bin; cut so that only a name too long for the file system itself is refused as one
    tmp = path.with_name(f".{path.name[:200]}.{os.getpid()}.tmp")
    try:
        with open(tmp, "xb") as f:  # x: a file that happens to have this name is never truncated
            write(f)
        os.replace(tmp, path)
    except BaseException as e:
        # not after FileExistsError: that file is someone else's. A flag set after open() would miss a Ctrl-C that
        # lands as open() returns.
        if not isinstance(e, FileExistsError):
            tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and e.errno is not None:
            raise OSError(e.errno, e.strerror, str(path)) from None
        raise


def check_output_folder(folder, option: str) -> Path:
    """The output folder that `option` (e.g. --out) names, as a Path; refused when it, or the nearest part of its
    path that exists, is not a folder. The programs create the folder where it is missing."""
    folder = Path(folder)
    existing = next(p for p in (folder, *folder.parents) if p.exists() or p == Path(p.anchor))
    if not existing.is_dir():
        where = "" if existing == folder else f": {existing}"
        raise UserError(f"{option} {folder}{where} is a file; name a folder (it is created if missing)")
    return folder


def make_output_folder(folder) -> None:
    """Create `folder` (and its parents) where missing, then check_writable(folder): refused before the long work."""
    os.makedirs(folder, exist_ok=True)
    check_writable(folder)


def check_writable(folder) -> None:
    """Create and remove a probe file in `folder` (which exists), so that a folder that cannot take files (read-only,
    without permission, not a folder) is refused before the long work, with an OSError naming `folder` whichever
    call failed. The trainer and the data/ and tools/ programs each phrase it in their own one line."""
    try:
        with tempfile.TemporaryFile(dir=folder):  # unnamed where the file system allows: nothing left if killed
            pass
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(folder)) from None


def check_input_file(path, option: str, example: str = "") -> None:
    """Before the work: the file `path` that `option` (e.g. --resume) names can be read; else a UserError saying what
    it is: missing, a folder (naming a file in it that matches the glob `example`, if one does), a path the system
    refuses (too long, not a folder on the way, no permission)."""
    where = f"{option} {shown(path)!r}"
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise UserError(f"{where}: no such file") from None
    except OSError as e:
        raise UserError(f"{where}: {describe_os_error(e, path='')}") from None
    if stat.S_ISDIR(mode):
        found = sorted(Path(path).glob(example)) if example else []
        raise UserError(f"{where} is a folder; name a file in it{f', e.g. {found[0]}' if found else ''}")
    if not os.access(path, os.R_OK):
        raise UserError(f"{where}: no permission to read it; give yourself permission or use another path")


def check_output(path, inputs=()) -> Path:
    """Before the work: the file `path` can be created or replaced (its folder exists and takes files) and is none
    of the `inputs`, which are never overwritten."""
    path = Path(path)
    for name in inputs:
        try:
            if path.samefile(name):
                raise UserError(f"{path} is the input {name}; name a new file for the output")
        except FileNotFoundError:  # either one: not the same file
            pass
    if path.is_dir():
        raise UserError(f"{path} is a folder; name a file in it")
    check_writable(path.parent)
    return path


class LockHeld(Exception):
    """Another live process holds the lock; the message names it (`process PID on HOST`)."""


def hold_lock(path):
    """An exclusive lock on the file `path` (created, with this process's id and host in it) for as long as this
    process lives: fcntl.flock, which the kernel releases when the process ends however it ends, so a killed process
    leaves no stale lock. Taking it is one step, never a check followed by a create: of two processes, one wins.
    Returns release(), which removes the file and unlocks (also run at exit); raises LockHeld while another process
    holds it."""
    path = Path(path)
    while True:
        f = open(path, "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held = os.path.samestat(os.fstat(f.fileno()), os.stat(path))  # not removed by a holder as we opened it
        except BlockingIOError:
            holder = _holder(f)
            f.close()
            raise LockHeld(holder) from None
        except FileNotFoundError:
            held = False
        except BaseException:
            f.close()
            raise
        if held:
            break
        f.close()  # the file its last holder removed on release: lock the one now at `path`
    f.truncate(0)
    f.write(f"{os.getpid()} {socket.gethostname()}\n")
    f.flush()

    def release():
        if not f.closed:
            path.unlink(missing_ok=True)  # before unlocking: whoever opened it meanwhile sees it gone and retries
            f.close()
    atexit.register(release)
    return release


def _holder(f) -> str:
    """Who holds the lock on the open file f: its holder writes that right after taking it, so wait a moment."""
    for _ in range(20):
        f.seek(0)
        if len(words := f.read().split()) == 2:
            return f"process {words[0]} on host {words[1]}"
        time.sleep(0.05)
    return "another process"
