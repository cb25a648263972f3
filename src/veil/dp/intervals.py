"""Exact decisions about functions of uniform reals: the engine behind :mod:`veil.dp.samplers`.

Each output is a deterministic function of exact uniform reals ``U`` (in (0, 1] or
(-1, 1)): a floor ``J = floor(w(U))`` (a grid cell), a comparison (a coin, or whether a
point is in the unit disc) or an argmax (a selection). The binary expansion of each ``U``
is read from the stream lazily:

* fast path (numpy, vectorised): the first 63 or 64 bits of ``U`` give a cell of width
  2^-63 or 2^-64. ``w`` is evaluated in double precision inside the cell with a bound on
  ``|w(U) - w_float|`` that holds for *every* ``U`` in the cell: the cell's width times a
  bound on ``|dw/dU|``, plus a floating-point allowance kappa = 2^-40 relative to the
  magnitudes involved (the derivations are in the functions' comments). When
  ``w_float - bound`` and ``w_float + bound`` fall in the same integer cell (on the same
  side of a comparison; one winner), the output is decided for every ``U`` in the cell,
  hence exact. Cells where ``|dw/dU|`` is unbounded (``U < 2^-20``, and the analogous
  tails) always take the slow path;
* slow path (per undecided sample, about 4 in 10^6 for the grid samplers): the cell is
  refined with 64 further stream bits at a time and ``w`` is enclosed by interval
  arithmetic in MPFR (gmpy2) with directed rounding, at a precision above the cell's, until
  the enclosure is decided. Boundaries have probability zero, so this ends with
  probability one.

The fast path assumes numpy's ``log`` and ``sqrt`` are accurate to 2^-40 relative to their
result (they are accurate to a few ulp, about 2^-51); the slow path, the integer
arithmetic and the stream bits are exact. Under that assumption every sampler below draws
from its stated distribution exactly.

Here: :class:`Exact` (interval arithmetic at one MPFR precision, rounding outwards),
:func:`solve` (refine cells until a decision is made), and the fast path's helpers
(:func:`cells_to_float`, :func:`exp_from_cells`, :func:`decide_floor`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gmpy2
import numpy as np

from veil.random import Generator

__all__ = ["KAPPA", "U_MIN", "Exact", "Iv", "cells_to_float", "decide_floor", "exp_from_cells",
           "floor_of", "refine", "solve"]

KAPPA = 2.0 ** -40       # floating-point allowance of the fast path, relative
U_MIN = 2.0 ** -20       # smaller uniforms (and the analogous tails) take the slow path


# -- the slow path: MPFR interval arithmetic with directed rounding ---------------------

Iv = tuple[Any, Any]  # (lower, upper) mpfr bounds


class Exact:
    """Interval arithmetic at one MPFR precision (rounding down for lower bounds, up for
    upper bounds), so every result encloses the exact value."""

    def __init__(self, prec: int) -> None:
        self.dn = gmpy2.context(precision=prec, round=gmpy2.RoundDown)
        self.up = gmpy2.context(precision=prec, round=gmpy2.RoundUp)
        self.prec = prec

    def point(self, x: float | int) -> Iv:
        return self.dn.add(x, 0), self.up.add(x, 0)

    def cell(self, a: int, bits: int) -> Iv:
        """The cell (a, a+1] * 2^-bits of a uniform (exact: prec > bits)."""
        return self.dn.mul_2exp(gmpy2.mpz(a), -bits), self.up.mul_2exp(gmpy2.mpz(a + 1), -bits)

    def add(self, x: Iv, y: Iv) -> Iv:
        return self.dn.add(x[0], y[0]), self.up.add(x[1], y[1])

    def sub(self, x: Iv, y: Iv) -> Iv:
        return self.dn.sub(x[0], y[1]), self.up.sub(x[1], y[0])

    def mul(self, x: Iv, y: Iv) -> Iv:
        ends = (*x, *y)
        if not all(gmpy2.is_finite(e) for e in ends):
            return gmpy2.mpfr("-inf"), gmpy2.mpfr("inf")
        lows = [self.dn.mul(a, b) for a in x for b in y]
        highs = [self.up.mul(a, b) for a in x for b in y]
        return min(lows), max(highs)

    def div(self, x: Iv, y: Iv) -> Iv:
        """x / y for y > 0."""
        lows = [self.dn.div(a, b) for a in x for b in y]
        highs = [self.up.div(a, b) for a in x for b in y]
        return min(lows), max(highs)

    def square(self, x: Iv) -> Iv:
        lo, hi = x
        if lo >= 0:
            return self.dn.mul(lo, lo), self.up.mul(hi, hi)
        if hi <= 0:
            return self.dn.mul(hi, hi), self.up.mul(lo, lo)
        return gmpy2.mpfr(0), max(self.up.mul(lo, lo), self.up.mul(hi, hi))

    def neg_log(self, x: Iv) -> Iv:
        """-ln(x) for 0 <= x (decreasing)."""
        return -self.up.log(x[1]), -self.dn.log(x[0])

    def log(self, x: Iv) -> Iv:
        return self.dn.log(x[0]), self.up.log(x[1])

    def sqrt(self, x: Iv) -> Iv:
        return self.dn.sqrt(x[0]), self.up.sqrt(x[1])


def floor_of(x: Iv) -> int | None:
    """floor of every point of the interval, if they agree (else None)."""
    lo, hi = x
    if not (gmpy2.is_finite(lo) and gmpy2.is_finite(hi)):
        return None
    a, b = gmpy2.floor(lo), gmpy2.floor(hi)
    return int(a) if a == b else None


def refine(a: int, bits: int, rng: Generator) -> tuple[int, int]:
    """Read 64 more bits of a uniform: the cell (a, a+1] 2^-bits splits into 2^64 cells."""
    return (a << 64) | rng.randbits(64), bits + 64


def solve(decide: Callable[[Exact, list[tuple[int, int]]], Any],
           cells: list[tuple[int, int]], rng: Generator) -> Any:
    """Refine the uniforms' cells until ``decide`` (interval arithmetic) returns a result."""
    while True:
        ctx = Exact(max(bits for _, bits in cells) + 96)
        result = decide(ctx, cells)
        if result is not None:
            return result
        cells = [refine(a, bits, rng) for a, bits in cells]


# -- the fast path helpers ----------------------------------------------------------
def cells_to_float(cells: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Midpoints u of the cells (R, R+1] 2^-bits and a bound on |U - u| / u over each cell,
    including the rounding of R to a double (relative 2^-53)."""
    u = (cells.astype(np.float64) + 0.5) * 2.0 ** -bits
    rel = 2.0 ** (2 - bits) / u + 2.0 ** -51
    return u, rel


def exp_from_cells(cells: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """E = -ln U (an exponential variable): value, bound on its error, and validity."""
    u, rel = cells_to_float(cells, bits)
    e = -np.log(u)
    err = 2.0 * rel + KAPPA * (e + 1.0)
    return e, err, u >= U_MIN


def decide_floor(w: np.ndarray, bound: float, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """floor(w) and where it is decided: w's fractional part is farther than ``bound``
    from both integer ends (``w`` is overwritten)."""
    j = np.floor(w)
    w -= j
    valid &= w > bound
    valid &= w < 1.0 - bound
    return j, valid
