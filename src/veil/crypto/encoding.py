"""Encodings between numbers and Paillier plaintexts: fixed point and packing.

Fixed point
-----------
:class:`FixedPoint` maps a real x to the integer ``round(x * 2^f)`` (f = ``frac_bits``) and
back. Values must satisfy ``|round(x 2^f)| <= M = 2^(i + f) - 1`` (i = ``int_bits``), so the
resolution is 2^-f and the range about +-2^i. Sums and products are computed on the
integers by the homomorphism: a sum of K encodings is bounded by K M, a product of two
encodings (ciphertext times encoded plaintext) has 2f fractional bits and is bounded by
M^2. :meth:`FixedPoint.decode` takes the number of ``summands`` and ``factors`` behind a
decrypted integer and raises :class:`~veil.errors.CryptoError` when the integer exceeds
``summands * M^factors``: a result that overflowed the plaintext space (and wrapped mod n)
is reported, never returned, unless it wrapped to within that bound of a multiple of n.
:meth:`FixedPoint.check_capacity` checks that the bound stays below n / 2 for a key, so
that in-range results cannot wrap at all.

Packing (BatchCrypt-style; Zhang et al., "BatchCrypt: efficient homomorphic encryption
for cross-silo federated learning", USENIX ATC 2020)
------------------------------------------------------------------------------------
:class:`Packing` puts many signed ``value_bits``-bit integers v in [-2^(b-1), 2^(b-1) - 1]
into one plaintext as base-2^w digits::

    P = sum_j v_j 2^(w j),   j < slots,   w = b + ceil(log2 K) + 1

where K = ``summands`` is the number of packed ciphertexts that will be added. Adding K
packings adds slot by slot with no carry between slots, because every slot sum lies in
[-K 2^(b-1), K (2^(b-1) - 1)], inside the balanced digit range [-2^(w-1), 2^(w-1)); the
extra guard bit keeps even 2K summands carry-free, so a sum of up to twice the declared
number of packings is *detected* as an overflow instead of corrupting the next slot.
``slots = (L - 1) // w`` for an L-bit modulus guarantees |P| <= 2^(w slots - 1) <= (n-1)/2,
inside the signed plaintext range of :mod:`veil.crypto.paillier`.

Unpacking adds the offset O = sum_j 2^(w-1) 2^(w j), which turns balanced digits into
ordinary ones (no borrows), reads them with numpy, subtracts 2^(w-1), and checks every
slot against the declared capacity (and the top of P, and the padding slots after the
last value): any violation raises :class:`~veil.errors.CryptoError` naming the value.
Multiplying a packed ciphertext by an integer k multiplies every slot by k and uses k of
the K summands of headroom.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from veil._validation import check_int
from veil.crypto.paillier import as_int_array
from veil.errors import ConfigError, CryptoError, DataError

__all__ = ["FixedPoint", "Packing"]


class FixedPoint:
    """Fixed-point encoding of floats with ``frac_bits`` fractional and ``int_bits`` integer bits.

    ``int_bits + frac_bits`` must be at most 62 so that encodings fit int64.
    """

    def __init__(self, frac_bits: int = 16, int_bits: int = 31) -> None:
        self.frac_bits = check_int(frac_bits, "frac_bits", low=0, high=62)
        self.int_bits = check_int(int_bits, "int_bits", low=0, high=62)
        if self.frac_bits + self.int_bits > 62:
            raise ConfigError(f"frac_bits + int_bits = {self.frac_bits + self.int_bits} is "
                              "not allowed: must be <= 62 (encodings are int64)")
        self.max_int = (1 << (self.int_bits + self.frac_bits)) - 1

    def __repr__(self) -> str:
        return f"FixedPoint(frac_bits={self.frac_bits}, int_bits={self.int_bits})"

    def encode(self, x: Any) -> np.ndarray:
        """round(x * 2^frac_bits) as int64; |x| beyond the range raises CryptoError."""
        arr = np.asarray(x, dtype=np.float64)
        if not np.all(np.isfinite(arr)):
            raise DataError("x holds NaN or infinite values; they cannot be encoded")
        scaled = np.rint(np.ldexp(arr, self.frac_bits))
        bad = np.flatnonzero(np.abs(scaled).ravel() > self.max_int)
        if bad.size:
            i = int(bad[0])
            raise CryptoError(f"x[{i}]={arr.ravel()[i]!r} is outside the fixed-point range "
                              f"+-{self.max_int / 2 ** self.frac_bits:g} of {self!r}")
        return scaled.astype(np.int64)

    def bound(self, summands: int = 1, factors: int = 1) -> int:
        """Largest |integer| behind a sum of ``summands`` products of ``factors`` encodings."""
        check_int(summands, "summands", low=1)
        check_int(factors, "factors", low=1)
        return summands * self.max_int ** factors

    def check_capacity(self, public_key: Any, summands: int = 1, factors: int = 1) -> None:
        """ConfigError unless such results fit the key's signed range (so they never wrap)."""
        b = self.bound(summands, factors)
        if b > public_key.half:
            raise ConfigError(f"summands={summands}, factors={factors} are not allowed with "
                              f"{self!r} and a {public_key.bits}-bit key: results up to "
                              f"{b.bit_length()} bits would wrap modulo n")

    def decode(self, m: Any, *, summands: int = 1, factors: int = 1) -> Any:
        """m / 2^(frac_bits * factors) as float64, checking |m| <= bound(summands, factors)."""
        bound = self.bound(summands, factors)
        ints = as_int_array(m, "m")
        flat = ints.ravel()
        bad = np.flatnonzero((flat > bound) | (flat < -bound))
        if bad.size:
            i = int(bad[0])
            raise CryptoError(f"decrypted value m[{i}] is outside the representable range "
                              f"+-{bound} of {self!r} with summands={summands}, "
                              f"factors={factors}: overflow")
        scale = self.frac_bits * factors
        out = np.array([math.ldexp(int(v), -scale) for v in flat.tolist()], dtype=np.float64)
        out = out.reshape(ints.shape)
        return float(out) if out.ndim == 0 else out


class Packing:
    """Pack signed ``value_bits``-bit integers into plaintexts of a ``key_bits``-bit key.

    ``summands``: how many packed ciphertexts may be added before decryption (K); each
    slot then holds ``slot_bits = value_bits + ceil(log2 K) + 1`` bits, and one plaintext
    holds ``slots = (key_bits - 1) // slot_bits`` values.
    """

    def __init__(self, value_bits: int, summands: int = 1, *, key_bits: int) -> None:
        self.value_bits = check_int(value_bits, "value_bits", low=1, high=60)
        self.summands = check_int(summands, "summands", low=1)
        self.key_bits = check_int(key_bits, "key_bits", low=16)
        self.slot_bits = self.value_bits + (self.summands - 1).bit_length() + 1
        if self.slot_bits > 62:
            raise ConfigError(f"value_bits={value_bits}, summands={summands} are not allowed: "
                              f"slots of {self.slot_bits} bits exceed 62")
        self.slots = (self.key_bits - 1) // self.slot_bits
        if self.slots < 1:
            raise ConfigError(f"key_bits={key_bits} is too small for {self.slot_bits}-bit slots")
        self.low = -(1 << (self.value_bits - 1))
        self.high = (1 << (self.value_bits - 1)) - 1
        w, s = self.slot_bits, self.slots
        self._half = 1 << (w - 1)
        self._offset = self._half * ((1 << (w * s)) - 1) // ((1 << w) - 1)
        self._nbytes = (w * s + 7) // 8

    def __repr__(self) -> str:
        return (f"Packing(value_bits={self.value_bits}, summands={self.summands}, "
                f"key_bits={self.key_bits}: {self.slots} slots of {self.slot_bits} bits)")

    def plaintexts_needed(self, count: int) -> int:
        """Number of plaintexts that hold ``count`` values."""
        return -(-check_int(count, "count", low=0) // self.slots)

    def pack(self, values: Any) -> np.ndarray:
        """Flattened signed integers -> object array of packed plaintext ints (slot 0 lowest)."""
        v = np.asarray(values)
        if not np.issubdtype(v.dtype, np.integer):
            raise CryptoError(f"values have dtype {v.dtype}; pack integers (quantize floats "
                              "with FixedPoint.encode first)")
        v = v.ravel()
        # check in the values' own dtype: casting first would turn 2^64 - 1 into -1
        bad = np.flatnonzero((v > self.high) if v.dtype.kind == "u"
                             else (v < self.low) | (v > self.high))
        if bad.size:
            i = int(bad[0])
            raise CryptoError(f"values[{i}]={int(v[i])} is outside the {self.value_bits}-bit "
                              f"range [{self.low}, {self.high}] of {self!r}")
        v = v.astype(np.int64)
        w, s = self.slot_bits, self.slots
        count = self.plaintexts_needed(v.size)
        digits = np.full(count * s, self._half, dtype=np.uint64)
        digits[:v.size] = (v + self._half).astype(np.uint64)
        bits = ((digits[:, None] >> np.arange(w, dtype=np.uint64)) & np.uint64(1)).astype(np.uint8)
        bits = bits.reshape(count, s * w)
        bits = np.pad(bits, ((0, 0), (0, 8 * self._nbytes - s * w)))
        rows = np.packbits(bits, axis=1, bitorder="little")
        out = np.empty(count, dtype=object)
        out[:] = [int.from_bytes(row.tobytes(), "little") - self._offset for row in rows]
        return out

    def unpack(self, plaintexts: Any, count: int) -> np.ndarray:
        """The first ``count`` values (int64) of decrypted packed sums, checked for overflow."""
        p = as_int_array(plaintexts, "plaintexts").ravel()
        check_int(count, "count", low=0)
        if self.plaintexts_needed(count) != p.size:
            raise CryptoError(f"count={count} values need {self.plaintexts_needed(count)} "
                              f"plaintexts of {self.slots} slots; got {p.size}")
        w, s = self.slot_bits, self.slots
        top = 1 << (w * s)
        blob = bytearray()
        for k, x in enumerate(p.tolist()):
            y = x + self._offset
            if not 0 <= y < top:
                raise CryptoError(f"plaintext {k} overflowed its top slot (value "
                                  f"{min(count - 1, k * s + s - 1)}): more than "
                                  f"{2 * self.summands} summands or out-of-range inputs")
            blob += y.to_bytes(self._nbytes, "little")
        rows = np.frombuffer(bytes(blob), dtype=np.uint8).reshape(p.size, self._nbytes)
        bits = np.unpackbits(rows, axis=1, bitorder="little")[:, :w * s].reshape(-1, w)
        weights = np.left_shift(np.int64(1), np.arange(w, dtype=np.int64))
        values = bits.astype(np.int64) @ weights - self._half
        cap_low, cap_high = self.summands * self.low, self.summands * self.high
        bad = np.flatnonzero((values < cap_low) | (values > cap_high))
        if bad.size:
            i = int(bad[0])
            raise CryptoError(f"value {i} overflowed: slot sum {int(values[i])} is outside "
                              f"[{cap_low}, {cap_high}] for summands={self.summands}")
        padding = values[count:]
        if np.any(padding != 0):
            raise CryptoError("the padding slots after the last value are not zero: the "
                              "plaintexts were not packed with this Packing or overflowed")
        return values[:count]
