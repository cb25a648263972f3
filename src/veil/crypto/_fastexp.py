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
  about 1.2 N E for N separate exponentiations.

``multi_pow`` takes its exponents as little-endian bytes so that digits come from numpy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from gmpy2 import mpz

__all__ = ["FixedBase", "multi_pow"]


def _digits(le_bytes: np.ndarray, window: int) -> np.ndarray:
    """(N, nbytes) little-endian bytes -> (N, ndigits) digits of ``window`` (4 or 8) bits."""
    if window == 8:
        return le_bytes.astype(np.intp)
    low = le_bytes & 0x0F
    high = le_bytes >> 4
    return np.stack([low, high], axis=-1).reshape(le_bytes.shape[0], -1).astype(np.intp)


class FixedBase:
    """Precomputed powers of ``base`` modulo ``modulus`` for exponents below 2^``exp_bits``."""

    def __init__(self, base: int, modulus: int, exp_bits: int, window: int = 4) -> None:
        if not 2 <= window <= 8:
            raise ValueError("window must be in [2, 8]")
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
    """prod_j bases[j]^e_j mod modulus; exponents as an (N, nbytes) little-endian uint8 matrix."""
    m = mpz(modulus)
    n = len(bases)
    if n == 0:
        return mpz(1)
    nbytes = exponents.shape[1]
    # choose the digit width that minimises ceil(E / c) * (N + 2^(c+1))
    window = min((4, 8), key=lambda c: (8 * nbytes // c) * (n + (2 << c)))
    digits = _digits(exponents, window)
    acc = mpz(1)
    size = 1 << window
    for i in range(digits.shape[1] - 1, -1, -1):
        for _ in range(window if i < digits.shape[1] - 1 else 0):
            acc = acc * acc % m
        buckets: list[mpz | None] = [None] * size
        for base, d in zip(bases, digits[:, i].tolist()):
            if d:
                b = buckets[d]
                buckets[d] = base if b is None else b * base % m
        running = None
        total = None
        for d in range(size - 1, 0, -1):
            if buckets[d] is not None:
                running = buckets[d] if running is None else running * buckets[d] % m
            if running is not None:
                total = running if total is None else total * running % m
        if total is not None:
            acc = acc * total % m
    return acc
