"""The (epsilon, delta) guarantee of one event, for basic and advanced composition.

Closed forms only: a pure-DP event's epsilon (:func:`pure_epsilon`; its randomized-response
stand-in, :func:`pure_stand_in`), a tree of Gaussians as one Gaussian
(:func:`gaussian_noise_multiplier`) with its exact epsilon (:func:`gaussian_epsilon`,
Balle & Wang 2018), and amplification by Poisson subsampling (:func:`event_guarantee`).
"""

from __future__ import annotations

import math

import dp_accounting
from dp_accounting import dp_event as de
from scipy import special

from veil.dp.accounting.traversal import fold, without_replacement_bound

__all__ = ["event_guarantee", "gaussian_epsilon", "gaussian_noise_multiplier", "pure_epsilon",
           "pure_stand_in"]


class _PureEpsilon:
    """Pure-DP epsilon of an event tree, or None when the event is not pure DP."""

    def zero(self) -> float | None:
        return 0.0

    def non_private(self) -> float | None:
        return math.inf

    def leaf(self, event: de.DpEvent) -> float | None:
        if isinstance(event, de.LaplaceDpEvent):
            # Laplace with scale b over sensitivity 1: loss |x|/b - |x-1|/b <= 1/b.
            return math.inf if event.noise_multiplier == 0 else 1.0 / event.noise_multiplier
        if isinstance(event, de.DiscreteLaplaceDpEvent):
            # P(x)/P(x-s) = exp(-a|x| + a|x-s|) <= exp(a s).
            return event.noise_parameter * event.sensitivity
        if isinstance(event, de.RandomizedResponseDpEvent):
            # keep w.p. 1-p, else uniform over k: worst ratio (1 - p + p/k) / (p/k).
            p, k = event.noise_parameter, event.num_buckets
            if k == 1 or p == 1.0:
                return 0.0
            return math.inf if p == 0 else math.log1p(k * (1.0 - p) / p)
        if isinstance(event, de.PoissonSampledDpEvent):
            # Amplification by Poisson subsampling: log(1 + q (e^eps - 1)) (Li, Qardaji &
            # Su 2012; Balle, Barthe & Gaboardi 2018, Thm. 8).
            inner = fold(event.event, self)
            if inner is None:
                return None
            q = event.sampling_probability
            if math.isinf(inner):
                return 0.0 if q == 0 else math.inf
            return math.log1p(q * math.expm1(inner))
        return None

    def repeat(self, cost: float | None, count: int) -> float | None:
        return None if cost is None else cost * count

    def combine(self, a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else a + b

    def parallel(self, costs: list[float | None]) -> float | None:
        return None if any(c is None for c in costs) else max(costs)


def pure_epsilon(event: de.DpEvent) -> float | None:
    """The epsilon of a pure-DP event tree (delta = 0), or None if it is not pure DP."""
    return fold(event, _PureEpsilon())


def pure_stand_in(event: de.DpEvent) -> de.RandomizedResponseDpEvent | None:
    """Binary randomized response with odds e^eps for a pure eps-DP event, else None.

    Every eps-DP mechanism is a post-processing of this randomized response on any
    neighbouring pair (Kairouz, Oh & Viswanath 2015), so an accountant may price an event
    it has no formula for by this stand-in (noise parameter ``2 / (1 + e^eps)``).
    """
    eps = pure_epsilon(event)
    if eps is None or not math.isfinite(eps):
        return None
    return de.RandomizedResponseDpEvent(2.0 / (1.0 + math.exp(eps)), 2)


def gaussian_noise_multiplier(event: de.DpEvent) -> float | None:
    """The single Gaussian equivalent to a tree of Gaussians, else None.

    Gaussians with multipliers s_i composed on the same data equal one Gaussian with
    ``s = (sum_i s_i^-2)^(-1/2)`` (their privacy losses are independent normals whose
    means and variances add).
    """
    if isinstance(event, de.GaussianDpEvent):
        s = event.noise_multiplier
        return s if s > 0 else None
    if isinstance(event, de.SelfComposedDpEvent):
        s = gaussian_noise_multiplier(event.event)
        return None if s is None or event.count == 0 else s / math.sqrt(event.count)
    if isinstance(event, de.ComposedDpEvent) and event.events:
        parts = [gaussian_noise_multiplier(e) for e in event.events]
        if any(s is None for s in parts):
            return None
        return sum(s ** -2.0 for s in parts) ** -0.5
    return None


def _gaussian_log_delta(sigma: float, eps: float) -> float:
    """log delta(eps) of the Gaussian mechanism with multiplier sigma (Balle & Wang 2018)."""
    a = float(special.log_ndtr(0.5 / sigma - eps * sigma))
    b = eps + float(special.log_ndtr(-0.5 / sigma - eps * sigma))
    return a + math.log1p(-math.exp(b - a)) if b < a else -math.inf


def gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """Exact epsilon of the Gaussian mechanism at ``delta`` (Balle & Wang 2018, Thm. 8).

    ``delta(eps) = Phi(1/(2s) - eps s) - e^eps Phi(-1/(2s) - eps s)`` is inverted by
    dp_accounting's root finder; the result is then checked against the formula and
    nudged up until ``delta(eps) <= delta``, so it is never below the true epsilon.
    """
    eps = float(dp_accounting.get_epsilon_gaussian(noise_multiplier, delta, tol=1e-12))
    if not math.isfinite(eps):
        return math.inf
    log_delta, step = math.log(delta), 1e-12 * max(1.0, eps)
    while _gaussian_log_delta(noise_multiplier, eps) > log_delta:
        eps, step = eps + step, 2 * step
    return eps


def event_guarantee(event: de.DpEvent, delta: float | None) -> tuple[float, float] | None:
    """An (epsilon_i, delta_i) guarantee for one event, or None if none is cheap to state.

    * pure events: ``(eps, 0)`` in closed form;
    * a tree of Gaussians: its exact analytic epsilon at ``delta``;
    * a Poisson-subsampled tree of Gaussians (rate q > delta): amplification of the
      Gaussian's ``(eps_G, delta/q)`` to ``(log(1 + q (e^eps_G - 1)), delta)`` (Balle,
      Barthe & Gaboardi 2018, Thm. 8); a fixed-size batch after the coupling rewrite.

    (Basic composition prices any other event by the RDP and PLD accountants:
    :meth:`veil.dp.accounting.BasicAccountant.guarantee`.)
    """
    eps = pure_epsilon(event)
    if eps is not None:
        return eps, 0.0
    if delta is None or delta <= 0:
        return None
    if isinstance(event, de.SampledWithoutReplacementDpEvent):
        return event_guarantee(without_replacement_bound(event), delta)
    sigma = gaussian_noise_multiplier(event)
    if sigma is not None:
        return gaussian_epsilon(sigma, delta), delta
    if isinstance(event, de.PoissonSampledDpEvent):
        q, sigma = event.sampling_probability, gaussian_noise_multiplier(event.event)
        if sigma is not None and delta < q:
            return math.log1p(q * math.expm1(gaussian_epsilon(sigma, delta / q))), delta
    return None
