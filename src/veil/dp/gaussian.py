"""The Gaussian mechanism (analytic or classical calibration, floating-point safe) and the
discrete Gaussian mechanism.

For ``f`` with L2 sensitivity ``Delta`` the Gaussian mechanism releases
``f(D) + N(0, sigma^2 I)``. Two calibrations of sigma for a target (epsilon, delta):

* ``"analytic"`` (the default; Balle & Wang 2018, Theorem 8 and Algorithm 1): the exact
  condition. The mechanism is (epsilon, delta)-DP iff
  ``Phi(Delta/(2 sigma) - epsilon sigma/Delta) - e^epsilon Phi(-Delta/(2 sigma) -
  epsilon sigma/Delta) <= delta``; veil takes the smallest such sigma (bisection, rounded
  up). Valid for every epsilon > 0.
* ``"classical"`` (Dwork & Roth 2014, Theorem A.1): ``sigma = sqrt(2 ln(1.25/delta)) *
  Delta / epsilon``, proved only for epsilon < 1 (refused otherwise). It is never smaller
  than the analytic sigma.

The discrete Gaussian mechanism (Canonne, Kamath & Steinke 2020) adds
``P(z) proportional to exp(-z^2 / (2 sigma^2))`` noise to integer-valued queries; it is
``Delta^2 / (2 sigma^2)``-zCDP for L2 sensitivity Delta (their Theorem 14), and veil
calibrates rho to (epsilon, delta) by the conversion the RDP accountant certifies with
(:func:`zcdp_rho`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from dp_accounting import dp_event as de
from scipy.special import log_ndtr

from veil._validation import check_choice, check_delta, check_epsilon, check_positive
from veil.dp._numeric import check_grid_value, check_integer_value, div_down, noise_grid
from veil.dp.accounting.rdp import DEFAULT_ORDERS
from veil.dp.mechanism import Mechanism
from veil.dp.samplers import discrete_gaussian, gaussian_grid
from veil.errors import ConfigError
from veil.random import Generator

__all__ = ["Gaussian", "DiscreteGaussian", "analytic_gaussian_sigma",
           "classical_gaussian_sigma", "gaussian_delta"]

CALIBRATIONS = ("analytic", "classical")


def _positive_delta(delta: Any) -> float:
    d = check_delta(delta)
    if d == 0.0:
        raise ConfigError("delta=0 is not allowed for a Gaussian mechanism: it needs "
                          "delta in (0, 1); use Laplace for pure epsilon-DP")
    return d


def _log_delta(s: float, epsilon: float) -> float:
    """ln delta(epsilon) of the Gaussian mechanism with noise multiplier s = sigma/Delta."""
    a, b = 1.0 / (2.0 * s), epsilon * s
    x = float(log_ndtr(a - b))
    y = epsilon + float(log_ndtr(-a - b))
    return x + math.log1p(-math.exp(y - x)) if y < x else -math.inf


def gaussian_delta(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """The exact delta at ``epsilon`` of the Gaussian mechanism (Balle & Wang 2018, Thm. 8)."""
    return math.exp(_log_delta(sigma / sensitivity, epsilon))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """The smallest sigma for (epsilon, delta)-DP (Balle & Wang 2018), rounded up.

    Bisection on the noise multiplier ``s = sigma / Delta`` (delta(s) decreases in s) to a
    relative width of 1e-13; the upper end, raised by 1e-10 relative to absorb the error of
    evaluating Phi, is returned.
    """
    epsilon = check_epsilon(epsilon)
    target = math.log(_positive_delta(delta))
    sensitivity = check_positive(sensitivity, "sensitivity")
    lo, hi = 1.0, 1.0
    while _log_delta(hi, epsilon) > target:
        lo, hi = hi, hi * 2.0
    while lo == hi or _log_delta(lo, epsilon) <= target:
        lo /= 2.0
        if lo < 1e-300:
            break
    while hi - lo > 1e-13 * hi:
        mid = 0.5 * (lo + hi)
        if _log_delta(mid, epsilon) > target:
            lo = mid
        else:
            hi = mid
    return hi * (1.0 + 1e-10) * sensitivity


def classical_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """``sqrt(2 ln(1.25/delta)) * sensitivity / epsilon`` (Dwork & Roth 2014, Thm. A.1),
    valid for epsilon < 1 only."""
    epsilon = check_epsilon(epsilon)
    delta = _positive_delta(delta)
    sensitivity = check_positive(sensitivity, "sensitivity")
    if epsilon >= 1.0:
        raise ConfigError(f"epsilon={epsilon!r} is not allowed with calibration='classical': "
                          "its proof needs epsilon < 1; use calibration='analytic'")
    return math.sqrt(2.0 * math.log(1.25 / delta)) * sensitivity / epsilon * (1.0 + 1e-12)


class Gaussian(Mechanism):
    """``f(D) + N(0, sigma^2)`` per coordinate, released on a grid (floating-point safe).

    ``calibration="analytic"`` (default, Balle & Wang 2018) or ``"classical"`` (Dwork &
    Roth 2014, epsilon < 1); ``sensitivity`` is the L2 sensitivity. ``sigma`` is exposed.

    Floating-point safety: the release is ``grid * round((f(D) + N(0, sigma^2)) / grid)``
    with ``grid`` the power of two in ``(sigma/2048, sigma/1024]``; the integer is drawn
    exactly by :func:`veil.dp.samplers.rounded_gaussian`. The release is thus the exact
    continuous Gaussian mechanism followed by rounding (post-processing), so the reported
    (epsilon, delta) holds exactly and no low-order bit depends on ``f(D)`` (Mironov
    2012). Rounding adds at most ``grid/2 <= sigma/2048``.

    Cost: ``GaussianDpEvent(sigma / sensitivity)``.
    """

    def __init__(self, epsilon: float, delta: float, sensitivity: float = 1.0, *,
                 calibration: str = "analytic") -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = _positive_delta(delta)
        self.sensitivity = check_positive(sensitivity, "sensitivity")
        self.calibration = check_choice(calibration, "calibration", CALIBRATIONS)
        calibrate = (analytic_gaussian_sigma if calibration == "analytic"
                     else classical_gaussian_sigma)
        self.sigma = calibrate(self.epsilon, self.delta, self.sensitivity)
        self.scale = self.sigma
        self.grid = noise_grid(self.sigma)

    @property
    def event(self) -> de.DpEvent:
        return de.GaussianDpEvent(div_down(self.sigma, self.sensitivity))

    def check(self, value: Any) -> np.ndarray:
        """Validate a value before anything is charged (DataError for bad data)."""
        return check_grid_value(value, self.grid)

    def _randomize(self, value: Any, rng: Generator) -> Any:
        x = self.check(value)
        noisy = gaussian_grid(x.ravel(), self.sigma / self.grid, self.grid, rng)
        noisy *= self.grid
        return float(noisy[0]) if x.ndim == 0 else noisy.reshape(x.shape)

    def __repr__(self) -> str:
        return (f"Gaussian(epsilon={self.epsilon:g}, delta={self.delta:g}, "
                f"sensitivity={self.sensitivity:g}, sigma={self.sigma:g}, "
                f"calibration={self.calibration!r})")


def zcdp_rho(epsilon: float, delta: float) -> float:
    """The largest rho whose rho-zCDP certifies (epsilon, delta)-DP, by either of two
    conversions of a zCDP guarantee, whichever allows the larger rho:

    * the RDP conversion of Canonne, Kamath & Steinke (2020, Prop. 12) on the orders alpha
      of the RDP accountant (:data:`veil.dp.accounting.rdp.DEFAULT_ORDERS`): rho-zCDP is
      (alpha, alpha rho)-RDP for every alpha > 1 (Bun & Steinke 2016, Def. 1.1), hence
      (epsilon, delta)-DP when ``alpha rho + log(1 - 1/alpha) - log(delta alpha) / (alpha -
      1) <= epsilon`` for some alpha; solved for rho at each order. This is the conversion
      the ledger's RDP accountant applies to the ``ZCDpEvent``, so the ledger certifies the
      mechanism at epsilon, not above it nor needlessly below;
    * Bun & Steinke (2016, Prop. 1.3): ``rho + 2 sqrt(rho ln(1/delta)) <= epsilon`` (larger
      only for tiny epsilon at tiny delta, where no order of the grid is close enough to 1).

    At epsilon = 1, delta = 1e-5 the first gives rho = 0.0305 (Bun & Steinke: 0.0208), so
    sigma = Delta / sqrt(2 rho) is 18% smaller.
    """
    log_inv = math.log(1.0 / delta)
    # (sqrt(L + eps) - sqrt(L))^2 written without the difference, which cancels to 0 for a
    # tiny epsilon, and without squaring sqrt(L + eps), which overflows for a huge one
    rho = (epsilon / (math.sqrt(log_inv + epsilon) + math.sqrt(log_inv))) ** 2
    if not rho > 0:
        raise ConfigError(f"epsilon={epsilon:g} is too small for zCDP at delta={delta:g}: "
                          "rho underflows to 0 (no noise scale is finite)")
    while rho + 2.0 * math.sqrt(rho) * math.sqrt(log_inv) > epsilon:  # rho * L may overflow
        rho = math.nextafter(rho, 0.0)
    orders = np.array([a for a in DEFAULT_ORDERS if a > 1.01])  # the accountant's own cut
    by_order = (epsilon - np.log1p(-1.0 / orders) + np.log(delta * orders) / (orders - 1.0)) \
        / orders
    best = int(np.argmax(by_order))
    if by_order[best] <= rho:
        return rho
    rho, alpha = float(by_order[best]), float(orders[best])
    while rho * alpha + math.log1p(-1.0 / alpha) - math.log(delta * alpha) / (alpha - 1.0) \
            > epsilon:  # rounding: step down until the certificate holds in floating point
        rho = math.nextafter(rho, 0.0)
    return rho


class DiscreteGaussian(Mechanism):
    """``f(D) + Z`` on the integers, ``P(Z = z) proportional to exp(-z^2 / (2 sigma^2))``.

    For integer-valued queries with L2 ``sensitivity``. Calibration: ``rho`` from
    (epsilon, delta) by :func:`zcdp_rho`, ``sigma = sensitivity / sqrt(2 rho)``
    (Canonne, Kamath & Steinke 2020, Thm. 14: rho-zCDP for vectors too). The noise is
    drawn exactly with their Algorithm 3 (:func:`veil.dp.samplers.discrete_gaussian`).

    Cost: ``ZCDpEvent(rho)``. The discrete Gaussian is *not* dominated by the continuous
    Gaussian of the same sigma in (epsilon, delta) (at sigma = 0.5, sensitivity 1,
    epsilon = 5 its delta is twice as large), so no ``GaussianDpEvent`` is claimed; the
    RDP accountant composes zCDP exactly.
    """

    def __init__(self, epsilon: float, delta: float, sensitivity: float = 1.0) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = _positive_delta(delta)
        self.sensitivity = check_positive(sensitivity, "sensitivity")
        self.rho = zcdp_rho(self.epsilon, self.delta)
        self.sigma = self.sensitivity / math.sqrt(2.0 * self.rho) * (1.0 + 1e-12)

    @property
    def event(self) -> de.DpEvent:
        return de.ZCDpEvent(self.rho)

    def check(self, value: Any) -> np.ndarray:
        """Integer values (DataError otherwise)."""
        return check_integer_value(value, "discrete Gaussian")

    def _randomize(self, value: Any, rng: Generator) -> Any:
        x = self.check(value)
        noisy = x + discrete_gaussian(self.sigma, x.shape, rng)
        return int(noisy) if x.ndim == 0 else noisy

    def __repr__(self) -> str:
        return (f"DiscreteGaussian(epsilon={self.epsilon:g}, delta={self.delta:g}, "
                f"sensitivity={self.sensitivity:g}, sigma={self.sigma:g})")
