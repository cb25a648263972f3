"""Byte formats of the MPC messages: frames of :mod:`veil._codec`, never pickle.

* arrays (dealer payload, results: party -> session): magic ``b"VMPA"``; ``count:u8`` then
  codec arrays (uint64 or uint8);
* party-to-party message: magic ``b"VMPC"``, ``session:16 sender:u16 seq:u64 step:u16``,
  then the arrays as above; the receiver checks the session, the sender, the instruction
  number ``seq`` and the protocol step, and the shapes it expects (see
  :class:`veil.mpc.party.Party`);
* instruction (session -> party): magic ``b"VINS"``, ``seq:u64``, a JSON object as text
  (the operation and its public parameters), then the arrays (inputs for their owner,
  public constants).

Every decoder is bounded (:mod:`veil._codec`) and raises :class:`ProtocolError` for a
malformed message.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from veil._codec import Format, Reader, Writer
from veil.errors import DataError, ProtocolError

__all__ = ["pack_arrays", "unpack_arrays", "pack_message", "unpack_message",
           "pack_instruction", "unpack_instruction", "encode_index", "decode_index"]

ARRAYS = Format(b"VMPA", 1, name="MPC payload")
MESSAGE = Format(b"VMPC", 1, name="MPC message")
INSTRUCTION = Format(b"VINS", 1, name="MPC instruction")
_DTYPES = (np.dtype(np.uint64), np.dtype(np.uint8))


def _write_arrays(out: Writer, arrays: Sequence[np.ndarray]) -> bytes:
    out.u8(len(arrays))
    for a in arrays:
        a = np.asarray(a)
        if a.dtype not in _DTYPES:
            raise ProtocolError(f"cannot send an array of dtype {a.dtype}: uint64 or uint8")
        out.array(a)
    return out.finish()


def _read_arrays(reader: Reader) -> list[np.ndarray]:
    arrays = [reader.array(dtypes=_DTYPES) for _ in range(reader.u8())]
    reader.done()
    return arrays


def pack_arrays(arrays: Sequence[np.ndarray]) -> bytes:
    return _write_arrays(ARRAYS.writer(), arrays)


def unpack_arrays(data: bytes, offset: int = 0) -> list[np.ndarray]:
    """Decode the arrays of ``data[offset:]`` (which must hold nothing else)."""
    return _read_arrays(ARRAYS.reader(memoryview(data)[offset:]))


def pack_message(session: bytes, sender: int, seq: int, step: int,
                 arrays: Sequence[np.ndarray]) -> bytes:
    out = MESSAGE.writer().raw(session).u16(sender).u64(seq).u16(step)
    return _write_arrays(out, arrays)


def unpack_message(data: bytes) -> tuple[bytes, int, int, int, list[np.ndarray]]:
    """(session, sender, seq, step, arrays) of a party-to-party message."""
    reader = MESSAGE.reader(data)
    session, sender, seq, step = bytes(reader.take(16)), reader.u16(), reader.u64(), reader.u16()
    return session, sender, seq, step, _read_arrays(reader)


def pack_instruction(seq: int, op: dict[str, Any], arrays: Sequence[np.ndarray] = ()) -> bytes:
    out = INSTRUCTION.writer().u64(seq).text(json.dumps(op, separators=(",", ":")))
    return _write_arrays(out, arrays)


def unpack_instruction(data: bytes) -> tuple[int, dict[str, Any], list[np.ndarray]]:
    reader = INSTRUCTION.reader(data)
    seq, text = reader.u64(), reader.text()
    try:
        op = json.loads(text)
    except (ValueError, RecursionError):
        raise reader.fail("the operation is not JSON") from None
    if not isinstance(op, dict) or not isinstance(op.get("op"), str):
        raise reader.fail("no operation name")
    return seq, op, _read_arrays(reader)


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
