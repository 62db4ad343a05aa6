"""Writing files so that a failure is one clear line: the path and the cause, no partial file left, the previous
good file kept."""
import os
import tempfile

from data.shards import atomic_write


class WriteError(OSError):
    """A file of the run could not be written; the message names the path and the cause."""


def write_atomically(path: str, data) -> None:
    """Write bytes through data/shards.atomic_write (a hidden temporary file renamed over `path`: a reader never sees
    a half-written file, and a failed write leaves the previous one as it was), synced to the disk before the
    rename, so that a crash right after cannot leave an empty checkpoint either."""
    def write(f):
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    try:
        atomic_write(path, write)
    except OSError as e:
        raise WriteError(f"cannot write {path}: {e.strerror or e}; the previous file, if any, is unchanged") from None


def check_writable(folder: str, what: str) -> None:
    """Create `folder` if needed and write and remove a probe file in it, so that a folder that cannot take the run's
    files (read-only, not a folder, full) is refused before the expensive start-up."""
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe"):
            pass
    except OSError as e:
        raise WriteError(f"{what} {folder!r} cannot hold the run's files ({e.strerror or e}); choose another "
                         "folder") from None
