"""Gaussian-DP by the central limit theorem: an *approximation*, never used for budgets.

A mu-GDP mechanism is as hard to attack as telling N(0,1) from N(mu,1) (Dong, Roth & Su
2019); mu's compose as ``sqrt(sum mu_i^2)``. A Gaussian with multiplier s is exactly
(1/s)-GDP. T Poisson-subsampled Gaussian steps are *approximately* mu-GDP with
``mu = q sqrt(T (e^(1/s^2) - 1))`` (Bu, Dong, Long & Su 2020, Cor. 5), a limit that can
under-state epsilon for realistic T. The conversion is exact for mu-GDP:
``delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)``.

The accountant is marked ``certified = False``: a Ledger refuses it and calibration does
not use it; :func:`~veil.dp.accounting.epsilon_for` labels its result as an approximation.
"""

from __future__ import annotations

import math

from dp_accounting import dp_event as de
from scipy import optimize, special

from veil.dp.accounting.base import Accountant
from veil.dp.accounting.events import describe
from veil.dp.accounting.guarantees import gaussian_noise_multiplier
from veil.dp.accounting.traversal import fold
from veil.errors import ConfigError

__all__ = ["GDPAccountant", "gdp_delta"]


def _log_phi(x: float) -> float:
    return float(special.log_ndtr(x))


def gdp_delta(mu: float, epsilon: float) -> float:
    """delta of mu-GDP at epsilon (Dong, Roth & Su 2019, Cor. 2.13)."""
    if mu == 0:
        return 0.0
    if math.isinf(mu):
        return 1.0
    a = _log_phi(-epsilon / mu + mu / 2)
    b = epsilon + _log_phi(-epsilon / mu - mu / 2)
    return math.exp(a) * -math.expm1(b - a) if b < a else 0.0


class _MuSquared:
    """The GDP algebra: costs are mu^2 (additive under composition)."""

    def zero(self) -> float:
        return 0.0

    def non_private(self) -> float:
        return math.inf

    def leaf(self, event: de.DpEvent) -> float:
        if isinstance(event, de.GaussianDpEvent):
            s = event.noise_multiplier
            return math.inf if s == 0 else s ** -2.0
        if isinstance(event, de.PoissonSampledDpEvent):
            s = gaussian_noise_multiplier(event.event)
            if s is not None:  # per-step share of the CLT limit (Bu et al. 2020)
                x = s ** -2.0
                return event.sampling_probability ** 2 * (math.expm1(x) if x < 700 else math.inf)
        raise ConfigError(f"{describe(event)} is not supported by the 'gdp' approximation")

    def repeat(self, cost: float, count: int) -> float:
        return cost * count

    def combine(self, a: float, b: float) -> float:
        return a + b

    def parallel(self, costs: list[float]) -> float:
        return max(costs)


class GDPAccountant(Accountant):
    """CLT approximation of Gaussian DP (labelled approximate; not for budgets)."""

    name = "gdp"
    certified = False

    def __init__(self) -> None:
        super().__init__()
        self._mu_sq = 0.0

    @property
    def mu(self) -> float:
        return math.sqrt(self._mu_sq)

    def _compose(self, event: de.DpEvent) -> None:
        self._mu_sq += fold(event, _MuSquared())

    def _epsilon(self, delta: float) -> float:
        mu = self.mu
        if mu == 0:
            return 0.0
        if delta == 0 or math.isinf(mu):
            return math.inf
        if gdp_delta(mu, 0.0) <= delta:
            return 0.0
        hi = 1.0
        while gdp_delta(mu, hi) > delta:
            hi *= 2.0
        return float(optimize.brentq(lambda e: gdp_delta(mu, e) - delta, 0.0, hi, xtol=1e-12))

    def _delta(self, epsilon: float) -> float:
        return gdp_delta(self.mu, epsilon)
