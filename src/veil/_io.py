"""Atomic file writes: a reader (or a crash) sees the old file or the new one, never half.

:func:`atomic_open` writes into a temporary file beside the target, flushes and fsyncs
it, renames it over the target (``os.replace`` is atomic on POSIX and Windows) and fsyncs
the folder, so the rename itself survives a power cut. On any error the temporary file is
removed and the target is untouched. :func:`atomic_write` writes text or bytes at once,
:func:`save_figure` a matplotlib figure.

:func:`write_private` is the one writer of secrets (private keys, key shares, identities):
the file is created 0600 and never written through a symlink or over an existing file
unless asked (``force``).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from veil.errors import ConfigError

__all__ = ["atomic_open", "atomic_write", "check_absent", "save_figure", "write_private"]


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


def check_absent(paths: Sequence[str | os.PathLike], *, force: bool = False,
                 what: str = "key file") -> None:
    """ConfigError naming those of ``paths`` that exist (a symlink, even dangling, counts),
    unless ``force``: a writer of several keys calls it before writing any."""
    taken = [os.fspath(p) for p in paths if os.path.lexists(p)]
    if taken and not force:
        raise ConfigError(f"{what} {', '.join(map(repr, taken))} already exists: a key is "
                          "never replaced without --force (force=True)")


def write_private(path: str | os.PathLike, data: bytes, *, force: bool = False,
                  what: str = "key file") -> Path:
    """Write the secret ``data`` to ``path``, readable and writable by its owner only.

    The bytes go to a temporary file beside ``path``, created with mode 0600 by
    :func:`tempfile.mkstemp` (``O_CREAT | O_EXCL | O_NOFOLLOW``) and fsynced; it is then
    hard-linked to ``path``, which fails if anything is there, a symlink included, so no
    existing file (and its mode) is reused and no link is followed: a
    :class:`~veil.errors.ConfigError` naming ``what`` and the path. With ``force`` it is
    renamed over ``path`` instead (``os.replace`` replaces a symlink itself, never its
    target). A crash leaves the old state or the whole new file, at 0600 either way.
    Returns the path.
    """
    target = Path(path)
    check_absent([target], force=force, what=what)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if force:
            os.replace(tmp, target)
        else:
            try:
                os.link(tmp, target, follow_symlinks=False)
            except FileExistsError:  # it appeared meanwhile
                check_absent([target], what=what)
            os.unlink(tmp)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_folder(target.parent)
    return target


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
