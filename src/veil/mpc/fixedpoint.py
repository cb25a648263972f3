"""Fixed-point numbers in the ring Z_2^64 (two's complement).

A real x is represented by the ring element ``round(x 2^f) mod 2^64`` with ``f`` fractional
bits; integers (comparison bits, counts) use ``f = 0``. Sums are exact; a product of two
f-bit numbers has 2f fractional bits and is truncated back (see :mod:`veil.mpc.party`).

Ranges. An input is *representable* when its encoding is below 2^31 in magnitude
(``|x| < 2^(31 - f)``, e.g. 32768 for f = 16, MPyC's 32-bit ``secfxp`` format): the product
of two representable values then stays below 2^62 and never wraps the ring. Inputs outside
that range are refused (:class:`DataError`, a fixed-point overflow). A revealed fixed-point
value must be below 2^(62 - 2f) in magnitude (its encoding below 2^(62 - f)); larger values
can only come from an overflow or a failed probabilistic truncation (whose error is about
2^(64 - f) in encoded units) and raise :class:`CryptoError`.

Public constants are encoded with more fractional bits when they are small
(:func:`constant_bits`): a constant c gets ``f + max(0, -floor(log2 |c|))`` bits, so its
relative precision is ``2^-f`` whatever its size, and its encoding stays below ``2^(f+1)``
like a value of magnitude one (the product with a shared value is no larger than a product
of two values of the same magnitudes).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from veil.errors import CryptoError, DataError

__all__ = ["INPUT_BITS", "encode", "decode", "constant_bits", "encode_constant"]

INPUT_BITS = 31   # |encoding| < 2^31 for inputs and public values
RESULT_BITS = 62  # |encoding| < 2^62 for revealed values
_MAX_CONSTANT_BITS = 48


def encode(x: Any, frac: int, name: str = "x") -> np.ndarray:
    """``round(x 2^frac)`` as uint64 (two's complement); refuses out-of-range values."""
    arr = np.asarray(x)
    if arr.dtype == np.bool_:
        arr = arr.astype(np.int64)
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise DataError(f"{name} has dtype {arr.dtype}; expected numbers")
    if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
        raise DataError(f"{name} holds NaN or infinite values")
    scaled = np.rint(arr.astype(np.float64) * 2.0 ** frac) if frac else arr
    limit = 2 ** INPUT_BITS
    if scaled.size and np.max(np.abs(scaled.astype(np.float64))) >= limit:
        worst = float(np.max(np.abs(arr.astype(np.float64))))
        raise DataError(f"{name} holds a value of magnitude {worst:.6g}: fixed-point overflow; "
                        f"with {frac} fractional bits the representable range is "
                        f"|x| < 2^{INPUT_BITS - frac} = {2.0 ** (INPUT_BITS - frac):.6g} "
                        "(rescale the data or use fewer frac_bits)")
    return scaled.astype(np.int64).view(np.uint64)


def decode(v: np.ndarray, frac: int) -> np.ndarray:
    """The reals (frac > 0, float64) or integers (frac = 0, int64) of ring elements.

    Raises :class:`CryptoError` when a value is beyond the range a correct computation can
    produce (an overflow or a failed truncation).
    """
    signed = np.asarray(v, dtype=np.uint64).view(np.int64)
    if frac:
        limit = 2 ** (RESULT_BITS - frac)
        if signed.size and (np.any(signed >= limit) or np.any(signed <= -limit)):
            raise CryptoError("fixed-point overflow: a revealed value exceeds "
                              f"2^{RESULT_BITS - 2 * frac} in magnitude (an overflowing product "
                              "or a failed truncation; see veil.mpc.party)")
        return signed.astype(np.float64) / 2.0 ** frac
    return signed.copy()


def constant_bits(c: np.ndarray, frac: int) -> int:
    """Fractional bits for a public constant: ``frac`` plus the leading zeros of max |c|."""
    peak = float(np.max(np.abs(c))) if np.size(c) else 0.0
    if peak == 0.0 or peak >= 1.0:
        return frac
    return min(frac + max(0, -math.floor(math.log2(peak))), _MAX_CONSTANT_BITS)


def encode_constant(c: Any, frac: int, name: str = "constant") -> tuple[np.ndarray, int]:
    """A public real constant encoded with :func:`constant_bits`; returns (ring, bits)."""
    arr = np.asarray(c, dtype=np.float64)
    bits = constant_bits(arr, frac)
    return encode(arr, bits, name), bits
