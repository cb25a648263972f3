"""Modular exponentiation faster than one ``powmod`` at a time.

* :class:`FixedBase` — many powers of one base (the Paillier noise base h_s, the threshold
  verification base v). With a window of w bits and exponents below 2^B it stores the
  table ``T[i][d] = base^(d * 2^(w i)) mod m`` for i < ceil(B / w), 0 <= d < 2^w, so that
  ``base^e = prod_i T[i][e_i]`` where e_i is the i-th w-bit digit of e: ceil(B / w)
  multiplications and no squaring (the fixed-base windowing of Brickell, Gordon, McCurley
  & Wilson, EUROCRYPT 1992). Memory: ceil(B / w) * 2^w residues.
* :func:`multi_pow` — one product ``prod_j b_j^(e_j) mod m`` of many bases with short
  exponents (the batched proofs of :mod:`veil.crypto.threshold`) by Pippenger's bucket
  method: for each c-bit digit position, from the top, square the accumulator c times,
  multiply every base into the bucket of its digit, and fold the buckets as
  ``prod_d B_d^d`` with two running products (2 (2^c - 1) multiplications).
  About ceil(E / c) (N + 2^(c+1)) + E multiplications for N exponents of E bits, against
  about 1.2 N E for N separate exponentiations; c (1 to 16) is chosen for N and E, so a
  large N takes wide digits (one 15-bit digit for N = 100k: N + 2 * 2^15).

``multi_pow`` takes its exponents as little-endian bytes so that digits come from numpy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from gmpy2 import mpz

__all__ = ["FixedBase", "multi_pow"]

_MAX_WINDOW = 16   # at most 2^16 buckets


def _digits(le_bytes: np.ndarray, window: int) -> np.ndarray:
    """(N, nbytes) little-endian bytes -> (N, ndigits) digits of ``window`` bits."""
    bits = np.unpackbits(le_bytes, axis=1, bitorder="little")
    pad = -bits.shape[1] % window
    if pad:
        bits = np.pad(bits, ((0, 0), (0, pad)))
    weights = np.left_shift(1, np.arange(window), dtype=np.intp)
    return bits.reshape(bits.shape[0], -1, window) @ weights


def _window(count: int, exp_bits: int) -> int:
    """The digit width c with the fewest multiplications for ``count`` exponents of
    ``exp_bits`` bits: ceil(E / c) (count + 2 (2^c - 1)) + c (ceil(E / c) - 1), the top
    digit's buckets only up to its largest possible value."""
    def cost(c: int) -> int:
        digits = -(-exp_bits // c)
        top = (1 << (exp_bits - c * (digits - 1))) - 1
        return digits * count + 2 * ((digits - 1) * ((1 << c) - 1) + top) + c * (digits - 1)

    return min(range(1, min(exp_bits, _MAX_WINDOW) + 1), key=cost)


class FixedBase:
    """Precomputed powers of ``base`` modulo ``modulus`` for exponents below 2^``exp_bits``."""

    def __init__(self, base: int, modulus: int, exp_bits: int, window: int = 4) -> None:
        if not 2 <= window <= 12:
            raise ValueError("window must be in [2, 12]")
        self.modulus = m = mpz(modulus)
        self.window = window
        self.exp_bits = exp_bits
        g = mpz(base) % m
        rows = []
        for _ in range(-(-exp_bits // window)):
            row = [mpz(1), g]
            for _ in range(2, 1 << window):
                row.append(row[-1] * g % m)
            rows.append(row)
            g = row[-1] * g % m          # g^(2^w): the base of the next digit
        self._rows = rows

    def pow(self, exponent: int) -> mpz:
        """base^exponent mod modulus (0 <= exponent < 2^exp_bits)."""
        e = mpz(exponent)
        if e < 0 or e.bit_length() > self.exp_bits:
            raise ValueError("exponent out of the table's range")
        m, w = self.modulus, self.window
        mask = (1 << w) - 1
        acc = mpz(1)
        for row in self._rows:
            d = e & mask
            if d:
                acc = acc * row[d] % m
            e >>= w
        return acc


def multi_pow(bases: Sequence[int], exponents: np.ndarray, modulus: int) -> mpz:
    """prod_j bases[j]^e_j mod modulus; exponents as an (N, nbytes) little-endian uint8 matrix.

    The digit width comes from :func:`_window`: for N = 100k exponents of 15 bits one digit
    (N multiplications plus two per bucket up to the largest exponent), for N = 1,000 two
    digits of 8 bits (2N + 4 * 255); each position folds its buckets only up to its
    largest digit.
    """
    m = mpz(modulus)
    used = np.flatnonzero(exponents.any(axis=0)) if len(bases) else []
    if len(used) == 0:
        return mpz(1)
    exponents = exponents[:, :used[-1] + 1]
    exp_bits = 8 * (exponents.shape[1] - 1) + int(exponents[:, -1].max()).bit_length()
    window = _window(len(bases), exp_bits)
    digits = _digits(exponents, window)
    acc = mpz(1)
    for i in range(digits.shape[1] - 1, -1, -1):
        if i < digits.shape[1] - 1:
            for _ in range(window):
                acc = acc * acc % m
        column = digits[:, i]
        high = int(column.max())
        if not high:
            continue
        buckets: list[mpz | None] = [None] * (high + 1)
        for base, d in zip(bases, column.tolist()):
            if d:
                b = buckets[d]
                buckets[d] = base if b is None else b * base % m
        running = total = None
        for d in range(high, 0, -1):
            if buckets[d] is not None:
                running = buckets[d] if running is None else running * buckets[d] % m
            if running is not None:
                total = running if total is None else total * running % m
        acc = acc * total % m
    return acc
