"""Numerical helpers of the mechanisms: safe rounding, release grids, value checks.

A noise scale must never fall below its exact value (``b >= sensitivity / epsilon``) and an
event's noise multiplier must never exceed the mechanism's (the accountant would then
under-count), so these quotients are rounded in the safe direction, checked exactly with
rationals.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from veil._validation import check_array
from veil.errors import ConfigError, DataError


def div_up(a: float, b: float) -> float:
    """The smallest double >= a / b (a >= 0, b > 0); a ConfigError when it overflows (a
    sensitivity over a tiny epsilon: no finite noise scale exists)."""
    q = a / b
    if not math.isfinite(q):
        raise ConfigError(f"sensitivity / epsilon = {a:g} / {b:g} overflows a float: no finite "
                          "noise scale; declare narrower bounds or a larger epsilon")
    while Fraction(q) * Fraction(b) < Fraction(a):
        q = math.nextafter(q, math.inf)
    return q


def div_down(a: float, b: float) -> float:
    """The largest double <= a / b (a >= 0, b > 0)."""
    q = a / b
    while Fraction(q) * Fraction(b) > Fraction(a):
        q = math.nextafter(q, 0.0)
    return q


def noise_grid(scale: float) -> float:
    """The release grid of a noise scale: the power of two in (scale/2048, scale/1024].

    Rounding to it adds at most ``grid / 2 <= scale / 2048`` to a release, 0.05% of the
    noise scale, and keeps ``scale / grid`` in [1024, 2048). A release spans up to 2^53 grid
    steps, which must be a finite double: scales of 2^981 and more are a ConfigError.
    """
    mantissa, exponent = math.frexp(scale)  # scale = mantissa * 2^exponent, mantissa in [.5, 1)
    if exponent - 11 + 53 > 1023:
        raise ConfigError(f"a noise scale of {scale:g} is too large: releases on its grid "
                          "would overflow a float; declare narrower bounds or a larger epsilon")
    return math.ldexp(1.0, exponent - 11)


def check_grid_value(value: Any, grid: float) -> np.ndarray:
    """A value to release on ``grid``: finite numbers with ``|value| < 2^52 grid``."""
    x = check_array(value, "value")
    if x.size and not np.all(np.abs(x) < 2.0 ** 52 * grid):
        raise DataError(f"value holds {float(np.max(np.abs(x))):g}, too large for a release "
                        f"on the grid {grid:g} of this mechanism (limit {2.0 ** 52 * grid:g})")
    return x


def check_integer_value(value: Any, mechanism: str) -> np.ndarray:
    """Integer values below 2^62 in magnitude, as int64 (DataError otherwise)."""
    x = check_array(value, "value")
    if not np.all(np.abs(x) < 2.0 ** 62) or not np.array_equal(x, np.round(x)):
        raise DataError(f"value is not allowed: the {mechanism} mechanism releases integer "
                        "values (below 2^62 in magnitude)")
    return x.astype(np.int64)
