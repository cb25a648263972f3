"""Protocol messages: a typed envelope, a self-describing binary encoding, checked accessors.

Every message of every federated protocol is a :class:`Message`: the protocol's name, the
round id, the stage, the sender and the recipient (client ids are integers >= 0, the
server is :data:`SERVER` = -1) and a body, a mapping from field names to values.

Wire format (no pickle, nothing executable): a frame of :mod:`veil._codec` (magic
``b"VMSG"``, version 2, little-endian lengths) whose body is one value: a one-byte tag
followed by its content:

=======  =========================================================================
tag      content
=======  =========================================================================
N/F/T    None / False / True (no content)
i        an integer of any sign (a codec ``big``, at most 1024 bytes): big integers
           travel as bytes, never truncated
f        float64
s        UTF-8 text (a codec ``blob``)
b        raw bytes (a codec ``blob``)
a        numpy array (a codec ``array``: bool, int8..int64, uint8..uint64, float32,
           float64)
l        list: u32 count, values
d        mapping: u32 count, (key, value) pairs; keys are text or integers
=======  =========================================================================

Decoding is bounded (:mod:`veil._codec`: every length checked against the bytes left
before anything is allocated, nesting at most 16 deep), so truncated, oversized or garbled
input is a :class:`~veil.errors.ProtocolError`, never a numpy or struct traceback. The
accessors (:meth:`Message.array`, :meth:`Message.integer`, ...) then validate each field
where it is used (type, dtype, shape, finiteness, range) and name the sender and the field
in the error (:meth:`Message.error`); a value from the wire is never formatted whole into
an error (an integer shows its size).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from veil._codec import Format, Reader, Writer
from veil.errors import ProtocolError

__all__ = ["FORMAT", "SERVER", "Message", "decode", "encode", "show"]

#: the sender/recipient id of the server
SERVER = -1

#: the wire format of every message
FORMAT = Format(b"VMSG", 2, name="message")
_MAX_DEPTH = 16
#: the largest integer a message carries, in bytes (8192 bits: n^2 of a 4096-bit key)
_MAX_INT_BYTES = 1024


# -- encoding ---------------------------------------------------------------------------
def _encode(value: Any, out: Writer, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise ProtocolError(f"cannot encode values nested deeper than {_MAX_DEPTH}")
    if value is None:
        out.raw(b"N")
    elif isinstance(value, (bool, np.bool_)):
        out.raw(b"T" if value else b"F")
    elif isinstance(value, (int, np.integer)):
        v = int(value)
        if v.bit_length() >= 8 * _MAX_INT_BYTES:
            raise ProtocolError(f"cannot encode an integer of {v.bit_length()} bits: at most "
                                f"{8 * _MAX_INT_BYTES - 1}")
        out.raw(b"i").big(v)
    elif isinstance(value, (float, np.floating)):
        out.raw(b"f").f64(float(value))
    elif isinstance(value, str):
        out.raw(b"s").text(value)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        out.raw(b"b").blob(value)
    elif isinstance(value, np.ndarray):
        out.raw(b"a").array(value)
    elif isinstance(value, (list, tuple)):
        out.raw(b"l").u32(len(value))
        for item in value:
            _encode(item, out, depth + 1)
    elif isinstance(value, Mapping):
        out.raw(b"d").u32(len(value))
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
    out = FORMAT.writer()
    _encode(value, out, 0)
    return out.finish()


# -- decoding ---------------------------------------------------------------------------
def _decode(reader: Reader, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise reader.fail(f"values nested deeper than {_MAX_DEPTH}")
    tag = bytes(reader.take(1))
    if tag == b"N":
        return None
    if tag in (b"T", b"F"):
        return tag == b"T"
    if tag == b"i":
        return reader.big(max_bytes=_MAX_INT_BYTES)
    if tag == b"f":
        return reader.f64()
    if tag == b"s":
        return reader.text()
    if tag == b"b":
        return reader.blob()
    if tag == b"a":
        return reader.array()
    if tag == b"l":
        return [_decode(reader, depth + 1) for _ in range(_count(reader))]
    if tag == b"d":
        out: dict[Any, Any] = {}
        for _ in range(_count(reader)):
            key = _decode(reader, depth + 1)
            if isinstance(key, bool) or not isinstance(key, (str, int)):
                raise reader.fail(f"a mapping key of type {type(key).__name__}; keys are "
                                  "text or integers")
            if key in out:
                raise reader.fail(f"a mapping key repeated before offset {reader.pos}")
            out[key] = _decode(reader, depth + 1)
        return out
    raise reader.fail(f"unknown tag {tag!r} at offset {reader.pos - 1}")


def _count(reader: Reader) -> int:
    """A list's or mapping's item count: each item takes at least one byte."""
    n = reader.u32()
    if n > reader.left:
        raise reader.fail(f"{n} items announced at offset {reader.pos}, only {reader.left} "
                          "bytes left")
    return n


def decode(data: bytes) -> Any:
    """Parse bytes written by :func:`encode`; malformed input is a ProtocolError."""
    reader = FORMAT.reader(data)
    value = _decode(reader, 0)
    reader.done()
    return value


def show(value: Any) -> str:
    """A value from the wire for an error message: an integer of more than 64 bits by its
    size (formatting a huge integer is slow, and Python refuses above 4300 digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    return repr(value)


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
                raise ProtocolError(f"malformed message: envelope field {name}={show(got)}")
        return cls(protocol, rnd, stage, sender, recipient, body)

    # -- checked access to the body ------------------------------------------------------
    @property
    def origin(self) -> str:
        """'server' or 'client <id>', for error messages."""
        return "server" if self.sender == SERVER else f"client {self.sender}"

    def error(self, name: str, problem: str) -> ProtocolError:
        """The ProtocolError for field ``name`` of this message: it names the sender, the
        round, the stage and the field."""
        return ProtocolError(f"{self.origin}, round {self.round}, stage {self.stage!r}: "
                             f"field {name!r} {problem}")

    def get(self, name: str, kind: type | tuple[type, ...]) -> Any:
        """The field ``name``, which must be present and of type ``kind``."""
        if name not in self.body:
            raise self.error(name, "is missing")
        value = self.body[name]
        bad_bool = isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple)
                                                            else (kind,))
        if bad_bool or not isinstance(value, kind):
            expected = kind.__name__ if isinstance(kind, type) else \
                " or ".join(k.__name__ for k in kind)
            raise self.error(name, f"has type {type(value).__name__}; expected {expected}")
        return value

    def array(self, name: str, *, dtype: Any, shape: tuple[int, ...] | None = None,
              finite: bool = False) -> np.ndarray:
        """A numpy array of exactly ``dtype`` (and ``shape``), finite if asked."""
        value = self.get(name, np.ndarray)
        if value.dtype != np.dtype(dtype):
            raise self.error(name, f"has dtype {value.dtype}; expected {np.dtype(dtype)}")
        if shape is not None and value.shape != tuple(shape):
            raise self.error(name, f"has shape {value.shape}; expected {tuple(shape)}")
        if finite and np.issubdtype(value.dtype, np.floating) and \
                not np.all(np.isfinite(value)):
            bad = int(value.size - np.count_nonzero(np.isfinite(value)))
            raise self.error(name, f"holds {bad} NaN or infinite value(s)")
        return value

    def integer(self, name: str, *, low: int | None = None, high: int | None = None) -> int:
        """An integer in [low, high]."""
        value = self.get(name, int)
        if (low is not None and value < low) or (high is not None and value > high):
            raise self.error(name, f"is {show(value)}; expected an integer in "
                                    f"[{'-inf' if low is None else low}, "
                                    f"{'inf' if high is None else high}]")
        return value

    def number(self, name: str, *, low: float = -math.inf, high: float = math.inf) -> float:
        """A finite real number in [low, high] (integers accepted)."""
        raw = self.get(name, (int, float))
        value = float(raw) if isinstance(raw, float) or raw.bit_length() < 1000 else math.inf
        if not (math.isfinite(value) and low <= value <= high):
            raise self.error(name, f"is {show(raw)}; expected a finite number in "
                                    f"[{low}, {high}]")
        return value

    def numbers(self, name: str, bounds: Mapping[str, tuple[float, float]]) -> dict[str, float]:
        """A mapping with exactly the keys of ``bounds``, each a number in its range."""
        table = self.get(name, dict)
        if set(table) != set(bounds):
            raise self.error(name, f"has keys {sorted(map(str, table))}; expected "
                                    f"{sorted(bounds)}")
        out = {}
        for key, (low, high) in bounds.items():
            value = table[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    isinstance(value, int) and value.bit_length() >= 1000 or \
                    not (math.isfinite(value) and low <= value <= high):
                raise self.error(name, f"entry {key!r} is {show(value)}; expected a finite "
                                        f"number in [{low}, {high}]")
            out[key] = float(value)
        return out

    def blob(self, name: str, *, size: int | None = None) -> bytes:
        """Raw bytes (of exactly ``size`` bytes if given)."""
        value = self.get(name, bytes)
        if size is not None and len(value) != size:
            raise self.error(name, f"has {len(value)} bytes; expected {size}")
        return value

    def ids(self, name: str, allowed: Any = None) -> list[int]:
        """A list of distinct client ids (each in ``allowed`` if given)."""
        value = self.get(name, list)
        if not all(_is_int(v) and v >= 0 for v in value) or len(set(value)) != len(value):
            raise self.error(name, "is not a list of distinct client ids")
        if allowed is not None:
            unknown = sorted(set(value) - set(allowed))
            if unknown:
                raise self.error(name, f"names clients {unknown[:5]} that are not allowed "
                                        "here")
        return list(value)

    def table(self, name: str, *, allowed: Any = None, value: type = bytes) -> dict[int, Any]:
        """A mapping from client ids (each in ``allowed`` if given) to values of a type."""
        table = self.get(name, dict)
        for key, item in table.items():
            if not (_is_int(key) and key >= 0):
                raise self.error(name, f"has key {show(key)}; expected client ids")
            if allowed is not None and key not in allowed:
                raise self.error(name, f"names client {key}, which is not allowed here")
            if not isinstance(item, value):
                raise self.error(name, f"maps client {key} to a {type(item).__name__}; "
                                        f"expected {value.__name__}")
        return dict(table)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
