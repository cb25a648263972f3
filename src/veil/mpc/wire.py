"""Byte formats of the MPC messages: explicit little-endian layouts, never pickle.

* arrays: ``count:u8`` then, per array, ``dtype:u8 ndim:u8 dims:u32*ndim data`` (uint64 or
  uint8, little-endian);
* party-to-party message: ``"VMPC" session:16 sender:u16 seq:u64 step:u16`` + arrays; the
  receiver checks the session, the sender, the instruction number ``seq`` and the protocol
  step, and the shapes it expects (see :class:`veil.mpc.party.Party`);
* instruction (session -> party): ``"VINS" seq:u64 len:u32`` + a JSON object (the operation
  and its public parameters) + arrays (inputs for their owner, public constants);
* dealer payload and results (party -> session): arrays.

Every decoder raises :class:`ProtocolError` for a malformed message.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from veil.errors import DataError, ProtocolError

__all__ = ["pack_arrays", "unpack_arrays", "pack_message", "unpack_message",
           "pack_instruction", "unpack_instruction", "encode_index", "decode_index"]

_DTYPES = (np.dtype("<u8"), np.dtype("u1"))
_CODES = {np.dtype(np.uint64): 0, np.dtype(np.uint8): 1}
_MSG = struct.Struct("<4s16sHQH")
_INS = struct.Struct("<4sQI")
_MAX_NDIM = 32


def pack_arrays(arrays: Sequence[np.ndarray]) -> bytes:
    parts = [bytes([len(arrays)])]
    for a in arrays:
        a = np.asarray(a)
        code = _CODES[a.dtype]
        parts.append(struct.pack(f"<BB{a.ndim}I", code, a.ndim, *a.shape))
        parts.append(a.astype(_DTYPES[code], copy=False).tobytes())
    return b"".join(parts)


def unpack_arrays(data: bytes, offset: int = 0) -> list[np.ndarray]:
    """Decode the arrays of ``data[offset:]`` (which must hold nothing else)."""
    view = memoryview(data)
    try:
        count = view[offset]
        pos = offset + 1
        arrays = []
        for _ in range(count):
            code, ndim = struct.unpack_from("<BB", view, pos)
            if code >= len(_DTYPES) or ndim > _MAX_NDIM:
                raise ProtocolError(f"malformed message: array header with dtype code {code}, "
                                    f"ndim {ndim}")
            shape = struct.unpack_from(f"<{ndim}I", view, pos + 2)
            pos += 2 + 4 * ndim
            dtype = _DTYPES[code]
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if pos + nbytes > len(view):
                raise ProtocolError(f"malformed message: truncated array of shape {shape}")
            arr = np.frombuffer(view, dtype=dtype, count=nbytes // dtype.itemsize, offset=pos)
            arrays.append(arr.reshape(shape).astype(dtype.newbyteorder("="), copy=False))
            pos += nbytes
    except (IndexError, struct.error):
        raise ProtocolError("malformed message: truncated array data") from None
    if pos != len(view):
        raise ProtocolError(f"malformed message: {len(view) - pos} trailing bytes")
    return arrays


def pack_message(session: bytes, sender: int, seq: int, step: int,
                 arrays: Sequence[np.ndarray]) -> bytes:
    return _MSG.pack(b"VMPC", session, sender, seq, step) + pack_arrays(arrays)


def unpack_message(data: bytes) -> tuple[bytes, int, int, int, list[np.ndarray]]:
    """(session, sender, seq, step, arrays) of a party-to-party message."""
    if len(data) < _MSG.size:
        raise ProtocolError(f"malformed message: {len(data)} bytes, shorter than the header")
    magic, session, sender, seq, step = _MSG.unpack_from(data)
    if magic != b"VMPC":
        raise ProtocolError("malformed message: not an MPC message (bad magic)")
    return session, sender, seq, step, unpack_arrays(data, _MSG.size)


def pack_instruction(seq: int, op: dict[str, Any], arrays: Sequence[np.ndarray] = ()) -> bytes:
    body = json.dumps(op, separators=(",", ":")).encode()
    return _INS.pack(b"VINS", seq, len(body)) + body + pack_arrays(arrays)


def unpack_instruction(data: bytes) -> tuple[int, dict[str, Any], list[np.ndarray]]:
    if len(data) < _INS.size:
        raise ProtocolError("malformed instruction: shorter than its header")
    magic, seq, length = _INS.unpack_from(data)
    if magic != b"VINS" or _INS.size + length > len(data):
        raise ProtocolError("malformed instruction: bad magic or length")
    try:
        op = json.loads(bytes(data[_INS.size:_INS.size + length]))
    except ValueError:
        raise ProtocolError("malformed instruction: the operation is not JSON") from None
    if not isinstance(op, dict) or not isinstance(op.get("op"), str):
        raise ProtocolError("malformed instruction: no operation name")
    return seq, op, unpack_arrays(data, _INS.size + length)


def encode_index(index: Any) -> list:
    """A numpy basic/advanced index as JSON: ints, slices, None, Ellipsis, integer arrays."""
    parts = index if isinstance(index, tuple) else (index,)
    out = []
    for p in parts:
        if p is None:
            out.append(["n"])
        elif p is Ellipsis:
            out.append(["e"])
        elif isinstance(p, slice):
            out.append(["s", *(None if v is None else int(v) for v in (p.start, p.stop, p.step))])
        elif isinstance(p, (int, np.integer)) and not isinstance(p, (bool, np.bool_)):
            out.append(["i", int(p)])
        else:
            arr = np.asarray(p)
            if arr.dtype == np.bool_:
                arr = np.nonzero(arr)[0] if arr.ndim == 1 else None
            if arr is None or not np.issubdtype(arr.dtype, np.integer):
                raise DataError(f"index {p!r} is not supported on a SharedTensor: use ints, "
                                "slices, None, ..., integer arrays or 1-d boolean masks")
            out.append(["a", arr.tolist()])
    return out


def decode_index(spec: list) -> tuple:
    try:
        parts = []
        for p in spec:
            tag = p[0]
            if tag == "n":
                parts.append(None)
            elif tag == "e":
                parts.append(Ellipsis)
            elif tag == "s":
                parts.append(slice(p[1], p[2], p[3]))
            elif tag == "i":
                parts.append(int(p[1]))
            elif tag == "a":
                parts.append(np.asarray(p[1], dtype=np.int64))
            else:
                raise ValueError(tag)
    except (ValueError, TypeError, IndexError):
        raise ProtocolError(f"malformed index in an instruction: {spec!r}") from None
    return tuple(parts)
