"""The Laplace mechanism (on a floating-point-safe grid) and the discrete Laplace mechanism.

Laplace (Dwork, McSherry, Nissim & Smith 2006): for ``f`` with L1 sensitivity ``Delta``
(add/remove-one neighbours), ``f(D) + Lap(b)`` per coordinate with ``b = Delta / epsilon``
is (epsilon, 0)-DP: the density ratio at any output is at most
``exp(||f(D) - f(D')||_1 / b) <= e^epsilon``.

Discrete Laplace, a.k.a. the two-sided geometric mechanism (Ghosh, Roughgarden &
Sundararajan 2009): for integer-valued ``f``, ``f(D) + Z`` with
``P(Z = z) proportional to exp(-|z| / t)``, ``t = Delta / epsilon``, is (epsilon, 0)-DP by
the same ratio argument on the integers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from dp_accounting import dp_event as de

from veil._validation import check_delta, check_epsilon, check_int, check_positive
from veil.dp._numeric import (
    check_grid_value,
    check_integer_value,
    div_down,
    div_up,
    noise_grid,
)
from veil.dp.mechanism import Mechanism
from veil.dp.samplers import discrete_laplace, laplace_grid
from veil.errors import ConfigError
from veil.random import Generator

__all__ = ["Laplace", "DiscreteLaplace", "Geometric"]


def _pure(delta: Any, name: str) -> float:
    if check_delta(delta) != 0.0:
        raise ConfigError(f"delta={delta!r} is not allowed: the {name} mechanism is "
                          "(epsilon, 0)-DP; pass delta=0 (or use Gaussian for delta > 0)")
    return 0.0


class Laplace(Mechanism):
    """``f(D) + Lap(b)``, ``b = sensitivity / epsilon``, released on a grid (floating-point safe).

    Floating-point safety: the release is ``grid * round((f(D) + Lap(b)) / grid)`` with
    ``grid`` the power of two in ``(b/2048, b/1024]``, and the integer
    ``round((f(D) + Lap(b)) / grid)`` is drawn *exactly* by
    :func:`veil.dp.samplers.rounded_laplace`. It is therefore the exact output of the
    continuous Laplace mechanism followed by rounding, a post-processing, and the reported
    epsilon holds exactly, for any double ``f(D)``. Unlike ``f(D) + float noise`` (Mironov
    2012), no output's low-order bits depend on ``f(D)``: every output is a multiple of the
    grid. Rounding adds at most ``grid/2 <= b/2048`` to the error. ``sensitivity`` is the L1
    sensitivity for vector values (noise per coordinate).

    Cost: ``LaplaceDpEvent(b / sensitivity)``, the exact event of the continuous mechanism.
    """

    def __init__(self, epsilon: float, delta: float = 0.0, sensitivity: float = 1.0) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = _pure(delta, "Laplace")
        self.sensitivity = check_positive(sensitivity, "sensitivity")
        self.scale = div_up(self.sensitivity, self.epsilon)
        self.grid = noise_grid(self.scale)

    @property
    def event(self) -> de.DpEvent:
        return de.LaplaceDpEvent(div_down(self.scale, self.sensitivity))

    def check(self, value: Any) -> np.ndarray:
        """Validate a value before anything is charged (DataError for bad data)."""
        return check_grid_value(value, self.grid)

    def _randomize(self, value: Any, rng: Generator) -> Any:
        x = self.check(value)
        noisy = laplace_grid(x.ravel(), self.scale / self.grid, self.grid, rng)
        noisy *= self.grid
        return float(noisy[0]) if x.ndim == 0 else noisy.reshape(x.shape)

    def __repr__(self) -> str:
        return (f"Laplace(epsilon={self.epsilon:g}, sensitivity={self.sensitivity:g}, "
                f"scale={self.scale:g}, grid=2^{int(np.log2(self.grid))})")


class DiscreteLaplace(Mechanism):
    """``f(D) + Z`` on the integers, ``P(Z = z) proportional to exp(-|z| epsilon / sensitivity)``.

    For integer-valued queries (counts) with an integer L1 ``sensitivity``. The noise is
    drawn exactly (:func:`veil.dp.samplers.discrete_laplace`), so there is nothing for
    floating point to leak. Cost: ``DiscreteLaplaceDpEvent(epsilon / sensitivity,
    sensitivity)`` (accounted by the PLD accountant).
    """

    def __init__(self, epsilon: float, delta: float = 0.0, sensitivity: int = 1) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = _pure(delta, "discrete Laplace")
        self.sensitivity = check_int(sensitivity, "sensitivity", low=1)
        self.scale = div_up(float(self.sensitivity), self.epsilon)  # t >= sensitivity / epsilon

    @property
    def event(self) -> de.DpEvent:
        # the sampler's parameter is 1/t <= epsilon/sensitivity; the event's is >= 1/t
        return de.DiscreteLaplaceDpEvent(div_up(1.0, self.scale), self.sensitivity)

    def check(self, value: Any) -> np.ndarray:
        """Integer values (DataError otherwise)."""
        return check_integer_value(value, "discrete Laplace")

    def _randomize(self, value: Any, rng: Generator) -> Any:
        x = self.check(value)
        noisy = x + discrete_laplace(self.scale, x.shape, rng)
        return int(noisy) if x.ndim == 0 else noisy

    def __repr__(self) -> str:
        return (f"DiscreteLaplace(epsilon={self.epsilon:g}, sensitivity={self.sensitivity}, "
                f"scale={self.scale:g})")


#: the two-sided geometric mechanism of Ghosh, Roughgarden & Sundararajan (2009)
Geometric = DiscreteLaplace
