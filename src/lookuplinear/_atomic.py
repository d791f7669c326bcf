"""Files replaced in one step: a reader, or a crash, sees the old file or the new one whole."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["fsync_dir", "replacing"]


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str], *, durable: bool = False) -> Iterator[Path]:
    """A new file beside ``path`` to write; when the ``with`` block ends without an exception
    it replaces ``path`` (``os.replace``, atomic on POSIX and Windows) with the mode a new
    file gets from the umask; when it raises, the new file is removed and ``path`` is left as
    it was.

    ``durable``: the file's data reaches the disk (``fsync``) before the rename, so that a
    power cut leaves one of the two files, not an empty one; the rename itself is on disk once
    the directory is synced (:func:`fsync_dir`), which the caller does when it needs to.

    Examples
    --------
    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "model.txt"
    >>> with replacing(target) as tmp:
    ...     _ = tmp.write_text("new")
    >>> target.read_text()
    'new'
    """
    out = Path(path)
    fd, name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        if durable:
            _fsync(tmp, os.O_RDWR)
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Put the directory ``path``'s entries (a rename into it) on disk."""
    _fsync(Path(path), os.O_RDONLY)


def _fsync(path: Path, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
