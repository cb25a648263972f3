"""The one binary framing every veil wire and file format uses.

A frame is ``magic (4 bytes) | version (1 byte) | body [| check (16 bytes)]``: each format
has its own magic and version (:class:`Format`); ``check``, for formats that want it, is
the first 16 bytes of SHA-256 over everything before it (it catches corruption, it does not
authenticate: an attacker recomputes it). The body is a sequence of primitives, all
little-endian:

==========  ===============================================================================
primitive   bytes
==========  ===============================================================================
u8..u64     unsigned integers of 1, 2, 4, 8 bytes
f64         an IEEE-754 double
blob        u32 length, then that many bytes; text is a UTF-8 blob
big         an integer of any sign and size: u32 length, then two's-complement big-endian
            bytes (unsigned big-endian with ``signed=False``)
array       dtype code u8 (:data:`DTYPES`), ndim u8, each dimension u64, then the data
==========  ===============================================================================

A tagged frame (:meth:`Format.frame`) is a type tag (u8) then blobs, the fields of one
object; each format keeps its own registry of tags (:meth:`Format.tag`), and a tag or a magic
given twice is refused when the module that gives it is imported, so two kinds of object can
never share bytes.

Reading is bounded in time and memory whatever the bytes: every length is checked against
the bytes left *before* anything is allocated (so a reader never allocates more than its
input), arrays have at most ``max_ndim`` dimensions each at most ``max_elements`` and a
product of dimensions at most ``max_elements``, big integers at most ``max_bytes`` bytes,
and an error message never formats a value read from the input, only lengths and offsets.
Anything malformed raises the format's error class (:class:`~veil.errors.ProtocolError` or
:class:`~veil.errors.CryptoError`), never a struct, numpy or Unicode exception.
"""

from __future__ import annotations

import hashlib
import math
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from veil.errors import ProtocolError, VeilError

__all__ = ["CHECK_BYTES", "DTYPES", "Format", "Reader", "Writer"]

#: array dtypes by their code on the wire
DTYPES = tuple(np.dtype(name) for name in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float32", "float64"))
_CODE = {dt: code for code, dt in enumerate(DTYPES)}
#: bytes of the checksum that ends a checked frame
CHECK_BYTES = 16
_U16, _U32, _U64, _F64 = (struct.Struct(f) for f in ("<H", "<I", "<Q", "<d"))
#: every format's magic -> its name (a magic is one format's)
_MAGICS: dict[bytes, str] = {}


@dataclass(frozen=True)
class Format:
    """One binary format: its magic, version, error class, whether frames are checksummed,
    and a name for error messages."""

    magic: bytes
    version: int
    error: type[VeilError] = ProtocolError
    checksum: bool = False
    name: str = "message"
    #: type tag -> what it frames (:meth:`tag`)
    tags: dict[int, str] = field(default_factory=dict, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.magic) != 4 or not 0 <= self.version < 256:
            raise ValueError(f"a format needs a 4-byte magic and a version byte: {self!r}")
        if _MAGICS.setdefault(self.magic, self.name) != self.name:
            raise ValueError(f"magic {self.magic!r} is the {_MAGICS[self.magic]}'s already; "
                             f"the {self.name} needs its own")

    def tag(self, number: int, what: str) -> int:
        """Register type tag ``number`` for ``what``; returns it. A tag registered twice for
        different things is refused (at import: it is the code's mistake, not the input's)."""
        if not 0 <= number < 256:
            raise ValueError(f"{self.name}: a type tag is one byte, not {number}")
        if self.tags.setdefault(number, what) != what:
            raise ValueError(f"{self.name}: type tag {number} frames {self.tags[number]} "
                             f"already; {what} needs another")
        return number

    def frame(self, tag: int, fields: list[bytes]) -> bytes:
        """A tagged frame: ``tag`` (registered) then each field as a blob."""
        if tag not in self.tags:
            raise ValueError(f"{self.name}: type tag {tag} is not registered")
        out = self.writer().u8(tag)
        for f in fields:
            out.blob(f)
        return out.finish()

    def unframe(self, data: Any) -> tuple[int, list[bytes]]:
        """(tag, fields) of a tagged frame; an unregistered tag is the format's error."""
        reader = self.reader(data)
        tag, fields = reader.u8(), []
        if tag not in self.tags:
            raise reader.fail(f"unknown type tag {tag}")
        while reader.left:
            fields.append(reader.blob())
        return tag, fields

    def writer(self) -> Writer:
        """A writer whose frame starts with this format's header."""
        return Writer(self)

    def reader(self, data: Any) -> Reader:
        """A reader of ``data``, its header (and checksum) checked."""
        return Reader(self, data)


class Writer:
    """Builds one frame of a :class:`Format` (see the module docstring)."""

    def __init__(self, fmt: Format) -> None:
        self.format = fmt
        self.out = bytearray(fmt.magic)
        self.out.append(fmt.version)

    def _fail(self, what: str) -> VeilError:
        return self.format.error(f"cannot encode {self.format.name}: {what}")

    def raw(self, data: bytes | bytearray | memoryview) -> Writer:
        """Bytes without a length (the reader knows how many)."""
        self.out += data
        return self

    def u8(self, v: int) -> Writer:
        if not 0 <= v < 256:
            raise self._fail(f"{v} does not fit one byte")
        self.out.append(v)
        return self

    def u16(self, v: int) -> Writer:
        self.out += _U16.pack(v)
        return self

    def u32(self, v: int) -> Writer:
        if not 0 <= v < 2 ** 32:
            raise self._fail(f"a length of {v} exceeds 2^32 - 1")
        self.out += _U32.pack(v)
        return self

    def u64(self, v: int) -> Writer:
        self.out += _U64.pack(v)
        return self

    def f64(self, v: float) -> Writer:
        self.out += _F64.pack(v)
        return self

    def blob(self, data: bytes | bytearray | memoryview) -> Writer:
        self.u32(len(data))
        self.out += data
        return self

    def text(self, s: str) -> Writer:
        return self.blob(s.encode("utf-8"))

    def big(self, v: int, *, signed: bool = True) -> Writer:
        v = int(v)
        if not signed and v < 0:
            raise self._fail("a negative integer where an unsigned one is expected")
        size = (v.bit_length() + 8) // 8 if signed else (v.bit_length() + 7) // 8
        return self.blob(v.to_bytes(size, "big", signed=signed))

    def array(self, a: np.ndarray) -> Writer:
        code = _CODE.get(a.dtype.newbyteorder("="))
        if code is None:
            raise self._fail(f"arrays of dtype {a.dtype} are not allowed: allowed "
                             f"{', '.join(str(d) for d in DTYPES)}")
        if a.ndim > 255:
            raise self._fail("an array with more than 255 dimensions")
        self.out += bytes([code, a.ndim])
        for dim in a.shape:
            self.out += _U64.pack(dim)
        self.out += np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()
        return self

    def finish(self) -> bytes:
        """The frame (with its checksum when the format has one)."""
        if self.format.checksum:
            self.out += hashlib.sha256(self.out).digest()[:CHECK_BYTES]
        return bytes(self.out)


class Reader:
    """Reads one frame of a :class:`Format`; every read is bounded (module docstring)."""

    def __init__(self, fmt: Format, data: Any) -> None:
        self.format = fmt
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise self.fail(f"expected bytes, got {type(data).__name__}")
        view = memoryview(data if isinstance(data, bytes) else bytes(data))
        check = CHECK_BYTES if fmt.checksum else 0
        if len(view) < 5 + check or bytes(view[:4]) != fmt.magic:
            raise self.fail(f"it does not start with the magic bytes {fmt.magic!r} (or is "
                            "too short)")
        if view[4] != fmt.version:
            raise self.fail(f"format version {view[4]} is not supported; this veil reads "
                            f"version {fmt.version}")
        if check:
            body, tail = view[:-check], view[-check:]
            if hashlib.sha256(body).digest()[:check] != bytes(tail):
                raise self.fail("checksum mismatch: the bytes are corrupted")
            view = body
        self.data = view
        self.pos = 5

    def fail(self, what: str) -> VeilError:
        """The format's error for malformed input."""
        return self.format.error(f"malformed {self.format.name}: {what}")

    @property
    def left(self) -> int:
        """Bytes not read yet."""
        return len(self.data) - self.pos

    def take(self, n: int) -> memoryview:
        if n > self.left:
            raise self.fail(f"needs {n} more bytes at offset {self.pos}, only {self.left} left")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return _U16.unpack(self.take(2))[0]

    def u32(self) -> int:
        return _U32.unpack(self.take(4))[0]

    def u64(self) -> int:
        return _U64.unpack(self.take(8))[0]

    def f64(self) -> float:
        return _F64.unpack(self.take(8))[0]

    def blob(self, max_len: int | None = None) -> bytes:
        n = self.u32()
        if max_len is not None and n > max_len:
            raise self.fail(f"a field of {n} bytes at offset {self.pos}; at most {max_len}")
        return bytes(self.take(n))

    def text(self, max_len: int | None = None) -> str:
        raw = self.blob(max_len)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"text before offset {self.pos} is not valid UTF-8") from None

    def big(self, *, max_bytes: int = 1 << 16, signed: bool = True) -> int:
        """An integer of at most ``max_bytes`` bytes (the default: 2^19 bits)."""
        return int.from_bytes(self.blob(max_bytes), "big", signed=signed)

    def array(self, *, dtypes: tuple[np.dtype, ...] = DTYPES, max_ndim: int = 32,
              max_elements: int = 1 << 28) -> np.ndarray:
        """An array of one of ``dtypes``, in native byte order (a copy, writable)."""
        code, ndim = self.u8(), self.u8()
        if code >= len(DTYPES) or DTYPES[code] not in dtypes:
            raise self.fail(f"array dtype code {code} is not allowed here")
        if ndim > max_ndim:
            raise self.fail(f"an array of {ndim} dimensions; at most {max_ndim}")
        shape = tuple(self.u64() for _ in range(ndim))
        if any(d > max_elements for d in shape) or math.prod(shape) > max_elements:
            raise self.fail(f"an array of {ndim} dimensions with more than {max_elements} "
                            "elements")
        dtype = DTYPES[code].newbyteorder("<")
        raw = self.take(math.prod(shape) * dtype.itemsize)
        if dtype == np.bool_ and bytes(raw).translate(None, b"\x00\x01"):
            raise self.fail("a boolean array holds bytes other than 0 and 1")
        return np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("="),
                                                       copy=True).reshape(shape)

    def done(self) -> None:
        """Nothing may trail the last field."""
        if self.left:
            raise self.fail(f"{self.left} trailing bytes after offset {self.pos}")
