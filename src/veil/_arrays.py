"""Reading arrays from a file without running anything from it.

:func:`read_arrays` is the one reader of veil's array files: model files
(:mod:`veil.learn.model_format`), a run's scores, audit and MPC inputs, a party's data files.
``numpy.load`` would unpickle an object array when asked and tells a user to ask; this reader
parses each ``.npy`` header itself and refuses anything but numbers and booleans, before it
allocates the array.
"""

from __future__ import annotations

import math
import os
import zipfile
from collections.abc import Sequence
from pathlib import Path
from tokenize import TokenError
from typing import Any

import numpy as np

from veil.errors import DataError

__all__ = ["MAX_ARRAYS", "NPY_ARRAY", "read_arrays"]

#: the most arrays one file may hold
MAX_ARRAYS = 4096
#: the dtype kinds an array may have: booleans, integers, floats, complex numbers
_KINDS = "biufc"
#: the key of a ``.npy`` file's one array in :func:`read_arrays`'s answer
NPY_ARRAY = "array"
_NPY_MAGIC, _ZIP_MAGICS = b"\x93NUMPY", (b"PK\x03\x04", b"PK\x05\x06")


def read_arrays(path: str | os.PathLike, *, what: str = "a .npy or .npz file of arrays",
                names: Sequence[str] = (), deflated: bool = True) -> dict[str, np.ndarray]:
    """The arrays of the ``.npy`` file (under the key :data:`NPY_ARRAY`) or ``.npz``
    archive at ``path``, read without running anything from the file: each array's header
    is parsed and checked before its memory is allocated (numbers and booleans only, so no
    object array and no pickle; its byte count equals what the file holds), at most
    :data:`MAX_ARRAYS` of them. ``names``: arrays that must be there. ``deflated``: admit
    compressed members (``numpy.savez_compressed``); without it (model files: the module
    docstring's threat model) members must be stored, their sizes summing to at most the
    file's, so memory stays linear in the file's size.

    Anything else -- a pickle, an object array, a text file, a broken archive -- is a
    :class:`~veil.errors.DataError` in veil's words, ``"PATH is not WHAT: why"``; numpy's
    advice to load a file "unsafely using allow_pickle=" never reaches the user.
    """
    path = Path(path)
    not_what = f"{path} is not {what}"
    try:
        with open(path, "rb") as fh:
            magic = fh.read(6)
            if magic == _NPY_MAGIC:
                fh.seek(0)
                arrays = {NPY_ARRAY: _read_npy(fh, path.stat().st_size, path.name)}
    except IsADirectoryError:
        raise DataError(f"{not_what}: it is a directory") from None
    except OSError as exc:
        raise DataError(f"{not_what}: it cannot be read ({exc.strerror or exc})") from None
    except DataError as exc:
        raise DataError(f"{not_what}: {exc}") from None
    if magic != _NPY_MAGIC:
        if magic[:4] not in _ZIP_MAGICS:
            raise DataError(f"{not_what}: " + (
                "it is a Python pickle, which veil never loads (unpickling runs code from "
                "the file)" if magic[:1] == b"\x80" else
                "it is neither a .npy file nor an .npz archive"))
        try:
            arrays = _read_npz(path, deflated)
        except DataError as exc:
            raise DataError(f"{not_what}: {exc}") from None
        except (OSError, ValueError, EOFError, RuntimeError, NotImplementedError,
                zipfile.BadZipFile, zipfile.LargeZipFile):  # zipfile's words are not veil's
            raise DataError(f"{not_what}: it is not a readable .npz archive") from None
    missing = [n for n in names if n not in arrays]
    if missing:
        raise DataError(f"{not_what}: it has no array {', '.join(map(repr, missing))} "
                        f"(it holds {sorted(arrays)})")
    return arrays


def _read_npy(fh: Any, size: int, name: str) -> np.ndarray:
    """One ``.npy`` array from ``fh`` holding ``size`` bytes, checked before allocation."""
    try:  # numpy parses the header's Python literal; it may raise any of these
        version = np.lib.format.read_magic(fh)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, fortran, dtype = read_header(fh)
    except (ValueError, TypeError, SyntaxError, TokenError, RecursionError):
        raise DataError(f"member {name[:80]!r} has no readable .npy header") from None
    if dtype.hasobject or dtype.kind not in _KINDS or dtype.fields:
        raise DataError(f"array {name[:80]!r} has dtype {dtype}; only numbers and booleans "
                        "are allowed (veil never loads Python objects from a file)")
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes != size - fh.tell():
        raise DataError(f"array {name[:80]!r} declares shape {shape} ({nbytes} bytes) but "
                        f"holds {size - fh.tell()}")
    data = np.frombuffer(fh.read(nbytes), dtype=dtype)
    return data.reshape(shape, order="F" if fortran else "C").copy()


def _read_npz(path: Path, deflated: bool) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` archive, each checked by :func:`_read_npy`."""
    arrays: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(path) as archive:
        members = archive.infolist()
        if len(members) > MAX_ARRAYS:
            raise DataError(f"{len(members)} members, more than MAX_ARRAYS={MAX_ARRAYS}")
        if not deflated and sum(m.file_size for m in members) > path.stat().st_size:
            raise DataError("the members declare more bytes than the file holds")
        for member in members:
            stored = (member.compress_type == zipfile.ZIP_STORED
                      and member.file_size == member.compress_size)
            if not member.filename.endswith(".npy") or not (stored or deflated):
                raise DataError(f"member {member.filename[:80]!r} is not an uncompressed .npy "
                                "array")
            with archive.open(member) as fh:
                arrays[member.filename[:-4]] = _read_npy(fh, member.file_size, member.filename)
    return arrays
