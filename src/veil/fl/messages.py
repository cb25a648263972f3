"""Protocol messages: a typed envelope, a self-describing binary encoding, checked accessors.

Every message of every federated protocol is a :class:`Message`: the protocol's name, the
round id, the stage, the sender and the recipient (client ids are integers >= 0, the
server is :data:`SERVER` = -1) and a body, a mapping from field names to values.

Wire format (no pickle, nothing executable): ``b"VEIL" || version || value`` where a value
is a one-byte tag followed by its content, lengths as little-endian uint32:

=======  =========================================================================
tag      content
=======  =========================================================================
N/F/T    None / False / True (no content)
i        an integer of any size: length, then two's-complement big-endian bytes
           (big integers travel as bytes, never truncated)
f        float64, 8 bytes little-endian
s        UTF-8 text: length, bytes
b        raw bytes: length, bytes
a        numpy array: dtype code (bool, int8..int64, uint8..uint64, float32, float64),
           ndim, each dimension as uint64, then the little-endian data
l        list: count, values
d        mapping: count, (key, value) pairs; keys are text or integers
=======  =========================================================================

Decoding checks every length against the bytes left and every type against the grammar, so
truncated, oversized or garbled input is a :class:`~veil.errors.ProtocolError`, never a
numpy or struct traceback. The accessors (:meth:`Message.array`, :meth:`Message.integer`,
...) then validate each field where it is used (type, dtype, shape, finiteness, range) and
name the sender and the field in the error.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from veil.errors import ProtocolError

__all__ = ["SERVER", "Message", "encode", "decode"]

#: the sender/recipient id of the server
SERVER = -1

_MAGIC = b"VEIL"
_VERSION = 1
_MAX_DEPTH = 16
_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float32", "float64")
_DTYPE_CODE = {np.dtype(name): code for code, name in enumerate(_DTYPES)}
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_F64 = struct.Struct("<d")


# -- encoding ---------------------------------------------------------------------------
def _put_len(out: bytearray, n: int) -> None:
    if n >= 2 ** 32:
        raise ProtocolError(f"cannot encode a value of length {n}: the limit is 2^32 - 1")
    out += _U32.pack(n)


def _encode(value: Any, out: bytearray, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise ProtocolError(f"cannot encode values nested deeper than {_MAX_DEPTH}")
    if value is None:
        out += b"N"
    elif isinstance(value, (bool, np.bool_)):
        out += b"T" if value else b"F"
    elif isinstance(value, (int, np.integer)):
        v = int(value)
        raw = v.to_bytes((v.bit_length() + 8) // 8, "big", signed=True)
        out += b"i"
        _put_len(out, len(raw))
        out += raw
    elif isinstance(value, (float, np.floating)):
        out += b"f" + _F64.pack(float(value))
    elif isinstance(value, str):
        raw = value.encode("utf-8")
        out += b"s"
        _put_len(out, len(raw))
        out += raw
    elif isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        out += b"b"
        _put_len(out, len(raw))
        out += raw
    elif isinstance(value, np.ndarray):
        code = _DTYPE_CODE.get(value.dtype.newbyteorder("="))
        if code is None:
            raise ProtocolError(f"cannot encode an array of dtype {value.dtype}: allowed "
                                f"{', '.join(_DTYPES)}")
        if value.ndim > 255:
            raise ProtocolError("cannot encode an array with more than 255 dimensions")
        out += b"a" + bytes([code, value.ndim])
        for dim in value.shape:
            out += _U64.pack(dim)
        out += np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<")).tobytes()
    elif isinstance(value, (list, tuple)):
        out += b"l"
        _put_len(out, len(value))
        for item in value:
            _encode(item, out, depth + 1)
    elif isinstance(value, Mapping):
        out += b"d"
        _put_len(out, len(value))
        for key, item in value.items():
            if isinstance(key, bool) or not isinstance(key, (str, int, np.integer)):
                raise ProtocolError(f"cannot encode mapping key {key!r}: keys are text or "
                                    "integers")
            _encode(key, out, depth + 1)
            _encode(item, out, depth + 1)
    else:
        raise ProtocolError(f"cannot encode a value of type {type(value).__name__}")


def encode(value: Any) -> bytes:
    """Serialize a value (see the module docstring for what is allowed)."""
    out = bytearray(_MAGIC)
    out.append(_VERSION)
    _encode(value, out, 0)
    return bytes(out)


# -- decoding ---------------------------------------------------------------------------
class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def take(self, n: int) -> memoryview:
        if n > len(self.data) - self.pos:
            raise ProtocolError(f"malformed message: needs {n} more bytes at offset "
                                f"{self.pos}, only {len(self.data) - self.pos} left")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def length(self) -> int:
        return _U32.unpack(self.take(4))[0]

    def value(self, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise ProtocolError(f"malformed message: values nested deeper than {_MAX_DEPTH}")
        tag = bytes(self.take(1))
        if tag == b"N":
            return None
        if tag in (b"T", b"F"):
            return tag == b"T"
        if tag == b"i":
            return int.from_bytes(self.take(self.length()), "big", signed=True)
        if tag == b"f":
            return _F64.unpack(self.take(8))[0]
        if tag == b"s":
            try:
                return str(self.take(self.length()), "utf-8")
            except UnicodeDecodeError:
                raise ProtocolError("malformed message: text is not valid UTF-8") from None
        if tag == b"b":
            return bytes(self.take(self.length()))
        if tag == b"a":
            return self.array()
        if tag == b"l":
            return [self.value(depth + 1) for _ in range(self.length())]
        if tag == b"d":
            out: dict[Any, Any] = {}
            for _ in range(self.length()):
                key = self.value(depth + 1)
                if isinstance(key, bool) or not isinstance(key, (str, int)):
                    raise ProtocolError(f"malformed message: mapping key {key!r} is not "
                                        "text or an integer")
                if key in out:
                    raise ProtocolError(f"malformed message: mapping key {key!r} repeated")
                out[key] = self.value(depth + 1)
            return out
        raise ProtocolError(f"malformed message: unknown tag {tag!r} at offset {self.pos - 1}")

    def array(self) -> np.ndarray:
        code, ndim = bytes(self.take(2))
        if code >= len(_DTYPES):
            raise ProtocolError(f"malformed message: unknown array dtype code {code}")
        dtype = np.dtype(_DTYPES[code]).newbyteorder("<")
        shape = tuple(_U64.unpack(self.take(8))[0] for _ in range(ndim))
        count = math.prod(shape)
        raw = self.take(count * dtype.itemsize)
        return np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("="),
                                                       copy=True).reshape(shape)


def decode(data: bytes) -> Any:
    """Parse bytes written by :func:`encode`; malformed input is a ProtocolError."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProtocolError(f"expected bytes to decode, got {type(data).__name__}")
    reader = _Reader(bytes(data))
    if bytes(reader.take(4)) != _MAGIC:
        raise ProtocolError("malformed message: it does not start with the veil magic bytes")
    version = reader.take(1)[0]
    if version != _VERSION:
        raise ProtocolError(f"unsupported message version {version}; this is version "
                            f"{_VERSION}")
    value = reader.value(0)
    if reader.pos != len(reader.data):
        raise ProtocolError(f"malformed message: {len(reader.data) - reader.pos} trailing "
                            "bytes")
    return value


# -- the envelope -------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Message:
    """One protocol message. ``body`` maps field names to encodable values."""

    protocol: str
    round: int
    stage: str
    sender: int
    recipient: int
    body: Mapping[str, Any] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        """The wire form (see the module docstring)."""
        return encode([self.protocol, self.round, self.stage, self.sender, self.recipient,
                       dict(self.body)])

    @classmethod
    def from_bytes(cls, data: bytes) -> Message:
        """Parse and check the envelope; the body's fields are checked by the accessors."""
        value = decode(data)
        if not (isinstance(value, list) and len(value) == 6):
            raise ProtocolError("malformed message: the envelope is not a 6-item list")
        protocol, rnd, stage, sender, recipient, body = value
        checks = ((isinstance(protocol, str), "protocol", protocol),
                  (_is_int(rnd) and rnd >= 0, "round", rnd),
                  (isinstance(stage, str), "stage", stage),
                  (_is_int(sender) and sender >= SERVER, "sender", sender),
                  (_is_int(recipient) and recipient >= SERVER, "recipient", recipient),
                  (isinstance(body, dict) and all(isinstance(k, str) for k in body),
                   "body", type(body).__name__))
        for ok, name, got in checks:
            if not ok:
                raise ProtocolError(f"malformed message: envelope field {name}={got!r}")
        return cls(protocol, rnd, stage, sender, recipient, body)

    # -- checked access to the body ------------------------------------------------------
    @property
    def origin(self) -> str:
        """'server' or 'client <id>', for error messages."""
        return "server" if self.sender == SERVER else f"client {self.sender}"

    def _error(self, name: str, problem: str) -> ProtocolError:
        return ProtocolError(f"{self.origin}, round {self.round}, stage {self.stage!r}: "
                             f"field {name!r} {problem}")

    def get(self, name: str, kind: type | tuple[type, ...]) -> Any:
        """The field ``name``, which must be present and of type ``kind``."""
        if name not in self.body:
            raise self._error(name, "is missing")
        value = self.body[name]
        bad_bool = isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple)
                                                            else (kind,))
        if bad_bool or not isinstance(value, kind):
            expected = kind.__name__ if isinstance(kind, type) else \
                " or ".join(k.__name__ for k in kind)
            raise self._error(name, f"has type {type(value).__name__}; expected {expected}")
        return value

    def array(self, name: str, *, dtype: Any, shape: tuple[int, ...] | None = None,
              finite: bool = False) -> np.ndarray:
        """A numpy array of exactly ``dtype`` (and ``shape``), finite if asked."""
        value = self.get(name, np.ndarray)
        if value.dtype != np.dtype(dtype):
            raise self._error(name, f"has dtype {value.dtype}; expected {np.dtype(dtype)}")
        if shape is not None and value.shape != tuple(shape):
            raise self._error(name, f"has shape {value.shape}; expected {tuple(shape)}")
        if finite and np.issubdtype(value.dtype, np.floating) and \
                not np.all(np.isfinite(value)):
            bad = int(value.size - np.count_nonzero(np.isfinite(value)))
            raise self._error(name, f"holds {bad} NaN or infinite value(s)")
        return value

    def integer(self, name: str, *, low: int | None = None, high: int | None = None) -> int:
        """An integer in [low, high]."""
        value = self.get(name, int)
        if (low is not None and value < low) or (high is not None and value > high):
            raise self._error(name, f"is {value}; expected an integer in "
                                    f"[{'-inf' if low is None else low}, "
                                    f"{'inf' if high is None else high}]")
        return value

    def number(self, name: str, *, low: float = -math.inf, high: float = math.inf) -> float:
        """A finite real number in [low, high] (integers accepted)."""
        value = float(self.get(name, (int, float)))
        if not (math.isfinite(value) and low <= value <= high):
            raise self._error(name, f"is {value!r}; expected a finite number in "
                                    f"[{low}, {high}]")
        return value

    def numbers(self, name: str, bounds: Mapping[str, tuple[float, float]]) -> dict[str, float]:
        """A mapping with exactly the keys of ``bounds``, each a number in its range."""
        table = self.get(name, dict)
        if set(table) != set(bounds):
            raise self._error(name, f"has keys {sorted(map(str, table))}; expected "
                                    f"{sorted(bounds)}")
        out = {}
        for key, (low, high) in bounds.items():
            value = table[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not (math.isfinite(value) and low <= value <= high):
                raise self._error(name, f"entry {key!r} is {value!r}; expected a finite "
                                        f"number in [{low}, {high}]")
            out[key] = float(value)
        return out

    def blob(self, name: str, *, size: int | None = None) -> bytes:
        """Raw bytes (of exactly ``size`` bytes if given)."""
        value = self.get(name, bytes)
        if size is not None and len(value) != size:
            raise self._error(name, f"has {len(value)} bytes; expected {size}")
        return value

    def ids(self, name: str, allowed: Any = None) -> list[int]:
        """A list of distinct client ids (each in ``allowed`` if given)."""
        value = self.get(name, list)
        if not all(_is_int(v) and v >= 0 for v in value) or len(set(value)) != len(value):
            raise self._error(name, "is not a list of distinct client ids")
        if allowed is not None:
            unknown = sorted(set(value) - set(allowed))
            if unknown:
                raise self._error(name, f"names clients {unknown[:5]} that are not allowed "
                                        "here")
        return list(value)

    def table(self, name: str, *, allowed: Any = None, value: type = bytes) -> dict[int, Any]:
        """A mapping from client ids (each in ``allowed`` if given) to values of a type."""
        table = self.get(name, dict)
        for key, item in table.items():
            if not (_is_int(key) and key >= 0):
                raise self._error(name, f"has key {key!r}; expected client ids")
            if allowed is not None and key not in allowed:
                raise self._error(name, f"names client {key}, which is not allowed here")
            if not isinstance(item, value):
                raise self._error(name, f"maps client {key} to a {type(item).__name__}; "
                                        f"expected {value.__name__}")
        return dict(table)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
