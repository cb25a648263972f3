"""Atomic file writes: a reader (or a crash) sees the old file or the new one, never half.

:func:`atomic_open` writes into a temporary file beside the target, flushes and fsyncs
it, renames it over the target (``os.replace`` is atomic on POSIX and Windows) and fsyncs
the folder, so the rename itself survives a power cut. On any error the temporary file is
removed and the target is untouched. :func:`atomic_write` writes text or bytes at once,
:func:`save_figure` a matplotlib figure.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_open", "atomic_write", "save_figure"]


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **options: Any) -> Iterator[IO[Any]]:
    """A file object (``mode`` "w" or "wb", ``options`` as for :func:`open`) whose content
    replaces ``path`` when the block ends without an error."""
    if mode not in ("w", "wb"):
        raise ValueError(f"mode={mode!r}: atomic_open writes whole files ('w' or 'wb')")
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, **options) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_folder(target.parent)


def atomic_write(path: str | os.PathLike, data: str | bytes, *,
                 encoding: str = "utf-8") -> None:
    """Replace ``path`` with ``data`` atomically (text is written in ``encoding``)."""
    if isinstance(data, str):
        with atomic_open(path, "w", encoding=encoding) as fh:
            fh.write(data)
    else:
        with atomic_open(path, "wb") as fh:
            fh.write(data)


def save_figure(fig: Any, path: str | os.PathLike, *, dpi: int = 120) -> None:
    """Save a matplotlib figure atomically (its format from the file name) and close it."""
    import matplotlib.pyplot as plt

    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format=fmt, dpi=dpi)
    plt.close(fig)


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:          # a folder cannot be opened on some platforms: best effort
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
