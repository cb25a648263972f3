"""Gaussian noise released on a grid (floating-point safe, Mironov 2012)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from veil.dp.samplers import rounded_gaussian


def grid_gaussian(values: Any, sigma: float, rng: Any) -> np.ndarray:
    """``values + N(0, sigma^2)`` rounded to the grid of veil.dp's Gaussian mechanism (the
    power of two in (sigma/2048, sigma/1024]), drawn exactly by
    :func:`veil.dp.samplers.rounded_gaussian`: the exact Gaussian mechanism followed by
    rounding (post-processing), so no low-order bit depends on the values."""
    grid = math.ldexp(1.0, math.frexp(sigma)[1] - 11)
    return rounded_gaussian(np.asarray(values, dtype=np.float64), sigma, grid, rng=rng) * grid
